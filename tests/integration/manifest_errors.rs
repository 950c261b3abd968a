//! Malformed manifests: every file in tests/manifests/bad/ must fail with a diagnostic at the
//! location and with the message its first line announces (`# expect: LINE:COL substring`).

use std::path::{Path, PathBuf};

use hwr_exp::manifest::{self, Diagnostics};
use proptest::prelude::*;

use crate::support::{code, hwr, package_root, source_path, stderr};

fn bad_dir() -> PathBuf {
    source_path("tests/manifests/bad")
}

fn bad_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(bad_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

/// `(line, col, substring)` from `# expect: LINE:COL substring`.
fn expectation(path: &Path) -> (usize, usize, String) {
    let text = std::fs::read_to_string(path).unwrap();
    let first = text.lines().next().unwrap();
    let rest = first
        .strip_prefix("# expect: ")
        .unwrap_or_else(|| panic!("{}: first line must be `# expect: LINE:COL text`", path.display()));
    let (loc, msg) = rest.split_once(' ').unwrap();
    let (line, col) = loc.split_once(':').unwrap();
    (line.parse().unwrap(), col.parse().unwrap(), msg.to_string())
}

fn load_err(path: &Path) -> Diagnostics {
    match manifest::load(path) {
        Ok(_) => panic!("{} parsed but should fail", path.display()),
        Err(d) => d,
    }
}

#[test]
fn every_bad_manifest_fails_where_announced() {
    let files = bad_files();
    assert!(files.len() >= 32, "only {} bad manifests", files.len());
    let mut failures = Vec::new();
    for path in &files {
        let (line, col, substring) = expectation(path);
        let diags = load_err(path);
        let rendered = diags.to_string();
        let hit = diags
            .items
            .iter()
            .any(|d| diags.line_col(d.span.start) == (line, col) && d.message.contains(&substring));
        let location = format!("{}:{line}:{col}", path.display());
        if !hit || !rendered.contains(&location) || !rendered.contains('^') {
            failures.push(format!(
                "{}: expected {line}:{col} `{substring}`, got:\n{rendered}",
                path.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn renders_source_line_and_caret_under_the_placeholder() {
    let diags = load_err(&bad_dir().join("unknown-placeholder-argv.toml"));
    let text = diags.to_string();
    let expected = "\
error: unknown placeholder `{mdoe}` in `command.argv`
  --> PATH:8:28
  |
8 | argv = [\"echo\", \"--mode\", \"{mdoe}\"]
  |                            ^^^^^^
  = help: did you mean `{mode}`? placeholders are the matrix keys (mode) and the built-ins (repetition, run-id, hwr-exp, bundle, run-dir); write `{{` for a literal brace
"
    .replace("PATH", &bad_dir().join("unknown-placeholder-argv.toml").display().to_string());
    assert_eq!(text, expected);
}

#[test]
fn unknown_keys_suggest_the_closest_valid_key() {
    let cases = [
        ("unknown-schedule-key.toml", "did you mean `repetitions`?"),
        ("unknown-command-key.toml", "did you mean `argv`?"),
        ("unknown-top-key.toml", "did you mean `format`?"),
        ("unknown-top-section.toml", "did you mean `schedule`?"),
        ("unknown-measure-key.toml", "did you mean `sample-interval`?"),
        ("unknown-experiment-key.toml", "did you mean `description`?"),
        ("exclude-unknown-key.toml", "did you mean `mode`?"),
        ("bad-env-policy.toml", "did you mean \"clean\"?"),
    ];
    for (file, help) in cases {
        let diags = load_err(&bad_dir().join(file));
        assert!(
            diags
                .items
                .iter()
                .any(|d| d.help.as_deref().is_some_and(|h| h.contains(help))),
            "{file}: no help containing {help:?} in\n{diags}"
        );
    }
    // The help also lists every valid key.
    let diags = load_err(&bad_dir().join("unknown-schedule-key.toml"));
    assert!(
        diags
            .to_string()
            .contains("valid keys: repetitions, order, seed, jobs")
    );
}

#[test]
fn reports_all_errors_at_once_in_source_order() {
    let src = "\
format = 1
[experiment]
name = \"Bad Name\"
[command]
argv = [\"echo\", \"{nope}\"]
[schedule]
repetitions = 0
";
    let diags = manifest::parse(src, Path::new("three.toml"), Path::new("/tmp")).unwrap_err();
    let found: Vec<(usize, usize)> = diags.items.iter().map(|d| diags.line_col(d.span.start)).collect();
    assert_eq!(found, vec![(3, 8), (5, 18), (7, 15)], "{diags}");
    let text = diags.to_string();
    assert_eq!(text.matches("error: ").count(), 3, "{text}");
    for loc in ["three.toml:3:8", "three.toml:5:18", "three.toml:7:15"] {
        assert!(text.contains(loc), "{loc} missing in\n{text}");
    }
}

#[test]
fn a_syntax_error_is_one_located_diagnostic() {
    let diags = load_err(&bad_dir().join("syntax-missing-value.toml"));
    assert_eq!(diags.items.len(), 1, "{diags}");
}

#[test]
fn a_newer_format_is_the_only_diagnostic() {
    // format-2.toml also has a section this build does not know; it is not reported.
    let diags = load_err(&bad_dir().join("format-2.toml"));
    assert_eq!(diags.items.len(), 1, "{diags}");
    assert!(diags.items[0].message.contains("manifest format 2 is newer"));
}

#[test]
fn unreadable_file_is_one_diagnostic() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    let diags = manifest::load(&missing).unwrap_err();
    assert_eq!(diags.items.len(), 1);
    let msg = &diags.items[0].message;
    assert!(
        msg.starts_with(&format!("cannot read {}: ", missing.display())),
        "{msg}"
    );
    assert!(msg.contains("No such file or directory"), "{msg}");

    let binary = dir.path().join("binary.toml");
    std::fs::write(&binary, [0xff, 0xfe, 0x00, 0x41]).unwrap();
    let diags = manifest::load(&binary).unwrap_err();
    assert!(diags.items[0].message.starts_with("cannot read"), "{diags}");

    // A folder is not a manifest either.
    let diags = manifest::load(dir.path()).unwrap_err();
    assert!(diags.items[0].message.starts_with("cannot read"), "{diags}");
}

/// Problems that depend on the host (CPUs outside the allowed set, more jobs than allowed CPUs
/// for `cpus = "auto"`) are not manifest errors: every file in tests/manifests/host/ loads, and
/// `hwr-exp check` (which plans it against this host) reports the problem where it is written
/// and exits 2.
#[test]
fn host_dependent_problems_are_reported_by_check_where_announced() {
    let dir = source_path("tests/manifests/host");
    let allowed = hwr_exp::cpus::allowed_cpus().unwrap();
    let allowed_text = format!("allowed CPU set ({})", hwr_exp::cpus::format_cpu_list(&allowed));
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        n += 1;
        let (line, col, substring) = expectation(&path);
        manifest::load(&path).expect("the document itself is valid");
        let out = hwr(package_root(), &["check", path.to_str().unwrap()]);
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{err}");
        assert!(err.contains(&allowed_text), "{err}");
        assert!(err.contains(&substring), "{err}");
        assert!(err.contains(&format!("{}:{line}:{col}", path.display())), "{err}");
    }
    assert_eq!(n, 2);
}

const GOOD: &str = "format = 1\n[experiment]\nname = \"p\"\n[command]\nargv = [\"echo\", \"{mode}\"]\n[matrix]\nmode = [\"a\", 1]\n[isolation]\ntimeout = \"5s\"\nenv = { A = \"{mode}\" }\n";

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Arbitrary text never panics the parser; failures always carry at least one diagnostic
    /// whose rendering works.
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC*") {
        if let Err(d) = manifest::parse(&text, Path::new("p.toml"), Path::new("/tmp")) {
            prop_assert!(!d.items.is_empty());
            let _ = d.to_string();
        }
    }

    /// A valid manifest with a random slice replaced by random text (often still TOML, so the
    /// validator's own paths get exercised) never panics either.
    #[test]
    fn mutated_manifest_never_panics(at in 0usize..GOOD.len(), len in 0usize..12, insert in "[\\PC\\n{}\\[\\]=\"']{0,8}") {
        let start = (0..=at).rev().find(|&i| GOOD.is_char_boundary(i)).unwrap();
        let end = (start + len).min(GOOD.len());
        let text = format!("{}{}{}", &GOOD[..start], insert, &GOOD[end..]);
        if let Err(d) = manifest::parse(&text, Path::new("p.toml"), Path::new("/tmp")) {
            prop_assert!(!d.items.is_empty());
            let _ = d.to_string();
        }
    }
}
