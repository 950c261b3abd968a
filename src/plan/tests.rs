use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::manifest::*;

/// A test manifest over `axes` (2 repetitions, timeout 120 s, a few env changes).
pub(crate) fn manifest(axes: Vec<(&str, Vec<Value>)>) -> Manifest {
    Manifest {
        path: PathBuf::from("m.toml"),
        base_dir: PathBuf::from("/work/x"),
        source: String::new(),
        format: 1,
        experiment: Experiment {
            name: "t".into(),
            description: None,
        },
        command: CommandSpec {
            program: Program::Argv(vec!["{hwr-exp}".into(), "--mode".into(), "{mode}".into()]),
            workdir: ".".into(),
            output: "{mode}-{elements}-{repetition}.json".into(),
            output_format: OutputFormat::Json,
        },
        matrix: Matrix {
            axes: axes.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            ..Default::default()
        },
        schedule: Schedule {
            repetitions: 2,
            adaptive: None,
            order: Order::Interleaved,
            seed: None,
            jobs: 1,
        },
        isolation: Isolation {
            cpus: CpuSelection::Auto,
            cpus_per_run: 1,
            timeout: Some(Duration::from_secs(120)),
            grace: Duration::from_secs(5),
            env_policy: EnvPolicy::Inherit,
            env: vec![
                ("PYTHONMALLOC".into(), "malloc".into()),
                ("EMPTY".into(), String::new()),
            ],
            env_unset: vec!["LD_PRELOAD".into()],
            allocator: None,
        },
        measure: Measure {
            sample_interval: Some(Duration::from_millis(100)),
        },
        provenance: ProvenanceConfig {
            repo: None,
            patch_limit: None,
            patch_file_limit: None,
        },
        report: ReportConfig::default(),
        executor: ExecutorConfig::default(),
        environments: Vec::new(),
        spans: BTreeMap::new(),
        warnings: Vec::new(),
        overridden: BTreeMap::new(),
    }
}

/// The context the plan tests expand with: bundle `/r/b`, allowed CPUs 2 and 3, seed 42.
pub(crate) fn ctx() -> PlanContext {
    PlanContext {
        hwr_exp: "/bin/hwr-exp".into(),
        bundle: PathBuf::from("/r/b"),
        allowed_cpus: vec![2, 3],
        fallback_seed: 42,
        layout: LAYOUT,
        allocators: [("jemalloc".to_string(), PathBuf::from("/lib/libjemalloc.so.2"))].into(),
        environments: Default::default(),
        plans_cpus: true,
    }
}

/// The bundle's run-folder layout, written out so that plan tests need no bundle.
pub(crate) const LAYOUT: RunFolderLayout = RunFolderLayout {
    runs: "runs",
    reserved: &["run.json", "stderr.log", "memory.jsonl", "mappings.json"],
};

fn s(x: &str) -> Value {
    Value::Str(x.into())
}

/// The size-compare experiment: mode x elements, 2 repetitions.
pub(crate) fn size_compare() -> Manifest {
    manifest(vec![
        ("mode", vec![s("get_tensor"), s("reuse")]),
        ("elements", vec![Value::Int(16), Value::Int(64)]),
    ])
}

#[test]
fn interleaved_has_repetition_outermost() {
    let plan = expand(&size_compare(), &ctx()).unwrap();
    let ids: Vec<_> = plan.runs().map(|r| r.run_id).collect();
    assert_eq!(
        ids,
        [
            "000-get_tensor-16-r1",
            "001-get_tensor-64-r1",
            "002-reuse-16-r1",
            "003-reuse-64-r1",
            "004-get_tensor-16-r2",
            "005-get_tensor-64-r2",
            "006-reuse-16-r2",
            "007-reuse-64-r2"
        ]
    );
    assert_eq!(plan.run(5).output, "get_tensor-64-2.json");
    assert_eq!(plan.run(0).argv, ["/bin/hwr-exp", "--mode", "get_tensor"]);
    assert_eq!(plan.run(0).cpus, [2], "auto takes the first allowed CPU");
    assert_eq!(plan.run(0).workdir, PathBuf::from("/work/x"));
}

#[test]
fn grouped_and_shuffled_orders() {
    let mut m = size_compare();
    m.schedule.order = Order::Grouped;
    let plan = expand(&m, &ctx()).unwrap();
    assert_eq!(plan.run(1).run_id, "001-get_tensor-16-r2");
    m.schedule.order = Order::Shuffled;
    let a = expand(&m, &ctx()).unwrap();
    assert_eq!(a.seed, Some(42), "fallback seed recorded");
    m.schedule.seed = Some(7);
    let b = expand(&m, &ctx()).unwrap();
    let c = expand(&m, &ctx()).unwrap();
    assert_eq!(b, c, "same seed, same order");
    let mut cells: Vec<_> = b.runs().map(|r| (describe_cell(&r.cell), r.repetition)).collect();
    cells.sort();
    cells.dedup();
    assert_eq!(cells.len(), 8, "shuffle keeps every run once");
}

#[test]
fn exclude_include_and_empty() {
    let mut m = size_compare();
    m.matrix.exclude = vec![BTreeMap::from([
        ("mode".to_string(), s("reuse")),
        ("elements".to_string(), Value::Int(16)),
    ])];
    m.matrix.include = vec![BTreeMap::from([
        ("mode".to_string(), s("view")),
        ("elements".to_string(), Value::Int(64)),
    ])];
    let plan = expand(&m, &ctx()).unwrap();
    let r1: Vec<_> = plan
        .runs()
        .filter(|r| r.repetition == 1)
        .map(|r| describe_cell(&r.cell))
        .collect();
    assert_eq!(
        r1,
        [
            "mode=get_tensor, elements=16",
            "mode=get_tensor, elements=64",
            "mode=reuse, elements=64",
            "mode=view, elements=64"
        ]
    );

    m.matrix.include = vec![BTreeMap::from([
        ("mode".to_string(), s("reuse")),
        ("elements".to_string(), Value::Int(64)),
    ])];
    let err = expand(&m, &ctx()).unwrap_err();
    assert!(err[0].message.contains("duplicates"), "{err:?}");

    m.matrix.include.clear();
    m.matrix.exclude = vec![
        BTreeMap::from([("elements".to_string(), Value::Int(16))]),
        BTreeMap::from([("elements".to_string(), Value::Int(64))]),
    ];
    let err = expand(&m, &ctx()).unwrap_err();
    assert_eq!(err[0].key, "matrix.exclude");
}

#[test]
fn duplicate_outputs_are_errors() {
    let mut m = size_compare();
    m.command.output = "{mode}.json".into();
    let err = expand(&m, &ctx()).unwrap_err();
    assert_eq!(err[0].key, "command.output");
    assert!(err[0].message.contains("both save"), "{err:?}");
}

#[test]
fn hostile_values_stay_inside_the_run_folder() {
    let mut m = manifest(vec![
        ("mode", vec![s("../../etc/passwd"), s("a/b")]),
        ("elements", vec![Value::Int(1)]),
    ]);
    m.command.output = "{mode}-{repetition}.json".into();
    let plan = expand(&m, &ctx()).unwrap();
    for r in plan.runs() {
        assert!(
            !r.run_id.contains('/') && !r.run_id.contains(".."),
            "{}",
            r.run_id
        );
        assert!(
            !r.output.contains('/') && !r.output.contains(".."),
            "{}",
            r.output
        );
    }
    assert_eq!(
        plan.run(0).argv[2],
        "../../etc/passwd",
        "argv gets the value as is"
    );
}

#[test]
fn env_changes_in_order_with_cuda_default() {
    let plan = expand(&size_compare(), &ctx()).unwrap();
    let set: Vec<_> = plan
        .run(3)
        .env
        .set
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    assert_eq!(
        set,
        [
            "CUDA_VISIBLE_DEVICES=",
            "PYTHONMALLOC=malloc",
            "EMPTY=",
            "HWR_RUN_ID=003-reuse-64-r1",
            "HWR_REPETITION=1",
            "HWR_BUNDLE=/r/b"
        ]
    );
    assert_eq!(plan.run(0).env.unset, ["LD_PRELOAD"]);
    let mut m = size_compare();
    m.isolation.env.push(("CUDA_VISIBLE_DEVICES".into(), "0".into()));
    let plan = expand(&m, &ctx()).unwrap();
    assert_eq!(
        plan.run(0)
            .env
            .set
            .iter()
            .filter(|(k, _)| k == "CUDA_VISIBLE_DEVICES")
            .count(),
        1
    );
}

#[test]
fn jobs_get_disjoint_cpus() {
    let mut m = size_compare();
    m.schedule.jobs = 2;
    let plan = expand(&m, &ctx()).unwrap();
    assert_eq!(plan.slots, vec![vec![2], vec![3]]);
    assert_eq!(plan.run(1).cpus, [3]);
    m.schedule.jobs = 3;
    assert_eq!(expand(&m, &ctx()).unwrap_err()[0].key, "isolation.cpus");
}

#[test]
fn shell_line_reproduces_the_run() {
    let plan = expand(&size_compare(), &ctx()).unwrap();
    let line = render::shell_line(&plan, &plan.run(0));
    assert!(
        line.starts_with(
            "cd /work/x && env -u LD_PRELOAD CUDA_VISIBLE_DEVICES='' PYTHONMALLOC=malloc EMPTY=''"
        ),
        "{line}"
    );
    assert!(
        line.ends_with("taskset -c 2 timeout -k 5s 120s /bin/hwr-exp --mode get_tensor"),
        "{line}"
    );
}

#[test]
fn no_matrix_is_one_cell() {
    let mut m = manifest(vec![]);
    m.command.output = "{run-id}.txt".into();
    m.command.program = Program::Shell("echo {{}} {repetition}".into());
    let plan = expand(&m, &ctx()).unwrap();
    assert_eq!(plan.len(), 2);
    assert_eq!(plan.run(0).run_id, "000-r1");
    assert_eq!(plan.run(1).argv, ["/bin/sh", "-c", "echo {} 2"]);
}

#[test]
fn an_empty_program_from_a_matrix_value_is_an_error() {
    let mut m = manifest(vec![("prog", vec![s("true"), s("")])]);
    m.command.program = Program::Argv(vec!["{prog}".into()]);
    m.command.output = "{run-id}.json".into();
    let err = expand(&m, &ctx()).unwrap_err();
    assert_eq!(err[0].key, "command.argv");
    assert!(err[0].message.contains("empty program"), "{err:?}");
}

fn float(text: &str) -> Value {
    Value::Float(Float {
        value: text.replace('_', "").parse().unwrap(),
        text: text.into(),
    })
}

#[test]
fn float_values_are_spelled_as_written() {
    let mut m = manifest(vec![("x", vec![float("1.0"), float("1e-5"), float("3e20")])]);
    m.command.program = Program::Shell("echo {x}".into());
    m.command.output = "{x}-{repetition}.json".into();
    m.isolation.env = vec![("X".into(), "{x}".into())];
    m.schedule.repetitions = 1;
    let plan = expand(&m, &ctx()).unwrap();
    let run = plan.run(1);
    assert_eq!(run.run_id, "001-1e-5-r1");
    assert_eq!(run.argv[2], "echo 1e-5");
    assert_eq!(run.output, "1e-5-1.json");
    assert!(run.env.set.contains(&("X".into(), "1e-5".into())));
    assert_eq!(plan.run(2).argv[2], "echo 3e20");
    assert_eq!(plan.run(0).argv[2], "echo 1.0");
}

#[test]
fn shell_placeholders_are_quoted_argv_ones_are_not() {
    let mut m = manifest(vec![("v", vec![s("a b"), s("it's"), s("plain")])]);
    m.command.program = Program::Shell("printf %s {v} {run-dir}".into());
    m.command.output = "{run-id}.json".into();
    m.schedule.repetitions = 1;
    let c = PlanContext {
        bundle: PathBuf::from("/my results/b"),
        ..ctx()
    };
    let plan = expand(&m, &c).unwrap();
    assert_eq!(
        plan.run(0).argv[2],
        "printf %s 'a b' '/my results/b/runs/000-a_b-r1'"
    );
    assert_eq!(
        plan.run(1).argv[2],
        "printf %s \"it's\" '/my results/b/runs/001-it_s-r1'"
    );
    assert_eq!(
        plan.run(2).argv[2],
        "printf %s plain '/my results/b/runs/002-plain-r1'"
    );
    m.command.program = Program::Argv(vec!["printf".into(), "{v}".into()]);
    assert_eq!(expand(&m, &c).unwrap().run(0).argv[1], "a b");
}

/// The cells and their order, as (cell description, repetition) per run.
fn described(plan: &Plan) -> Vec<(String, u32)> {
    plan.runs()
        .map(|r| (describe_cell(&r.cell), r.repetition))
        .collect()
}

#[test]
fn indexed_exclude_matches_the_naive_definition() {
    // Three axes with a repeated value and mixed types; excludes naming one, two or three keys,
    // a value no axis has, and a float spelled differently from the axis (equal by value).
    let mut m = manifest(vec![
        ("a", vec![Value::Int(1), Value::Int(2), Value::Int(1), s("x")]),
        ("b", vec![float("1.0"), float("2.5"), Value::Bool(true)]),
        ("c", vec![s("p"), s("q")]),
    ]);
    m.command.program = Program::Argv(vec!["true".into()]);
    m.command.output = "{run-id}.json".into();
    m.matrix.exclude = vec![
        BTreeMap::from([("a".to_string(), Value::Int(1)), ("c".to_string(), s("q"))]),
        BTreeMap::from([("b".to_string(), float("1.00"))]),
        BTreeMap::from([("a".to_string(), s("nope"))]),
        BTreeMap::from([
            ("a".to_string(), s("x")),
            ("b".to_string(), Value::Bool(true)),
            ("c".to_string(), s("p")),
        ]),
    ];
    let plan = expand(&m, &ctx()).unwrap();
    let mut expected = Vec::new();
    for r in 1..=2 {
        for a in &m.matrix.axes[0].1 {
            for b in &m.matrix.axes[1].1 {
                for c in &m.matrix.axes[2].1 {
                    let cell: Cell = vec![
                        ("a".into(), a.clone()),
                        ("b".into(), b.clone()),
                        ("c".into(), c.clone()),
                    ];
                    let dropped = m.matrix.exclude.iter().any(|e| {
                        e.iter()
                            .all(|(k, v)| cell.iter().any(|(ck, cv)| ck == k && cv == v))
                    });
                    if !dropped {
                        expected.push((describe_cell(&cell), r));
                    }
                }
            }
        }
    }
    assert_eq!(described(&plan), expected);
    // An include equal to an excluded cell is allowed, one equal to a kept cell (by value) is not.
    m.matrix.include = vec![BTreeMap::from([
        ("a".to_string(), Value::Int(1)),
        ("b".to_string(), float("2.5")),
        ("c".to_string(), s("q")),
    ])];
    assert!(expand(&m, &ctx()).is_ok());
    m.matrix.include.push(BTreeMap::from([
        ("a".to_string(), Value::Int(2)),
        ("b".to_string(), float("2.50")),
        ("c".to_string(), s("p")),
    ]));
    let err = expand(&m, &ctx()).unwrap_err();
    assert!(err[0].message.contains("duplicates"), "{err:?}");
    // Two equal includes.
    m.matrix.include.pop();
    m.matrix.include.push(m.matrix.include[0].clone());
    let err = expand(&m, &ctx()).unwrap_err();
    assert!(err[0].message.contains("duplicates"), "{err:?}");
}

#[test]
fn duplicate_outputs_are_found_by_hash_and_confirmed() {
    // Many runs, one late pair sharing a name through sanitizing ("a b" and "a_b").
    let values: Vec<Value> = (0..500)
        .map(|i| s(&format!("v{i}")))
        .chain([s("a b"), s("a_b")])
        .collect();
    let mut m = manifest(vec![("v", values)]);
    m.command.program = Program::Argv(vec!["true".into()]);
    m.command.output = "{v}-{repetition}.json".into();
    let err = expand(&m, &ctx()).unwrap_err();
    assert_eq!(
        err[0].message,
        "runs 500 and 501 both save their output as `a_b-1.json`"
    );
    m.matrix.axes[0].1.pop();
    assert!(expand(&m, &ctx()).is_ok(), "distinct names pass");
}

#[test]
fn shuffled_order_is_the_same_permutation_as_before() {
    // The order a seed gives must not change between versions: resume re-expands with it.
    let mut m = size_compare();
    m.schedule.order = Order::Shuffled;
    m.schedule.seed = Some(7);
    let plan = expand(&m, &ctx()).unwrap();
    let mut old: Vec<(usize, u32)> = Vec::new();
    for r in 1..=2 {
        old.extend((0..4).map(|c| (c, r)));
    }
    fastrand::Rng::with_seed(7).shuffle(&mut old);
    let cells = ["get_tensor-16", "get_tensor-64", "reuse-16", "reuse-64"];
    let ids: Vec<String> = plan.runs().map(|r| r.run_id).collect();
    let expected: Vec<String> = old
        .iter()
        .enumerate()
        .map(|(i, (c, r))| format!("{i:03}-{}-r{r}", cells[*c]))
        .collect();
    assert_eq!(ids, expected);
}

#[test]
fn allocators_set_or_remove_ld_preload() {
    let mut m = manifest(vec![
        ("allocator", vec![s("glibc"), s("jemalloc"), s("lib/my.so")]),
        ("mode", vec![s("reuse")]),
        ("elements", vec![Value::Int(16)]),
    ]);
    m.isolation.allocator = Some("{allocator}".into());
    m.command.output = "{run-id}.json".into();
    m.schedule.repetitions = 1;
    let plan = expand(&m, &ctx()).unwrap();
    let glibc = plan.run(0);
    assert_eq!(glibc.allocator.as_ref().unwrap().path, None);
    assert!(glibc.env.set.iter().all(|(k, _)| k != "LD_PRELOAD"));
    assert_eq!(
        glibc.env.unset,
        ["LD_PRELOAD"],
        "nothing preloaded, not even an inherited one"
    );
    let je = plan.run(1);
    assert_eq!(
        je.allocator.as_ref().unwrap().path.as_deref(),
        Some(std::path::Path::new("/lib/libjemalloc.so.2"))
    );
    assert!(
        je.env
            .set
            .iter()
            .any(|(k, v)| k == "LD_PRELOAD" && v == "/lib/libjemalloc.so.2")
    );
    assert!(
        je.env.unset.is_empty(),
        "env-unset of LD_PRELOAD does not undo the allocator"
    );
    let by_path = plan.run(2);
    assert_eq!(
        by_path.allocator.as_ref().unwrap().path.as_deref(),
        Some(std::path::Path::new("/work/x/lib/my.so"))
    );
}

#[test]
fn an_allocator_not_installed_is_refused_with_its_package() {
    let mut m = manifest(vec![
        (
            "allocator",
            vec![s("jemalloc"), s("mimalloc"), s("tcmalloc"), s("hoard")],
        ),
        ("mode", vec![s("reuse")]),
        ("elements", vec![Value::Int(16)]),
    ]);
    m.isolation.allocator = Some("{allocator}".into());
    m.command.output = "{run-id}.json".into();
    let errors = expand(&m, &ctx()).unwrap_err();
    let text: Vec<String> = errors
        .iter()
        .map(|e| {
            format!(
                "{}: {} ({})",
                e.key,
                e.message,
                e.help.clone().unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(text.len(), 3, "{text:?}");
    assert!(
        text[0].contains("`mimalloc` is not installed") && text[0].contains("libmimalloc2.0"),
        "{text:?}"
    );
    assert!(text[1].contains("libtcmalloc-minimal4"), "{text:?}");
    assert!(text[2].contains("unknown allocator `hoard`"), "{text:?}");
    assert!(errors.iter().all(|e| e.key == "isolation.allocator"));
}

fn adaptive(min: u32, max: u32) -> Manifest {
    let mut m = size_compare();
    m.schedule.adaptive = Some(crate::manifest::Adaptive {
        min,
        max,
        until: crate::manifest::Until::Decided,
        time_budget: None,
    });
    m.schedule.repetitions = min;
    m
}

#[test]
fn an_adaptive_plan_starts_with_min_rounds_and_grows_a_round_at_a_time() {
    let mut plan = expand(&adaptive(2, 500), &ctx()).unwrap();
    assert_eq!(plan.len(), 8, "2 rounds of 4 cells");
    assert_eq!(plan.cell_count(), 4);
    // Ids are as wide as the largest plan (4 x 500 = 2000 runs): they do not change with rounds.
    assert_eq!(plan.run(0).run_id, "0000-get_tensor-16-r1");
    let first: Vec<String> = plan.runs().map(|r| r.run_id).collect();
    let new = plan.add_round(&[3, 1]);
    assert_eq!(new, vec![8, 9]);
    let added: Vec<(String, u32)> = new
        .iter()
        .map(|&i| {
            (
                crate::plan::describe_cell(&plan.run(i).cell),
                plan.run(i).repetition,
            )
        })
        .collect();
    assert_eq!(
        added,
        [
            ("mode=get_tensor, elements=64".to_string(), 3),
            ("mode=reuse, elements=64".to_string(), 3)
        ]
    );
    assert_eq!(plan.runs_of_cell(1), 3);
    assert_eq!(plan.runs_of_cell(0), 2);
    let again: Vec<String> = plan.runs().take(8).map(|r| r.run_id).collect();
    assert_eq!(first, again, "earlier runs keep their ids");
    // A fixed plan gets no round.
    let mut fixed = expand(&size_compare(), &ctx()).unwrap();
    assert!(fixed.add_round(&[0]).is_empty());
    assert_eq!(fixed.len(), 8);
}

#[test]
fn shuffled_adaptive_rounds_are_shuffled_within_each_round_and_reproducible() {
    let mut m = adaptive(3, 10);
    m.schedule.order = Order::Shuffled;
    m.schedule.seed = Some(11);
    let plan = expand(&m, &ctx()).unwrap();
    let again = expand(&m, &ctx()).unwrap();
    let cells = |p: &Plan| -> Vec<(usize, u32)> {
        (0..p.len())
            .map(|i| (p.cell_of(i), p.run(i).repetition))
            .collect()
    };
    assert_eq!(cells(&plan), cells(&again), "the seed reproduces the order");
    for round in 0..3 {
        let mut seen: Vec<usize> = (round * 4..round * 4 + 4).map(|i| plan.cell_of(i)).collect();
        assert!(
            (round * 4..round * 4 + 4).all(|i| plan.run(i).repetition == round as u32 + 1),
            "round {round} holds repetition {}",
            round + 1
        );
        seen.sort_unstable();
        assert_eq!(seen, [0, 1, 2, 3], "every cell once in round {round}");
    }
    assert_ne!(
        (0..12).map(|i| plan.cell_of(i)).collect::<Vec<_>>(),
        [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3],
        "shuffled"
    );
}

#[test]
fn set_runs_rebuilds_the_recorded_rounds() {
    let mut plan = expand(&adaptive(2, 5), &ctx()).unwrap();
    let mut grown = plan.clone();
    grown.add_round(&[2]);
    let recorded: Vec<(usize, u32)> = (0..grown.len())
        .map(|i| (grown.cell_of(i), grown.run(i).repetition))
        .collect();
    plan.set_runs(recorded);
    assert_eq!(plan, grown);
}
