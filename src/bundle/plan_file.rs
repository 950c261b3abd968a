//! plan.json (DESIGN 5): built from a [`Plan`] and streamed one run at a time, and the part of
//! the bundle's layout that planning needs ([`RUN_FOLDER_LAYOUT`]).
//!
//! The plan knows nothing of the bundle; its runs ([`PlannedRun`]) are plan.json's entries as
//! they are, and the bundle writes the file around them ([`PlanFile`]'s shape).

use std::io::{self, Write};

#[cfg(doc)]
use super::format::PlanFile;
use super::format::{BUNDLE_FORMAT, files};
#[cfg(doc)]
use crate::plan::PlannedRun;
use crate::plan::{Plan, RunFolderLayout};

/// Where run folders live in a bundle (`runs/`) and the files the runner writes into each
/// (`run.json`, `stderr.log`, `memory.jsonl`), for [`crate::plan::PlanContext::layout`].
pub const RUN_FOLDER_LAYOUT: RunFolderLayout = RunFolderLayout {
    runs: files::RUNS,
    reserved: &[files::RUN, files::STDERR, files::MEMORY, files::MAPPINGS],
};

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
    for (i, run) in plan.runs().enumerate() {
        out.write_all(if i == 0 { b"\n" } else { b",\n" })?;
        serde_json::to_writer(&mut out, &run).map_err(io::Error::from)?;
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
        assert_eq!(
            file.runs[7].cell,
            [
                ("mode".to_string(), Value::Str("reuse".into())),
                ("elements".to_string(), Value::Int(64))
            ]
        );
        assert_eq!(file.matrix_keys, ["mode", "elements"]);
        assert_eq!(file.runs[0].timeout, Some(std::time::Duration::from_secs(120)));
        assert_eq!(file.runs[0].env.policy, crate::manifest::EnvPolicy::Inherit);
        assert_eq!(file.sample_interval_seconds, Some(0.1));
        // Each entry reads back as the run the plan renders: the one declaration both ways.
        for (i, read) in file.runs.iter().enumerate() {
            assert_eq!(*read, plan.run(i), "run {i}");
        }
    }

    /// An allocator is written as its name and read back as that name alone; the keys of a
    /// cell keep the manifest's order, and a key given twice is refused.
    #[test]
    fn an_entry_keeps_what_plan_json_records_and_refuses_a_key_twice() {
        let m = size_compare();
        let mut run = expand(&m, &ctx()).unwrap().run(3);
        run.allocator = Some(crate::plan::Allocator {
            name: "jemalloc".into(),
            path: Some("/usr/lib/libjemalloc.so.2".into()),
            sha256: Some("ab".into()),
        });
        let text = serde_json::to_string(&run).unwrap();
        assert!(text.contains(r#""allocator":"jemalloc""#), "{text}");
        assert!(text.find(r#""mode""#) < text.find(r#""elements""#), "{text}");
        let back: crate::plan::PlannedRun = serde_json::from_str(&text).unwrap();
        assert_eq!(
            back.allocator
                .as_ref()
                .map(|a| (a.name.as_str(), a.path.is_none())),
            Some(("jemalloc", true))
        );
        let twice = text.replacen(r#""elements":"#, r#""mode":"x","elements":"#, 1);
        let err = serde_json::from_str::<crate::plan::PlannedRun>(&twice).unwrap_err();
        assert!(err.to_string().contains("matrix key `mode` given twice"), "{err}");
        let negative = text.replacen(r#""grace-seconds":"#, r#""grace-seconds":-"#, 1);
        assert!(serde_json::from_str::<crate::plan::PlannedRun>(&negative).is_err());
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
