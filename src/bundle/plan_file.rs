//! plan.json (DESIGN 5): built from a [`Plan`] and streamed one run at a time, and the part of
//! the bundle's layout that planning needs ([`RUN_FOLDER_LAYOUT`]).
//!
//! The plan knows nothing of the bundle; the bundle builds its records ([`PlanFile`],
//! [`PlannedRunRecord`], [`EnvChanges`]) from the plan.

use std::io::{self, Write};

use serde::ser::{SerializeStruct, Serializer};

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

/// Writes plan.json (the shape of [`PlanFile`], pretty-printed) to `out`, one run at a time, so
/// writing does not hold every run in memory.
///
/// # Errors
/// Errors of `out`.
pub fn write_plan_json(plan: &Plan, out: impl Write) -> io::Result<()> {
    struct Runs<'a>(&'a Plan);
    impl serde::Serialize for Runs<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(self.0.runs().map(|r| PlannedRunRecord::from_run(self.0, &r)))
        }
    }
    let mut ser = serde_json::Serializer::pretty(out);
    let mut st = (&mut ser)
        .serialize_struct("PlanFile", 8)
        .map_err(io::Error::from)?;
    let fields = (|| {
        st.serialize_field("format", &BUNDLE_FORMAT)?;
        st.serialize_field("order", &plan.order)?;
        st.serialize_field("seed", &plan.seed)?;
        st.serialize_field("jobs", &plan.jobs)?;
        st.serialize_field("matrix-keys", &plan.matrix_keys)?;
        st.serialize_field("output-format", &plan.output_format)?;
        st.serialize_field(
            "sample-interval-seconds",
            &plan.sample_interval.map(|d| d.as_secs_f64()),
        )?;
        st.serialize_field("runs", &Runs(plan))?;
        st.end()
    })();
    fields.map_err(io::Error::from)
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
