//! `hwr-exp verify` and `hwr-exp list` end to end, and two runners sharing a results folder.

use crate::support::{
    ManifestBuilder, code, hwr, output_within, printed_path, repo, run, run_records, spawn_run, stderr,
};

/// Three runs, each printing `{"rep": N}`.
fn three() -> ManifestBuilder {
    ManifestBuilder::shell("three", r#"echo '{{"rep": {repetition}}}'"#).repetitions(3)
}

#[test]
fn verify_catches_a_modified_and_a_deleted_output_file() {
    let repo = repo();
    let m = three().write(repo.path());
    let (out, bundle) = run(repo.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.unwrap();
    let b = bundle.to_str().unwrap();

    let out = hwr(repo.path(), &["verify", b]);
    assert_eq!(
        code(&out),
        0,
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok: "));

    let records = run_records(&bundle);
    let output = |i: usize| {
        bundle
            .join("runs")
            .join(records[i]["run-id"].as_str().unwrap())
            .join(records[i]["output"].as_str().unwrap())
    };
    std::fs::write(output(0), "{\"rep\": 100}\n").unwrap();
    std::fs::remove_file(output(2)).unwrap();
    let out = hwr(repo.path(), &["verify", b]);
    assert_eq!(code(&out), 1);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("2 problem(s)"), "{text}");
    assert!(
        text.contains(&format!("{}: sha256 ", output(0).display())) && text.contains("recorded in run.json"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{}: listed in run.json but missing",
            output(2).display()
        )),
        "{text}"
    );

    // The archived manifest is checked against bundle-manifest-sha256.
    std::fs::write(bundle.join("manifest.toml"), "changed").unwrap();
    let out = hwr(repo.path(), &["verify", b]);
    assert_eq!(code(&out), 1);
    assert!(String::from_utf8_lossy(&out.stdout).contains("manifest-sha256"));
}

#[test]
fn unreadable_bundles_are_usage_errors_naming_the_file() {
    let repo = repo();
    let m = three().write(repo.path());
    let (_, bundle) = run(repo.path(), &m);
    let bundle = bundle.unwrap();

    let out = hwr(repo.path(), &["verify", "no-such-bundle"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("no-such-bundle"), "{}", stderr(&out));
    let out = hwr(repo.path(), &["verify", "."]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("no bundle.json"), "{}", stderr(&out));
    let out = hwr(repo.path(), &["list", "no-such-folder"]);
    assert_eq!(code(&out), 2);

    let info = bundle.join("bundle.json");
    let text = std::fs::read_to_string(&info).unwrap();
    std::fs::write(
        &info,
        text.replace("\"bundle-format\": 1", "\"bundle-format\": 2"),
    )
    .unwrap();
    for cmd in ["verify", "resume", "rerun"] {
        let out = hwr(repo.path(), &[cmd, bundle.to_str().unwrap()]);
        assert_eq!(code(&out), 2, "{cmd}");
        let err = stderr(&out);
        assert!(
            err.contains(info.to_str().unwrap()) && err.contains("newer"),
            "{cmd}: {err}"
        );
    }
    // list skips it with a warning naming the file.
    let out = hwr(repo.path(), &["list", "results"]);
    assert_eq!(code(&out), 0);
    assert!(stderr(&out).contains("bundle.json"), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        1,
        "header only"
    );
}

#[test]
fn two_runs_at_once_write_two_bundles() {
    let repo = repo();
    three().write(repo.path());
    let (a, b) = (spawn_run(repo.path()), spawn_run(repo.path()));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert_eq!((code(&a), code(&b)), (0, 0), "{}{}", stderr(&a), stderr(&b));
    let printed = |o: &std::process::Output| printed_path(repo.path(), o).display().to_string();
    let (pa, pb) = (printed(&a), printed(&b));
    assert_ne!(pa, pb);
    for p in [&pa, &pb] {
        let bundle = std::path::Path::new(p);
        assert_eq!(run_records(bundle).len(), 3);
        assert_eq!(code(&hwr(repo.path(), &["verify", p])), 0);
    }
    let listed = hwr(repo.path(), &["list", "results", "--format", "json"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 2);
    for row in listed.as_array().unwrap() {
        assert_eq!(row["status"], "complete");
        assert_eq!(row["runs-ok"], 3);
        assert_eq!(row["runs-failed"], 0);
        assert_eq!(row["dirty"], true, "experiment.toml is untracked");
        assert_eq!(row["revision"], repo.head(), "{row}");
    }
}

/// A run can reach its bundle's top-level files (`HWR_BUNDLE` names the folder). Edits to the
/// files written at setup, made while the runs execute, used to be taken into the checksum list
/// written at the end, so `verify` passed on a bundle whose plan.json no run had followed. Each
/// setup file edited by a run is now caught by `verify` and noted in bundle.json.
#[test]
fn setup_files_edited_by_a_run_are_caught() {
    for name in [
        "plan.json",
        "host.json",
        "revision.txt",
        "working-tree.txt",
        "working-tree.patch",
    ] {
        let repo = repo();
        let m = ManifestBuilder::shell(
            "edits-setup",
            &format!(r#"if [ {{repetition}} = 2 ]; then echo ' ' >> "$HWR_BUNDLE/{name}"; fi; echo '{{{{"ok": true}}}}'"#),
        )
        .repetitions(2)
        .write(repo.path());
        let (out, bundle) = run(repo.path(), &m);
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
        let bundle = bundle.unwrap();
        let info: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(bundle.join("bundle.json")).unwrap()).unwrap();
        assert!(
            info["setup-sha256"][name].as_str().is_some_and(|s| s.len() == 64),
            "{name}: {info}"
        );
        let notes = info["notes"].to_string();
        assert!(
            notes.contains(&format!("{name} was changed while the runs executed")),
            "{name}: {info}"
        );
        let out = hwr(repo.path(), &["verify", bundle.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(code(&out), 1, "{name}: {text}");
        assert!(
            text.contains(&format!("{}: sha256 ", bundle.join(name).display()))
                && text.contains("changed after the bundle was set up"),
            "{name}: {text}"
        );
    }
}

/// A run that replaces working-tree.patch with a FIFO does not hang the runner: the patch is read
/// back at the end inside the bundle only (regular files, no link followed), the bundle is
/// finished with a note, and `verify` names the file.
#[test]
fn a_fifo_in_place_of_the_patch_does_not_hang_the_runner() {
    let repo = repo();
    ManifestBuilder::shell(
        "fifo-patch",
        r#"rm "$HWR_BUNDLE/working-tree.patch"; mkfifo "$HWR_BUNDLE/working-tree.patch"; echo '{{"ok": true}}'"#,
    )
    .write(repo.path());
    let child = spawn_run(repo.path());
    let out = output_within(
        child,
        std::time::Duration::from_secs(60),
        "the runner (hung on the FIFO)",
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = repo.path().join(String::from_utf8_lossy(&out.stdout).trim());
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(bundle.join("bundle.json")).unwrap()).unwrap();
    assert!(
        info["notes"]
            .to_string()
            .contains("working-tree.patch cannot be read any more"),
        "{info}"
    );
    let out = hwr(repo.path(), &["verify", bundle.to_str().unwrap()]);
    assert_eq!(code(&out), 1, "{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("working-tree.patch"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
