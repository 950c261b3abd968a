//! Valid manifests in tests/manifests/good/ parse with every default filled in, values in
//! manifest order, and spans that point at the right source text.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hwr_exp::manifest::{self, *};

use crate::support::source_path;

fn good(name: &str) -> Manifest {
    let path = source_path("tests/manifests/good").join(name);
    manifest::load(&path).unwrap_or_else(|d| panic!("{name} should parse:\n{d}"))
}

fn s(v: &str) -> Value {
    Value::Str(v.into())
}

fn span_text<'a>(m: &'a Manifest, key: &str) -> &'a str {
    let span = m.spans.get(key).unwrap_or_else(|| panic!("no span for {key}"));
    &m.source[span.clone()]
}

#[test]
fn design_example() {
    let m = good("size-compare.toml");
    let dir = source_path("tests/manifests/good");
    assert_eq!(m.format, 1);
    assert_eq!(m.base_dir, dir);
    assert_eq!(m.experiment.name, "size-compare");
    assert_eq!(
        m.experiment.description.as_deref(),
        Some("materialize vs reuse at 16 and 64 f32 elements")
    );
    let Program::Argv(argv) = &m.command.program else {
        panic!("argv expected")
    };
    assert_eq!(argv.len(), 11);
    assert_eq!(argv[0], "{hwr-exp}");
    assert_eq!(argv[4], "{mode}");
    assert_eq!(m.command.workdir, ".");
    assert_eq!(m.command.output, "{mode}-{elements}-{repetition}.json");
    assert_eq!(m.command.output_format, OutputFormat::Json);
    assert_eq!(
        m.matrix.axes,
        vec![
            ("mode".to_string(), vec![s("get_tensor"), s("reuse")]),
            ("elements".to_string(), vec![Value::Int(16), Value::Int(64)]),
        ]
    );
    assert_eq!(m.matrix.exclude.len(), 1);
    assert_eq!(m.matrix.exclude[0]["mode"], s("reuse"));
    assert_eq!(m.matrix.exclude[0]["elements"], Value::Int(16));
    assert_eq!(m.matrix.include.len(), 1);
    assert_eq!(m.matrix.include[0]["mode"], s("view"));
    assert_eq!(m.matrix.include[0]["elements"], Value::Int(64));
    assert_eq!(
        m.schedule,
        Schedule {
            repetitions: 2,
            adaptive: None,
            order: Order::Interleaved,
            seed: Some(7),
            jobs: 1
        }
    );
    assert_eq!(
        m.isolation,
        Isolation {
            cpus: CpuSelection::Auto,
            cpus_per_run: 1,
            timeout: Some(Duration::from_secs(120)),
            grace: Duration::from_secs(5),
            env_policy: EnvPolicy::Inherit,
            env: vec![("PYTHONMALLOC".into(), "malloc".into())],
            env_unset: vec!["LD_PRELOAD".into()],
            allocator: None,
        }
    );
    assert_eq!(m.measure.sample_interval, Some(Duration::from_millis(100)));
    assert_eq!(m.provenance.repo.as_deref(), Some(dir.as_path()));
    assert!(m.report.metrics.is_empty());
    assert_eq!(
        m.source,
        std::fs::read_to_string(dir.join("size-compare.toml")).unwrap()
    );

    // Spans point at the values as written.
    assert_eq!(
        span_text(&m, "command.output"),
        "\"{mode}-{elements}-{repetition}.json\""
    );
    assert_eq!(span_text(&m, "matrix.mode"), "[\"get_tensor\", \"reuse\"]");
    assert_eq!(
        span_text(&m, "matrix.exclude"),
        "[{ mode = \"reuse\", elements = 16 }]"
    );
    assert_eq!(
        span_text(&m, "matrix.exclude.0"),
        "{ mode = \"reuse\", elements = 16 }"
    );
    assert_eq!(
        span_text(&m, "matrix.include"),
        "[{ mode = \"view\", elements = 64 }]"
    );
    assert_eq!(span_text(&m, "isolation.cpus"), "\"auto\"");
    assert_eq!(span_text(&m, "schedule.repetitions"), "2");
    assert_eq!(span_text(&m, "isolation.env.PYTHONMALLOC"), "\"malloc\"");
    assert_eq!(span_text(&m, "command"), "[command]");
    assert!(span_text(&m, "command.argv").starts_with("[\"{hwr-exp}\", \"probe\""));
}

#[test]
fn diagnostic_at_a_key_points_at_its_value() {
    let m = good("size-compare.toml");
    let d = m.diagnostic(
        "command.output",
        "two runs write the same output `x.json`",
        Some("add {repetition} to `output`".into()),
    );
    assert_eq!(d.items.len(), 1);
    let text = d.to_string();
    let loc = format!("{}:14:10", m.path.display());
    assert!(text.contains(&loc), "{text}");
    assert!(
        text.contains("error: two runs write the same output `x.json`"),
        "{text}"
    );
    let carets = "^".repeat("\"{mode}-{elements}-{repetition}.json\"".len());
    assert!(text.contains(&format!("   |          {carets}\n")), "{text}");
    assert!(text.contains("= help: add {repetition} to `output`"), "{text}");
    // An unknown key falls back to the start of the file.
    let d = m.diagnostic("nowhere", "x", None);
    assert_eq!(d.items[0].span, 0..0);
}

#[test]
fn shell_manifest_keeps_manifest_order_and_mixed_values() {
    let m = good("shell.toml");
    let Program::Shell(cmd) = &m.command.program else {
        panic!("shell expected")
    };
    assert!(cmd.starts_with("python bench.py --alloc {allocator}"));
    assert_eq!(m.command.workdir, "bench/{allocator}");
    assert_eq!(m.command.output, "{run-id}.log");
    assert_eq!(m.command.output_format, OutputFormat::Text);
    assert_eq!(
        m.matrix.axes,
        vec![
            ("allocator".to_string(), vec![s("malloc"), s("pymalloc")]),
            (
                "scale".to_string(),
                vec![Value::Float(Float::from_value(0.5)), Value::Int(2)]
            ),
            ("fast".to_string(), vec![Value::Bool(true)]),
        ]
    );
    assert_eq!(m.matrix.exclude.len(), 1);
    assert_eq!(m.matrix.exclude[0]["scale"], Value::Float(Float::from_value(0.5)));
    assert!(m.matrix.include.is_empty());
    assert_eq!(m.schedule.order, Order::Shuffled);
    assert_eq!(m.schedule.seed, Some(0));
    assert_eq!(m.schedule.repetitions, 3);
    assert_eq!(m.isolation.env_policy, EnvPolicy::Clean);
    assert_eq!(m.isolation.timeout, Some(Duration::from_secs(90)));
    assert_eq!(m.isolation.grace, Duration::from_millis(250));
    // Manifest order, not alphabetical; the empty string stays empty.
    assert_eq!(
        m.isolation.env,
        vec![
            ("ZETA".to_string(), "{allocator}".to_string()),
            ("PYTHONMALLOC".to_string(), "{allocator}".to_string()),
            ("CUDA_VISIBLE_DEVICES".to_string(), String::new()),
        ]
    );
    assert_eq!(m.isolation.env_unset, vec!["LD_PRELOAD", "MALLOC_ARENA_MAX"]);
    assert_eq!(m.measure.sample_interval, None);
    let tests_dir = source_path("tests/manifests");
    assert_eq!(m.provenance.repo, Some(tests_dir.join("repo")));
    assert_eq!(
        m.report.metrics,
        vec![
            ("growth".to_string(), "/samples/3/private_bytes".to_string()),
            ("whole".to_string(), String::new()),
            ("alpha".to_string(), "/completed".to_string()),
        ]
    );
    assert_eq!(span_text(&m, "matrix.exclude.0"), "[[matrix.exclude]]");
}

#[test]
fn minimal_manifest_gets_every_default() {
    let m = good("minimal.toml");
    assert_eq!(m.command.program, Program::Argv(vec!["true".into()]));
    assert_eq!(m.command.workdir, ".");
    assert_eq!(m.command.output, "{run-id}.json");
    assert_eq!(m.command.output_format, OutputFormat::Json);
    assert_eq!(m.matrix, Matrix::default());
    assert_eq!(
        m.schedule,
        Schedule {
            repetitions: 1,
            adaptive: None,
            order: Order::Interleaved,
            seed: None,
            jobs: 1
        }
    );
    assert_eq!(m.isolation.cpus, CpuSelection::Auto);
    assert_eq!(m.isolation.cpus_per_run, 1);
    assert_eq!(m.isolation.timeout, None);
    assert_eq!(m.isolation.grace, Duration::from_secs(5));
    assert_eq!(m.isolation.env_policy, EnvPolicy::Inherit);
    assert!(m.isolation.env.is_empty() && m.isolation.env_unset.is_empty());
    assert_eq!(m.measure.sample_interval, Some(Duration::from_millis(100)));
    assert_eq!(m.provenance.repo, None);
    assert!(m.report.metrics.is_empty());
    assert!(!m.spans.contains_key("matrix"));
    assert!(m.spans.contains_key("command.argv"));
}

#[test]
fn literal_strings_and_text_output_by_name() {
    let m = good("text-output.toml");
    assert_eq!(
        m.command.program,
        Program::Argv(vec![
            "sh".into(),
            "-c".into(),
            "echo run {run-id} of {bundle} in {run-dir}".into()
        ])
    );
    assert_eq!(m.command.output_format, OutputFormat::Text);
    assert_eq!(m.schedule.order, Order::Grouped);
}

const BASE: &str = "format = 1\n[experiment]\nname = \"x\"\n";

fn parse(text: &str) -> Result<Manifest, Diagnostics> {
    manifest::parse(text, Path::new("inline.toml"), Path::new("/srv/exp"))
}

#[test]
fn output_defaults_follow_output_format() {
    let m = parse(&format!(
        "{BASE}[command]\nargv = [\"true\"]\noutput-format = \"text\"\n"
    ))
    .unwrap();
    assert_eq!(m.command.output, "{run-id}.txt");
    let m = parse(&format!(
        "{BASE}[command]\nargv = [\"true\"]\noutput = \"a.json\"\n"
    ))
    .unwrap();
    assert_eq!(m.command.output_format, OutputFormat::Json);
    // An explicit output-format wins over the name.
    let m = parse(&format!(
        "{BASE}[command]\nargv = [\"true\"]\noutput = \"a.json\"\noutput-format = \"text\"\n"
    ))
    .unwrap();
    assert_eq!(m.command.output_format, OutputFormat::Text);
}

#[test]
fn cpu_lists_from_the_allowed_set() {
    let allowed = hwr_exp::cpus::allowed_cpus().unwrap();
    let first = allowed[0];
    let m = parse(&format!(
        "{BASE}[command]\nargv = [\"true\"]\n[isolation]\ncpus = [{first}]\n"
    ))
    .unwrap();
    assert_eq!(m.isolation.cpus, CpuSelection::List(vec![first]));
    let list = hwr_exp::cpus::format_cpu_list(&allowed);
    let m = parse(&format!(
        "{BASE}[command]\nargv = [\"true\"]\n[schedule]\njobs = {}\n[isolation]\ncpus = \"{list}\"\n",
        allowed.len()
    ))
    .unwrap();
    assert_eq!(m.isolation.cpus, CpuSelection::List(allowed.clone()));
    // One more job than CPUs in the pool does not fit.
    let err = parse(&format!(
        "{BASE}[command]\nargv = [\"true\"]\n[schedule]\njobs = {}\n[isolation]\ncpus = [{first}]\n",
        2
    ))
    .unwrap_err();
    assert!(err.items[0].message.contains("needs 2 CPUs"), "{err}");
}

#[test]
fn relative_base_dir_becomes_absolute_and_repo_resolves_against_it() {
    let m = manifest::parse(
        &format!("{BASE}[command]\nargv = [\"true\"]\n[provenance]\nrepo = \"sub/../repo\"\n"),
        Path::new("rel/x.toml"),
        Path::new("rel"),
    )
    .unwrap();
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(m.base_dir, cwd.join("rel"));
    assert_eq!(m.provenance.repo, Some(cwd.join("rel/repo")));
    assert_eq!(m.path, PathBuf::from("rel/x.toml"));
}

#[test]
fn load_resolves_against_the_manifest_folder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("exp.toml");
    std::fs::write(&path, format!("{BASE}[command]\nshell = \"true\"\n")).unwrap();
    let m = manifest::load(&path).unwrap();
    assert_eq!(m.base_dir, dir.path());
    assert_eq!(m.command.program, Program::Shell("true".into()));
}

#[test]
fn placeholders_escape_and_builtins_are_accepted() {
    let m = parse(&format!(
        "{BASE}[command]\nshell = \"echo '{{{{\\\"a\\\": 1}}}}' {{hwr-exp}} {{bundle}}\"\n"
    ))
    .unwrap();
    let Program::Shell(text) = m.command.program else {
        panic!()
    };
    assert_eq!(text, "echo '{{\"a\": 1}}' {hwr-exp} {bundle}");
}

#[test]
fn adaptive_repetitions() {
    let m = good("adaptive.toml");
    let a = m.schedule.adaptive.expect("an adaptive rule");
    assert_eq!((a.min, a.max), (4, 30));
    assert_eq!(a.until, hwr_exp::manifest::Until::Decided);
    assert_eq!(a.time_budget, Some(std::time::Duration::from_secs(7200)));
    assert_eq!(m.schedule.repetitions, 4, "the first rounds");
    assert_eq!(span_text(&m, "schedule.repetitions.max"), "30");
}

#[test]
fn adaptive_repetitions_on_slurm() {
    // Refused before issue 36 item 2 ("adaptive repetitions cannot be used with the slurm
    // executor"): the rounds are now submitted one after another as job arrays.
    let m = good("adaptive-slurm.toml");
    let a = m.schedule.adaptive.expect("an adaptive rule");
    assert_eq!((a.min, a.max), (4, 10));
    assert_eq!(m.executor.kind, hwr_exp::choices::ExecutorKind::Slurm);
}
