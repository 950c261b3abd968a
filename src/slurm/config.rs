//! The cluster's configuration as `scontrol show config` and `sacctmgr` print it: the array
//! limits, the job-record limits ([`JobLimits`]) and the least submit limit.

use super::array::ArrayLimits;

/// `scontrol show config` lines `Key = value` (spaces around `=` vary) in order.
pub(super) fn parse_config(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let (k, v) = line.split_once('=')?;
            let key = k.trim();
            (!key.is_empty() && !key.contains(' ')).then(|| (key.to_string(), v.trim().to_string()))
        })
        .collect()
}

/// [`ArrayLimits`] from parsed `scontrol show config` pairs.
pub(super) fn array_limits(config: &[(String, String)]) -> Result<ArrayLimits, String> {
    let get = |key: &str| config.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    let size = get("MaxArraySize").ok_or("no MaxArraySize line")?;
    let max_array_size = size
        .parse()
        .map_err(|_| format!("MaxArraySize `{size}` is not a number"))?;
    let max_array_tasks = get("SchedulerParameters").and_then(|params| {
        params
            .split(',')
            .find_map(|p| p.trim().strip_prefix("max_array_tasks="))
            .and_then(|n| n.parse().ok())
    });
    Ok(ArrayLimits {
        max_array_size,
        max_array_tasks,
    })
}

/// The cluster's limits on job records (`scontrol show config`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobLimits {
    /// `MaxJobCount`: job records the controller holds at once (Slurm's default 10,000). Every
    /// task of an array counts, pending ones included, and finished ones until purged
    /// `MinJobAge` after they ended; a submission that would reach it is refused (`sbatch`
    /// retries for about two minutes, then fails). `None` when not printed.
    pub max_job_count: Option<u64>,
    /// `MinJobAge` in seconds: how long a finished job's record stays (default 300).
    pub min_job_age: Option<u64>,
    /// Whether `AccountingStorageType` is `accounting_storage/slurmdbd` (associations exist).
    pub accounting: bool,
}

/// [`JobLimits`] from parsed `scontrol show config` pairs.
pub(super) fn job_limits(config: &[(String, String)]) -> JobLimits {
    let get = |key: &str| config.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    let number = |key: &str| {
        get(key)
            .and_then(|v| v.split_whitespace().next())
            .and_then(|n| n.parse().ok())
    };
    JobLimits {
        max_job_count: number("MaxJobCount"),
        min_job_age: number("MinJobAge"),
        accounting: get("AccountingStorageType").is_some_and(|v| v.ends_with("/slurmdbd")),
    }
}

/// The smallest submit limit in `sacctmgr -nP ... format=Account,MaxSubmit,GrpSubmit` rows (of
/// `account` only, when given); empty fields set no limit.
pub(super) fn parse_submit_limit(text: &str, account: Option<&str>) -> Result<Option<u64>, String> {
    let mut least: Option<u64> = None;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split('|').collect();
        let [acct, max_submit, grp_submit, ..] = fields[..] else {
            return Err(format!("expected Account|MaxSubmit|GrpSubmit, found {line:?}"));
        };
        if account.is_some_and(|a| a != acct.trim()) {
            continue;
        }
        for v in [max_submit, grp_submit]
            .map(str::trim)
            .into_iter()
            .filter(|v| !v.is_empty())
        {
            let n: u64 = v
                .parse()
                .map_err(|_| format!("submit limit `{v}` is not a number in {line:?}"))?;
            least = Some(least.map_or(n, |l| l.min(n)));
        }
    }
    Ok(least)
}
