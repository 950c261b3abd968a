//! plan.json (DESIGN 5): built from a [`Plan`] and streamed one run at a time, and the part of
//! the bundle's layout that planning needs ([`RUN_FOLDER_LAYOUT`]).
//!
//! The plan knows nothing of the bundle; the bundle builds its records ([`PlanFile`],
//! [`PlannedRunRecord`], [`EnvChanges`]) from the plan.

use std::io::{self, Write};

#[cfg(doc)]
use super::format::PlanFile;
use super::format::{BUNDLE_FORMAT, EnvChanges, PlannedRunRecord, files};
use crate::manifest::EnvPolicy;
use crate::plan::{Plan, PlannedRun, RunEnv, RunFolderLayout};

/// Where run folders live in a bundle (`runs/`) and the files the runner writes into each
/// (`run.json`, `stderr.log`, `memory.jsonl`), for [`crate::plan::PlanContext::layout`].
pub const RUN_FOLDER_LAYOUT: RunFolderLayout = RunFolderLayout {
    runs: files::RUNS,
    reserved: &[files::RUN, files::STDERR, files::MEMORY, files::MAPPINGS],
};

impl From<&RunEnv> for EnvChanges {
    /// The recorded form of a run's environment changes: the policy as `inherit` or `clean`.
    fn from(env: &RunEnv) -> EnvChanges {
        EnvChanges {
            policy: match env.policy {
                EnvPolicy::Inherit => "inherit".into(),
                EnvPolicy::Clean => "clean".into(),
            },
            set: env.set.clone(),
            unset: env.unset.clone(),
        }
    }
}

impl PlannedRunRecord {
    /// The plan.json entry of `run`, a run of `plan` (which gives the timeout and grace).
    pub fn from_run(plan: &Plan, run: &PlannedRun) -> PlannedRunRecord {
        PlannedRunRecord {
            run_id: run.run_id.clone(),
            index: run.index,
            cell: run.cell.iter().cloned().collect(),
            repetition: run.repetition,
            argv: run.argv.clone(),
            workdir: run.workdir.display().to_string(),
            output: run.output.clone(),
            env: EnvChanges::from(&run.env),
            cpus: run.cpus.clone(),
            timeout_seconds: plan.timeout.map(|d| d.as_secs_f64()),
            grace_seconds: plan.grace.as_secs_f64(),
            allocator: run.allocator.as_ref().map(|a| a.name.clone()),
        }
    }
}

/// A value written as compact JSON through `dyn` (serde's trait is not object safe).
mod erased {
    use std::io::{self, Write};

    pub(super) trait Value {
        fn write(&self, out: &mut dyn Write) -> io::Result<()>;
    }

    impl<T: serde::Serialize> Value for T {
        fn write(&self, out: &mut dyn Write) -> io::Result<()> {
            serde_json::to_writer(out, self).map_err(io::Error::from)
        }
    }
}

/// One plan.json run entry, borrowed from the [`PlannedRun`] (the fields and their order of
/// [`PlannedRunRecord`]): writing it clones nothing.
#[derive(serde::Serialize)]
#[serde(rename_all = "kebab-case")]
struct RunEntry<'a> {
    run_id: &'a str,
    index: usize,
    cell: std::collections::BTreeMap<&'a str, &'a crate::manifest::Value>,
    repetition: u32,
    argv: &'a [String],
    workdir: std::borrow::Cow<'a, str>,
    output: &'a str,
    env: EnvEntry<'a>,
    cpus: &'a [usize],
    timeout_seconds: Option<f64>,
    grace_seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    allocator: Option<&'a str>,
}

/// [`EnvChanges`], borrowed.
#[derive(serde::Serialize)]
struct EnvEntry<'a> {
    policy: &'static str,
    set: &'a [(String, String)],
    unset: &'a [String],
}

/// Writes plan.json (the shape of [`PlanFile`]) to `out`, one run at a time, so writing does not
/// hold every run in memory: compact JSON, the plan's fields first and then each run on a line of
/// its own (`"runs":[` and `]}` on lines of their own), about 300 bytes a run rather than the 880
/// of pretty-printed JSON. Readers stream it ([`crate::bundle::read::Bundle::planned_runs`]).
///
/// # Errors
/// Errors of `out`.
pub fn write_plan_json(plan: &Plan, out: impl Write) -> io::Result<()> {
    let mut out = io::BufWriter::with_capacity(1 << 20, out);
    let field = |out: &mut dyn Write, name: &str, value: &dyn erased::Value| -> io::Result<()> {
        write!(out, "{}\"{name}\":", if name == "format" { "{" } else { "," })?;
        value.write(out)
    };
    field(&mut out, "format", &BUNDLE_FORMAT)?;
    field(&mut out, "order", &plan.order)?;
    field(&mut out, "seed", &plan.seed)?;
    field(&mut out, "jobs", &plan.jobs)?;
    field(&mut out, "matrix-keys", &plan.matrix_keys)?;
    field(&mut out, "output-format", &plan.output_format)?;
    field(
        &mut out,
        "sample-interval-seconds",
        &plan.sample_interval.map(|d| d.as_secs_f64()),
    )?;
    out.write_all(b",\"runs\":[")?;
    let timeout_seconds = plan.timeout.map(|d| d.as_secs_f64());
    let grace_seconds = plan.grace.as_secs_f64();
    for (i, run) in plan.runs().enumerate() {
        out.write_all(if i == 0 { b"\n" } else { b",\n" })?;
        let entry = RunEntry {
            run_id: &run.run_id,
            index: run.index,
            cell: run.cell.iter().map(|(k, v)| (k.as_str(), v)).collect(),
            repetition: run.repetition,
            argv: &run.argv,
            workdir: run.workdir.to_string_lossy(),
            output: &run.output,
            env: EnvEntry {
                policy: match run.env.policy {
                    EnvPolicy::Inherit => "inherit",
                    EnvPolicy::Clean => "clean",
                },
                set: &run.env.set,
                unset: &run.env.unset,
            },
            cpus: &run.cpus,
            timeout_seconds,
            grace_seconds,
            allocator: run.allocator.as_ref().map(|a| a.name.as_str()),
        };
        serde_json::to_writer(&mut out, &entry).map_err(io::Error::from)?;
    }
    out.write_all(b"\n]}\n")?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::PlanFile;
    use crate::manifest::Value;
    use crate::plan::expand;
    use crate::plan::tests::{ctx, size_compare};

    #[test]
    fn plan_json_streams_in_the_plan_file_shape() {
        let m = size_compare();
        let plan = expand(&m, &ctx()).unwrap();
        let mut out = Vec::new();
        write_plan_json(&plan, &mut out).unwrap();
        let file: PlanFile = serde_json::from_slice(&out).unwrap();
        assert_eq!(file.runs.len(), 8);
        assert_eq!(file.runs[7].run_id, "007-reuse-64-r2");
        assert_eq!(file.runs[7].cell.get("elements"), Some(&Value::Int(64)));
        assert_eq!(file.matrix_keys, ["mode", "elements"]);
        assert_eq!(file.runs[0].timeout_seconds, Some(120.0));
        assert_eq!(file.runs[0].env.policy, "inherit");
        assert_eq!(file.sample_interval_seconds, Some(0.1));
    }

    #[test]
    fn the_runner_files_are_reserved_output_names() {
        assert_eq!(
            RUN_FOLDER_LAYOUT,
            crate::plan::tests::LAYOUT,
            "plan tests use the bundle's layout"
        );
        let ctx = crate::plan::PlanContext {
            layout: RUN_FOLDER_LAYOUT,
            plans_cpus: true,
            ..ctx()
        };
        for name in [files::RUN, files::STDERR, files::MEMORY, files::MAPPINGS] {
            let mut m = size_compare();
            m.command.output = name.into();
            m.schedule.repetitions = 1;
            m.matrix.axes.truncate(1);
            m.matrix.axes[0].1.truncate(1);
            let errors = expand(&m, &ctx).unwrap_err();
            assert!(errors[0].message.contains("reserved"), "{name}: {errors:?}");
        }
    }
}
