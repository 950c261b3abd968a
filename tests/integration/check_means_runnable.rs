//! `check` knows everything `run` refuses: for generated manifests whose program exists, a manifest
//! that passes `check` (validation, then expansion with the `<bundle>` stand-in) also expands for a
//! real bundle folder, passes `run`'s preflight, and gives every run an argv, environment and
//! workdir that can be exec'd (no NUL) and timers that cannot overflow a clock reading.
//!
//! In process (library calls, no subprocess per case), so hundreds of cases run in seconds.

use std::path::Path;
use std::time::Instant;

use hwr_exp::manifest;
use hwr_exp::runner::{preflight, session};
use proptest::prelude::*;

/// A matrix value as TOML source: integers, floats in many spellings, plain and awkward strings
/// (spaces, quotes, `$`, `/`, `..`, unicode, NUL escapes), booleans.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i32>().prop_map(|i| i.to_string()),
        prop_oneof![
            Just("1.0"),
            Just("1e-5"),
            Just("3e20"),
            Just("-0.0"),
            Just("1_000.5"),
            Just("+2.50"),
            Just("inf"),
            Just("nan"),
            Just("6.02E23"),
        ]
        .prop_map(String::from),
        prop_oneof![
            Just("plain"),
            Just("with space"),
            Just("it's"),
            Just("$HOME; rm -rf x"),
            Just("a/b"),
            Just(".."),
            Just("é ü"),
            Just(""),
            Just("tab\\there"),
            Just("nul\\u0000"),
            Just("{x}"),
        ]
        .prop_map(|s| format!("\"{s}\"")),
        any::<bool>().prop_map(|b| b.to_string()),
    ]
}

/// A duration value, sometimes far beyond any clock.
fn duration() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("\"1s\""),
        Just("\"100ms\""),
        Just("\"1y\""),
        Just("\"2y\""),
        Just("\"300000000000y\""),
        Just("\"584y\""),
        Just("\"0s\""),
        Just("\"1ns\""),
        Just("\"off\""),
    ]
    .prop_map(String::from)
}

/// A template for `output`, built from literal text and placeholders (matrix keys or built-ins).
fn output() -> impl Strategy<Value = Option<String>> {
    let piece = prop_oneof![
        Just("{k0}"),
        Just("{k1}"),
        Just("{repetition}"),
        Just("{run-id}"),
        Just("{bundle}"),
        Just("{run-dir}"),
        Just("{hwr-exp}"),
        Just("-"),
        Just(".json"),
        Just("run.json"),
        Just(".."),
    ];
    proptest::option::of(proptest::collection::vec(piece, 1..4).prop_map(|p| p.concat()))
}

#[derive(Debug, Clone)]
struct Case {
    axes: Vec<Vec<String>>,
    repetitions: u32,
    shell: bool,
    output: Option<String>,
    timeout: Option<String>,
    grace: Option<String>,
    sample_interval: Option<String>,
    env_value: Option<String>,
    exclude_first: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec(proptest::collection::vec(value(), 1..4), 0..3),
        1u32..3,
        any::<bool>(),
        output(),
        proptest::option::of(duration()),
        proptest::option::of(duration()),
        proptest::option::of(duration()),
        proptest::option::of(prop_oneof![
            Just("\"{k0}\"".to_string()),
            Just("\"{run-dir}/x\"".to_string()),
            Just("\"a\\u0000\"".to_string()),
        ]),
        any::<bool>(),
    )
        .prop_map(
            |(
                axes,
                repetitions,
                shell,
                output,
                timeout,
                grace,
                sample_interval,
                env_value,
                exclude_first,
            )| Case {
                axes,
                repetitions,
                shell,
                output,
                timeout,
                grace,
                sample_interval,
                env_value,
                exclude_first,
            },
        )
}

/// The manifest text of a case: `true` (argv) or `/bin/sh -c` (shell) with every matrix key.
fn source(c: &Case) -> String {
    let keys: Vec<String> = (0..c.axes.len()).map(|k| format!("k{k}")).collect();
    let uses: String = keys.iter().map(|k| format!(" {{{k}}}")).collect();
    let mut s = String::from("format = 1\n[experiment]\nname = \"prop\"\n[command]\n");
    if c.shell {
        s.push_str(&format!("shell = \"true{uses}\"\n"));
    } else {
        let args: String = keys.iter().map(|k| format!(", \"{{{k}}}\"")).collect();
        s.push_str(&format!("argv = [\"true\"{args}]\n"));
    }
    if let Some(o) = &c.output {
        s.push_str(&format!("output = \"{o}\"\n"));
    }
    s.push_str(&format!("[schedule]\nrepetitions = {}\n", c.repetitions));
    s.push_str("[isolation]\n");
    if let Some(t) = &c.timeout {
        s.push_str(&format!("timeout = {t}\n"));
    }
    if let Some(g) = &c.grace {
        s.push_str(&format!("grace = {g}\n"));
    }
    if let Some(e) = &c.env_value {
        s.push_str(&format!("env = {{ V = {e} }}\n"));
    }
    if let Some(i) = &c.sample_interval {
        s.push_str(&format!("[measure]\nsample-interval = {i}\n"));
    }
    if !c.axes.is_empty() {
        s.push_str("[matrix]\n");
        for (k, values) in c.axes.iter().enumerate() {
            s.push_str(&format!("k{k} = [{}]\n", values.join(", ")));
        }
        if c.exclude_first && c.axes[0].len() > 1 {
            s.push_str(&format!("exclude = [{{ k0 = {} }}]\n", c.axes[0][0]));
        }
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn check_passing_means_run_passes_preflight(c in case()) {
        let dir = tempfile::tempdir().unwrap();
        let text = source(&c);
        let path = dir.path().join("m.toml");
        std::fs::write(&path, &text).unwrap();
        // `check`: validate, then expand for the `<bundle>` stand-in.
        let Ok(m) = manifest::parse(&text, &path, dir.path()) else { return Ok(()) };
        let Ok(check_ctx) = session::plan_context(Path::new("<bundle>")) else { return Ok(()) };
        if hwr_exp::runner::planning::expand(&m, &check_ctx).is_err() {
            return Ok(());
        }
        // `run`: expand for a real bundle folder under a results folder with a space, preflight.
        let results = dir.path().join("my results");
        let bundle = results.join("prop").join("2026-01-01T000000Z");
        let run_ctx = session::plan_context(&bundle).unwrap();
        let plan = hwr_exp::runner::planning::expand(&m, &run_ctx)
            .map_err(|e| TestCaseError::fail(format!("check passed, run refuses:\n{e}\n{text}")))?;
        preflight::check(&plan, &results)
            .map_err(|e| TestCaseError::fail(format!("check passed, preflight refuses: {e:?}\n{text}")))?;
        // What spawn and supervision do with the plan cannot fail on its values.
        let now = Instant::now();
        let grace = now.checked_add(plan.grace);
        prop_assert!(grace.is_some(), "grace overflows the clock\n{}", text);
        if let Some(t) = plan.timeout {
            prop_assert!(now.checked_add(t).and_then(|d| d.checked_add(plan.grace)).is_some(),
                "timeout overflows the clock\n{}", text);
        }
        if let Some(i) = plan.sample_interval {
            prop_assert!(now.checked_add(i).is_some(), "sample interval overflows\n{}", text);
        }
        for run in plan.runs() {
            prop_assert!(run.argv.iter().all(|a| !a.contains('\0')), "NUL in argv {:?}\n{}", run.argv, text);
            prop_assert!(run.env.set.iter().all(|(k, v)| !k.contains('\0') && !v.contains('\0')),
                "NUL in env {:?}\n{}", run.env.set, text);
            prop_assert!(!run.workdir.to_string_lossy().contains('\0'));
            prop_assert!(!run.output.contains('/') && run.output != ".." && run.output.len() <= 255,
                "output {:?}\n{}", run.output, text);
        }
    }
}
