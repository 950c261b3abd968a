//! A partition's limits from `scontrol -o show partition` and the check of one task's request
//! against them (`MaxTime`, `MaxMemPerNode`, `MaxMemPerCPU`, `MaxCPUsPerNode`, `MaxNodes`,
//! `TotalNodes`), so that a request the partition can never run is refused before submitting
//! instead of pending forever (`PartitionTimeLimit`).
//!
//! Units: times in seconds, memory in MiB (Slurm's `M`), as `scontrol` prints them.

use std::time::Duration;

/// The limits of one partition; `None` = `UNLIMITED` (or not printed).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartitionLimits {
    /// `PartitionName`.
    pub name: String,
    /// `Default=YES`.
    pub default: bool,
    /// `State` (`UP`, `DOWN`, `DRAIN`, `INACTIVE`).
    pub state: String,
    /// `MaxTime`, seconds.
    pub max_time: Option<u64>,
    /// `MaxMemPerNode`, MiB.
    pub max_mem_per_node: Option<u64>,
    /// `MaxMemPerCPU`, MiB (printed instead of `MaxMemPerNode` when that is the limit set).
    pub max_mem_per_cpu: Option<u64>,
    /// `MaxCPUsPerNode`.
    pub max_cpus_per_node: Option<u64>,
    /// `MaxNodes` (per job).
    pub max_nodes: Option<u64>,
    /// `TotalNodes`.
    pub total_nodes: Option<u64>,
}

/// What one array task asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskRequest {
    /// `--time`, seconds (rounded up).
    pub time: Option<u64>,
    /// `--mem` (per node), MiB.
    pub mem_per_node: Option<u64>,
    /// `--mem-per-cpu`, MiB.
    pub mem_per_cpu: Option<u64>,
    /// `--cpus-per-task`.
    pub cpus: u64,
    /// `--nodes` (minimum), default 1.
    pub nodes: u64,
}

/// `[D-]HH:MM:SS`, `MM:SS`, `MM` (minutes) or `UNLIMITED`/`INFINITE` in seconds (`None` for
/// unlimited); `Err` for anything else.
///
/// # Errors
/// The text when it is no Slurm time.
pub fn parse_time(text: &str) -> Result<Option<u64>, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("UNLIMITED") || t.eq_ignore_ascii_case("INFINITE") {
        return Ok(None);
    }
    let bad = || format!("not a Slurm time: {t:?}");
    let (days, rest) = match t.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().map_err(|_| bad())?, r),
        None => (0, t),
    };
    let parts: Vec<u64> = rest
        .split(':')
        .map(|p| p.parse::<u64>().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let secs = match (t.contains('-'), parts.as_slice()) {
        (_, [h, m, s]) => h * 3600 + m * 60 + s,
        (false, [m, s]) => m * 60 + s,
        (true, [h, m]) => h * 3600 + m * 60,
        (false, [m]) => m * 60,
        (true, [h]) => h * 3600,
        _ => return Err(bad()),
    };
    Ok(Some(days * 86_400 + secs))
}

/// A Slurm memory size (`4G`, `500M`, `1024` = MiB, `2T`, `512K`) in MiB, rounded up.
///
/// # Errors
/// The text when it is no size.
pub fn parse_mem_mib(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("not a Slurm memory size: {t:?}"))?;
    Ok(match unit.to_ascii_uppercase().as_str() {
        "" | "M" | "MB" => n,
        "K" | "KB" => n.div_ceil(1024),
        "G" | "GB" => n * 1024,
        "T" | "TB" => n * 1024 * 1024,
        _ => return Err(format!("not a Slurm memory size: {t:?}")),
    })
}

fn limit(v: &str) -> Option<u64> {
    v.parse().ok()
}

/// Parses `scontrol -o show partition` (one partition a line, `Key=Value` words).
pub fn parse_partitions(text: &str) -> Vec<PartitionLimits> {
    text.lines()
        .filter(|l| l.contains("PartitionName="))
        .map(|line| {
            let mut p = PartitionLimits::default();
            for word in line.split_whitespace() {
                let Some((k, v)) = word.split_once('=') else {
                    continue;
                };
                match k {
                    "PartitionName" => p.name = v.to_string(),
                    "Default" => p.default = v == "YES",
                    "State" => p.state = v.to_string(),
                    "MaxTime" => p.max_time = parse_time(v).ok().flatten(),
                    "MaxMemPerNode" => p.max_mem_per_node = limit(v),
                    "MaxMemPerCPU" => p.max_mem_per_cpu = limit(v),
                    "MaxCPUsPerNode" => p.max_cpus_per_node = limit(v),
                    "MaxNodes" => p.max_nodes = limit(v),
                    "TotalNodes" => p.total_nodes = limit(v),
                    _ => {}
                }
            }
            p
        })
        .collect()
}

/// Reads `--mem`, `--mem-per-cpu` and `--nodes`/`-N` from sbatch arguments (`--mem=4G`,
/// `--mem 4G`, `-N2`); later ones win, as with sbatch. The minimum of a `--nodes=2-4` range.
///
/// # Errors
/// A message naming an argument whose value is no size or count.
pub fn request_from_args(args: &[String], request: &mut TaskRequest) -> Result<(), String> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ if a.starts_with("-N") && a.len() > 2 => ("-N", Some(a[2..].to_string())),
            _ => (a, None),
        };
        let known = matches!(name, "--mem" | "--mem-per-cpu" | "--nodes" | "-N");
        if !known {
            i += 1;
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => {
                i += 1;
                match args.get(i) {
                    Some(v) => v.clone(),
                    None => return Err(format!("sbatch-args: `{name}` has no value")),
                }
            }
        };
        let what = |e: String| format!("sbatch-args `{name}`: {e}");
        match name {
            "--mem" => request.mem_per_node = Some(parse_mem_mib(&value).map_err(what)?),
            "--mem-per-cpu" => request.mem_per_cpu = Some(parse_mem_mib(&value).map_err(what)?),
            _ => {
                let min = value.split('-').next().unwrap_or_default();
                request.nodes = min
                    .parse()
                    .map_err(|_| what(format!("not a node count: {value:?}")))?;
            }
        }
        i += 1;
    }
    Ok(())
}

fn hms(secs: u64) -> String {
    super::script::format_slurm_time(Duration::from_secs(secs))
}

/// Every way `request` exceeds `p`'s limits, each naming both numbers:
/// `the time limit 00:03:05 is above partition debug's MaxTime 00:01:00`.
pub fn check(p: &PartitionLimits, request: &TaskRequest) -> Vec<String> {
    let mut out = Vec::new();
    let name = &p.name;
    if let (Some(t), Some(max)) = (request.time, p.max_time)
        && t > max
    {
        out.push(format!(
            "the time limit {} ({t} s) is above partition {name}'s MaxTime {} ({max} s): its tasks would pend forever (PartitionTimeLimit); lower [isolation] timeout or [executor] time-margin, or choose another partition",
            hms(t),
            hms(max)
        ));
    }
    if let (Some(m), Some(max)) = (request.mem_per_node, p.max_mem_per_node)
        && m > max
    {
        out.push(format!(
            "the memory request --mem={m}M is above partition {name}'s MaxMemPerNode {max}M"
        ));
    }
    if let Some(max) = p.max_mem_per_cpu {
        if let Some(m) = request.mem_per_cpu
            && m > max
        {
            out.push(format!(
                "the memory request --mem-per-cpu={m}M is above partition {name}'s MaxMemPerCPU {max}M"
            ));
        }
        if let Some(m) = request.mem_per_node {
            let cpus = request.cpus.max(1);
            if m > max.saturating_mul(cpus) {
                out.push(format!(
                    "the memory request --mem={m}M is above partition {name}'s MaxMemPerCPU {max}M times {cpus} CPU(s) ({}M)",
                    max.saturating_mul(cpus)
                ));
            }
        }
    }
    if let Some(max) = p.max_cpus_per_node
        && request.cpus > max
    {
        out.push(format!(
            "cpus-per-run {} is above partition {name}'s MaxCPUsPerNode {max}",
            request.cpus
        ));
    }
    if let Some(max) = p.max_nodes
        && request.nodes > max
    {
        out.push(format!(
            "the request of {} nodes is above partition {name}'s MaxNodes {max}",
            request.nodes
        ));
    }
    if let Some(total) = p.total_nodes
        && request.nodes > total
    {
        out.push(format!(
            "the request of {} nodes is above partition {name}'s {total} node(s) (TotalNodes)",
            request.nodes
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(parse_time("UNLIMITED").unwrap(), None);
        assert_eq!(parse_time("00:01:00").unwrap(), Some(60));
        assert_eq!(parse_time("1-02:00:00").unwrap(), Some(93_600));
        assert_eq!(parse_time("5").unwrap(), Some(300));
        assert_eq!(parse_time("2:30").unwrap(), Some(150));
        assert_eq!(parse_time("1-2").unwrap(), Some(93_600));
        assert!(parse_time("soon").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_mem_mib("4G").unwrap(), 4096);
        assert_eq!(parse_mem_mib("500").unwrap(), 500);
        assert_eq!(parse_mem_mib("1025K").unwrap(), 2);
        assert!(parse_mem_mib("lots").is_err());
    }

    const SHOW: &str = "PartitionName=debug AllowGroups=ALL Default=YES MaxNodes=UNLIMITED MaxTime=00:01:00 MinNodes=0 MaxCPUsPerNode=UNLIMITED Nodes=n[1-2] State=UP TotalCPUs=8 TotalNodes=2 DefMemPerNode=UNLIMITED MaxMemPerNode=1000\n\
PartitionName=long Default=NO MaxTime=UNLIMITED State=UP TotalNodes=2 MaxMemPerCPU=100\n";

    #[test]
    fn partitions_and_checks() {
        let ps = parse_partitions(SHOW);
        assert_eq!(ps.len(), 2);
        let debug = &ps[0];
        assert!(debug.default);
        assert_eq!(debug.max_time, Some(60));
        assert_eq!(debug.max_mem_per_node, Some(1000));
        assert_eq!(debug.total_nodes, Some(2));
        let mut req = TaskRequest {
            time: Some(185),
            cpus: 1,
            nodes: 1,
            ..TaskRequest::default()
        };
        request_from_args(&["--mem=2G".into(), "-N".into(), "3".into()], &mut req).unwrap();
        let problems = check(debug, &req);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("00:03:05") && problems[0].contains("00:01:00"));
        assert!(problems[1].contains("2048M") && problems[1].contains("1000M"));
        assert!(problems[2].contains("3 nodes") && problems[2].contains("2 node(s)"));
        let long = &ps[1];
        req.nodes = 1;
        let p = check(long, &req);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("MaxMemPerCPU 100M"));
        assert!(
            check(
                long,
                &TaskRequest {
                    cpus: 1,
                    nodes: 1,
                    ..TaskRequest::default()
                }
            )
            .is_empty()
        );
    }

    #[test]
    fn bad_args() {
        let mut req = TaskRequest::default();
        assert!(request_from_args(&["--mem".into()], &mut req).is_err());
        assert!(request_from_args(&["--mem=big".into()], &mut req).is_err());
        request_from_args(
            &["--constraint".into(), "x".into(), "--nodes=2-4".into()],
            &mut req,
        )
        .unwrap();
        assert_eq!(req.nodes, 2);
    }
}
