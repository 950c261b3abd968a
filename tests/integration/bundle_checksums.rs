//! Whole-bundle tamper evidence: `checksums.sha256` lists every file of a finished bundle, and
//! `hwr-exp verify` names every changed, missing and extra file and extra run folder.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

const TWO: &str = r#"format = 1
[experiment]
name = "two"
[command]
shell = "echo '{{\"rep\": {repetition}}}'; echo note >&2"
[schedule]
repetitions = 2
"#;

/// A finished two-run bundle in a temporary repository.
fn bundle() -> (Repo, PathBuf) {
    let repo = repo();
    let m = write_manifest(repo.path(), TWO);
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    (repo, bundle.unwrap())
}

/// A copy of `bundle` next to it, to tamper with.
fn copy(bundle: &Path, name: &str) -> PathBuf {
    let to = bundle.with_file_name(name);
    let status = Command::new("cp")
        .arg("-a")
        .arg(bundle)
        .arg(&to)
        .status()
        .unwrap();
    assert!(status.success());
    to
}

/// `hwr-exp verify` of `bundle`: (exit code, stdout).
fn verify(cwd: &Path, bundle: &Path) -> (i32, String) {
    let out = hwr(cwd, &["verify", bundle.to_str().unwrap()]);
    (code(&out), String::from_utf8_lossy(&out.stdout).into_owned())
}

fn first_run_dir(bundle: &Path) -> PathBuf {
    let plan = json(&bundle.join("plan.json"));
    bundle
        .join("runs")
        .join(plan["runs"][0]["run-id"].as_str().unwrap())
}

/// Flips the first boolean `key` found anywhere in `doc`.
fn flip(doc: &mut serde_json::Value, key: &str) -> bool {
    match doc {
        serde_json::Value::Object(map) => {
            if let Some(serde_json::Value::Bool(b)) = map.get_mut(key) {
                *b = !*b;
                return true;
            }
            map.values_mut().any(|v| flip(v, key))
        }
        serde_json::Value::Array(a) => a.iter_mut().any(|v| flip(v, key)),
        _ => false,
    }
}

fn rewrite_json(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut doc = json(path);
    edit(&mut doc);
    std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap() + "\n").unwrap();
}

#[test]
fn a_finished_bundle_lists_every_file_and_verifies() {
    let (repo, bundle) = bundle();
    let list = std::fs::read_to_string(bundle.join("checksums.sha256")).unwrap();
    for name in [
        "bundle.json",
        "manifest.toml",
        "plan.json",
        "host.json",
        "revision.txt",
        "working-tree.txt",
        "working-tree.patch",
        "provenance.json",
    ] {
        assert!(
            list.contains(&format!("  {name}\n")),
            "{name} missing from\n{list}"
        );
    }
    assert_eq!(list.matches("/run.json\n").count(), 2, "{list}");
    assert_eq!(list.matches("/stderr.log\n").count(), 2, "{list}");
    assert!(
        !list.contains("checksums.sha256") && !list.contains(".lock"),
        "{list}"
    );
    // The format is sha256sum's.
    let out = Command::new("sha256sum")
        .args(["-c", "--quiet", "checksums.sha256"])
        .current_dir(&bundle)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let (code, text) = verify(repo.path(), &bundle);
    assert_eq!(code, 0, "{text}");
}

#[test]
fn every_kind_of_tampering_is_named() {
    let (repo, bundle) = bundle();
    type Tamper = fn(&Path) -> PathBuf;
    let cases: &[(&str, Tamper, &str)] = &[
        (
            "run-json-value",
            |b| {
                let p = first_run_dir(b).join("run.json");
                rewrite_json(&p, |r| r["wall-seconds"] = 99.5.into());
                p
            },
            "differs from",
        ),
        (
            "plan-json",
            |b| {
                let p = b.join("plan.json");
                rewrite_json(&p, |plan| plan["runs"][0]["argv"][2] = "echo changed".into());
                p
            },
            "differs from setup-sha256",
        ),
        (
            "host-json",
            |b| {
                let p = b.join("host.json");
                rewrite_json(&p, |h| h["hostname"] = "elsewhere".into());
                p
            },
            "differs from setup-sha256",
        ),
        (
            "provenance-dirty",
            |b| {
                let p = b.join("provenance.json");
                rewrite_json(&p, |doc| assert!(flip(doc, "dirty"), "{doc}"));
                p
            },
            "recorded in checksums.sha256",
        ),
        (
            "revision-txt",
            |b| {
                let p = b.join("revision.txt");
                std::fs::write(&p, "0123456789abcdef0123456789abcdef01234567\n").unwrap();
                p
            },
            "differs from setup-sha256",
        ),
        (
            "working-tree-txt",
            |b| {
                let p = b.join("working-tree.txt");
                std::fs::write(&p, "").unwrap();
                p
            },
            "differs from setup-sha256",
        ),
        (
            "bundle-json",
            |b| {
                let p = b.join("bundle.json");
                rewrite_json(&p, |i| i["experiment"] = "other".into());
                p
            },
            "recorded in checksums.sha256",
        ),
        (
            "missing-file",
            |b| {
                let p = b.join("working-tree.txt");
                std::fs::remove_file(&p).unwrap();
                p
            },
            "missing",
        ),
        (
            "extra-top-level-file",
            |b| {
                let p = b.join("notes.txt");
                std::fs::write(&p, "added later").unwrap();
                p
            },
            "not listed in checksums.sha256",
        ),
        (
            "extra-file-in-runs",
            |b| {
                let p = b.join("runs/stray.txt");
                std::fs::write(&p, "added later").unwrap();
                p
            },
            "not a run of plan.json",
        ),
        (
            "extra-run-folder",
            |b| {
                let p = b.join("runs/9999-extra");
                std::fs::create_dir(&p).unwrap();
                std::fs::write(p.join("run.json"), "{}").unwrap();
                p
            },
            "not a run of plan.json",
        ),
        (
            "list-deleted",
            |b| {
                let p = b.join("checksums.sha256");
                std::fs::remove_file(&p).unwrap();
                p
            },
            "missing: a finished bundle records",
        ),
        (
            "list-line-outside",
            |b| {
                let p = b.join("checksums.sha256");
                let mut text = std::fs::read_to_string(&p).unwrap();
                text.push_str(&format!("{}  ../../../etc/hostname\n", "0".repeat(64)));
                std::fs::write(&p, text).unwrap();
                p
            },
            "is not a path inside the bundle",
        ),
    ];
    for (name, tamper, says) in cases {
        let copy = copy(&bundle, name);
        let (code, text) = verify(repo.path(), &copy);
        assert_eq!(code, 0, "{name}: the copy verifies before tampering: {text}");
        let path = tamper(&copy);
        let (code, text) = verify(repo.path(), &copy);
        assert_eq!(code, 1, "{name}: {text}");
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{}: ", path.display())))
            .unwrap_or_else(|| panic!("{name}: no problem names {}:\n{text}", path.display()));
        assert!(line.contains(says), "{name}: {line}");
    }
}

#[test]
fn rerun_and_resume_finish_with_a_fresh_list() {
    let (repo, bundle) = bundle();
    let out = hwr(repo.path(), &["rerun", bundle.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let rerun = repo
        .path()
        .join(String::from_utf8_lossy(&out.stdout).lines().last().unwrap());
    assert!(rerun.join("checksums.sha256").is_file());
    let (status, text) = verify(repo.path(), &rerun);
    assert_eq!(status, 0, "{text}");

    // An interrupted bundle (made so by hand) is finished by resume, which rewrites the list.
    let run_dir = first_run_dir(&bundle);
    std::fs::remove_dir_all(&run_dir).unwrap();
    rewrite_json(&bundle.join("bundle.json"), |i| {
        i["status"] = "interrupted".into();
        i["counts"] = serde_json::json!({"ok": 1});
    });
    let out = hwr(repo.path(), &["resume", bundle.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(run_dir.join("run.json").is_file());
    let (status, text) = verify(repo.path(), &bundle);
    assert_eq!(status, 0, "{text}");
}

/// A run may leave a folder tree deeper than the runner's descriptor limit in its folder: the
/// checksum list and `verify` still cover every file of it (the walk keeps a bounded number of
/// folders open). With one descriptor per level, both failed with "Too many open files" under
/// a limit of 256.
#[test]
fn a_folder_tree_deeper_than_the_descriptor_limit_is_listed_and_verified() {
    use std::os::unix::process::CommandExt;
    let repo = repo();
    let m = write_manifest(
        repo.path(),
        r#"format = 1
[experiment]
name = "deep"
[command]
shell = "cd {run-dir} && for i in $(seq 300); do mkdir a && cd a || exit 9; done; echo bottom > f; echo ok"
output-format = "text"
"#,
    );
    let limited = |args: &[&str]| {
        let mut cmd = hwr_command(repo.path());
        cmd.args(args);
        // SAFETY: setrlimit is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: 256,
                    rlim_max: 256,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        cmd.output().unwrap()
    };
    let out = limited(&["run", m.to_str().unwrap(), "--results-dir", "results", "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = repo.path().join(String::from_utf8_lossy(&out.stdout).trim());
    let list = std::fs::read_to_string(bundle.join("checksums.sha256")).unwrap();
    let deep = format!("{}f", "a/".repeat(300));
    assert!(
        list.lines().any(|l| l.ends_with(&deep)),
        "the deepest file is listed"
    );
    let out = limited(&["verify", bundle.to_str().unwrap()]);
    assert_eq!(
        code(&out),
        0,
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    // An edit at the bottom is caught.
    let bottom = first_run_dir(&bundle).join(&deep);
    std::fs::write(&bottom, "changed\n").unwrap();
    let out = limited(&["verify", bundle.to_str().unwrap()]);
    assert_ne!(code(&out), 0, "an edit at the bottom of the tree is caught");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("/a/f"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
