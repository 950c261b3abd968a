//! `hwr-exp completions SHELL` and `hwr-exp man [COMMAND]...`: generated from the clap definitions,
//! so every subcommand is in them; the bash script is valid bash, the pages valid roff.

use std::io::Write;
use std::process::{Command, Stdio};

use clap::CommandFactory;

use crate::support::{Program, need};
use crate::support::{code, hwr, package_root, stderr};

/// The subcommands DESIGN.md names plus the two that print this documentation (hidden ones, such
/// as the Slurm task's `slurm-task`, are left out of completions and man pages alike).
const SUBCOMMANDS: [&str; 16] = [
    "run",
    "check",
    "plan",
    "schema",
    "probe",
    "report",
    "compare",
    "list",
    "verify",
    "rerun",
    "resume",
    "bisect",
    "wait",
    "cancel",
    "completions",
    "man",
];

/// Every subcommand clap knows (the list above must be complete).
fn clap_subcommands() -> Vec<String> {
    hwr_exp::cli::Cli::command()
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.get_name().to_string())
        .collect()
}

fn hwr_ok(args: &[&str]) -> String {
    let out = hwr(package_root(), args);
    assert_eq!(code(&out), 0, "hwr-exp {args:?}: {}", stderr(&out));
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Runs `program args` with `input` on stdin; (exit code, stdout, stderr).
fn pipe(program: &str, args: &[&str], input: &str) -> (i32, String, String) {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        code(&out),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_subcommand_list_is_complete() {
    let mut clap = clap_subcommands();
    clap.sort();
    let mut ours = SUBCOMMANDS.map(String::from).to_vec();
    ours.sort();
    assert_eq!(clap, ours);
}

#[test]
fn bash_completion_is_valid_bash_and_names_every_subcommand() {
    let script = hwr_ok(&["completions", "bash"]);
    assert!(script.contains("complete -F _hwr__exp "), "registers for hwr-exp");
    for sub in SUBCOMMANDS {
        assert!(
            script.contains(&format!("cmd=\"hwr__exp__subcmd__{sub}\"")),
            "{sub}"
        );
    }
    // Options of a subcommand and a value list are in it too.
    assert!(script.contains("--results-dir") && script.contains("table md csv json html"));
    let (code, _, stderr) = pipe("bash", &["-n"], &script);
    assert_eq!(code, 0, "bash -n: {stderr}");
    // Sourced in a real bash, the completion function answers `hwr-exp re<TAB>`.
    let probe = format!(
        "{script}\nCOMP_WORDS=(hwr-exp re); COMP_CWORD=1; COMP_LINE='hwr-exp re'; COMP_POINT=10\n_hwr__exp hwr-exp re hwr-exp\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n"
    );
    let (code, stdout, stderr) = pipe("bash", &["--norc", "--noprofile", "-s"], &probe);
    assert_eq!(code, 0, "{stderr}");
    let mut words: Vec<&str> = stdout.lines().collect();
    words.sort();
    assert_eq!(words, ["report", "rerun", "resume"], "{stderr}");
}

#[test]
fn zsh_and_fish_completions_name_every_subcommand() {
    let zsh = hwr_ok(&["completions", "zsh"]);
    assert!(zsh.starts_with("#compdef hwr-exp"));
    let fish = hwr_ok(&["completions", "fish"]);
    assert!(fish.contains("complete -c hwr-exp"));
    for sub in SUBCOMMANDS {
        assert!(zsh.contains(&format!("'{sub}:")), "zsh: {sub}");
        assert!(fish.contains(&format!("-a \"{sub}\"")), "fish: {sub}");
    }
}

#[test]
fn man_page_has_the_header_and_every_subcommand() {
    let page = hwr_ok(&["man"]);
    assert!(
        page.contains(&format!(
            ".TH hwr-exp 1  \"hwr-exp {}\"",
            env!("CARGO_PKG_VERSION")
        )),
        "{page}"
    );
    assert!(page.contains(".SH SUBCOMMANDS"));
    for sub in SUBCOMMANDS {
        assert!(
            page.contains(&format!("hwr\\-exp\\-{}(1)", sub.replace('-', "\\-"))),
            "{sub}"
        );
    }
    // Each subcommand's own page, with its options.
    let run = hwr_ok(&["man", "run"]);
    assert!(
        run.contains(".TH hwr-exp-run 1") && run.contains("\\-\\-results\\-dir"),
        "{run}"
    );
    let nested = hwr_ok(&["man", "probe", "safetensors-retention"]);
    assert!(nested.contains(".TH hwr-exp-probe-safetensors-retention 1"));
}

#[test]
fn man_pages_are_valid_roff() {
    if need(Program("groff")).is_none() {
        return;
    }
    for sub in [
        &[][..],
        &["run"],
        &["report"],
        &["probe", "safetensors-retention"],
    ] {
        let mut args = vec!["man"];
        args.extend(sub);
        let page = hwr_ok(&args);
        // -ww: every warning; -z: no output, parse only.
        let (code, _, stderr) = pipe("groff", &["-man", "-ww", "-z"], &page);
        assert!(code == 0 && stderr.is_empty(), "{args:?}: {stderr}");
    }
}

#[test]
fn man_of_an_unknown_subcommand_is_a_usage_error() {
    let out = hwr(package_root(), &["man", "probe", "nope"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("subcommands of `hwr-exp probe`: safetensors-retention"));
    assert!(out.stdout.is_empty());
}

/// Issue 22, item 14: a command without subcommands says so (not an empty list), and the hidden
/// `slurm-task` is never offered.
#[test]
fn man_names_what_there_is_without_hidden_commands() {
    let out = hwr(package_root(), &["man", "report", "plan"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("`hwr-exp report` has no subcommands"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains(": \n"), "{}", stderr(&out));
    let out = hwr(package_root(), &["man", "nosuch"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("subcommands of `hwr-exp`: run"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("slurm-task"), "{}", stderr(&out));
}

/// Issue 22, item 14: the probe's `--help`, its man page and experiments/size-compare.toml say
/// what the code does (docs/probe.md, DESIGN 7): `get_tensor` parses the header once, then
/// looks the tensor up and copies it each iteration.
#[test]
fn the_probe_says_the_header_is_parsed_once() {
    let help = hwr(package_root(), &["probe", "safetensors-retention", "--help"]);
    let man = hwr(package_root(), &["man", "probe", "safetensors-retention"]);
    let toml = std::fs::read_to_string(package_root().join("experiments/size-compare.toml")).unwrap();
    for (what, text) in [
        ("--help", String::from_utf8_lossy(&help.stdout).into_owned()),
        ("man", String::from_utf8_lossy(&man.stdout).replace("\\-", "-")),
        ("size-compare.toml", toml),
    ] {
        let words = text
            .split_whitespace()
            .map(|w| w.trim_start_matches('#'))
            .collect::<Vec<_>>()
            .join(" ");
        assert!(words.contains("parsed once"), "{what}: {words}");
        assert!(
            !words.contains("parse +") && !words.contains("each iteration),"),
            "{what}: {words}"
        );
    }
}

/// Issue 22, items 11 and 14: the README's commands table names every shell `completions` takes
/// and every option of `run`, `plan`, `rerun` and `resume`; every table row in the README belongs to a table
/// (a header and a rule above it) and has as many cells as its header.
#[test]
fn the_readme_tables_render_and_name_every_option() {
    let readme = std::fs::read_to_string(package_root().join("README.md")).unwrap();
    let row_of = |command: &str| {
        readme
            .lines()
            .find(|l| l.starts_with(&format!("| `hwr-exp {command} ")))
            .unwrap_or_else(|| panic!("no row for {command}"))
            .to_owned()
    };
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        assert!(row_of("completions").contains(shell), "{shell}");
    }
    for command in ["run", "plan", "rerun", "resume"] {
        let help = String::from_utf8_lossy(&hwr(package_root(), &[command, "--help"]).stdout).into_owned();
        let row = row_of(command);
        for option in help
            .split_whitespace()
            .filter(|w| w.starts_with("--") && w.len() > 2)
        {
            let option = option.trim_end_matches(',');
            if option == "--help" || option == "--version" {
                continue;
            }
            assert!(row.contains(option), "README's {command} row lacks {option}");
        }
    }
    let cells = |line: &str| line.replace("\\|", "").matches('|').count();
    let lines: Vec<&str> = readme.lines().collect();
    let rule =
        |l: &str| l.starts_with("|-") || l.starts_with("|:") || l.starts_with("| -") || l.starts_with("|---");
    let mut header_cells = None;
    for (i, line) in lines.iter().enumerate() {
        if !line.starts_with('|') {
            header_cells = None;
            continue;
        }
        if header_cells.is_none() {
            assert!(
                lines.get(i + 1).is_some_and(|next| rule(next)),
                "README line {}: a row outside a table: {line:.80}",
                i + 1
            );
            header_cells = Some(cells(line));
        } else {
            assert_eq!(
                Some(cells(line)),
                header_cells,
                "README line {}: {line:.80}",
                i + 1
            );
        }
    }
}
