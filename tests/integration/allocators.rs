//! `[isolation] allocator` (issue 21): the library preloaded per cell, seen loaded in the run's
//! `/proc/<pid>/maps` (run.json `allocator`), glibc with nothing preloaded, the report flagging a
//! run where it was not loaded, and `check` refusing an allocator that is not installed.
//!
//! Needs Debian's libjemalloc2; without it the test skips, unless CI (`CI=true`) or
//! `HWR_REQUIRE_ALLOCATORS=1` (both set by `.ci/run`, which installs it) makes that a failure.

use std::path::{Path, PathBuf};

use crate::support::{
    Check, ManifestBuilder, code, hwr, hwr_command, json, need, run, run_records, stderr, stdout,
};

/// The jemalloc library as the linker cache names it, or `None` (skip, or a failure under CI or
/// `HWR_REQUIRE_ALLOCATORS=1`: [`need`]) when it is not installed.
#[track_caller]
fn jemalloc() -> Option<PathBuf> {
    need(
        Check::new("libjemalloc2", "apt-get install -y libjemalloc2", || {
            hwr_exp::allocator::installed()
                .get("jemalloc")
                .cloned()
                .ok_or_else(|| "libjemalloc.so.2 is not in `ldconfig -p`".to_string())
        })
        .required_by("HWR_REQUIRE_ALLOCATORS"),
    )
}

/// A shell run that prints its own maps' allocator lines (the child `grep` inherits LD_PRELOAD)
/// and stays alive a moment, so that the runner looks at a live process.
fn manifest(dir: &Path, allocators: &[&str]) -> PathBuf {
    ManifestBuilder::shell("alloc", "grep -c -e jemalloc /proc/$$/maps || true; sleep 0.5")
        .text_output()
        .output("{allocator}.txt")
        .matrix("allocator", allocators.to_vec())
        .isolation("allocator", "{allocator}")
        .isolation("env-unset", vec!["LD_PRELOAD"])
        .set("measure", "sample-interval", "off")
        .write(dir)
}

#[test]
fn jemalloc_is_seen_loaded_in_its_cell_and_not_in_the_glibc_cell() {
    let Some(lib) = jemalloc() else { return };
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), &["glibc", "jemalloc"]);
    let (out, bundle) = run(dir.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.expect("bundle");
    let records = run_records(&bundle);
    assert_eq!(records.len(), 2);
    let glibc = &records[0]["allocator"];
    let je = &records[1]["allocator"];
    assert_eq!(glibc["name"], "glibc", "{glibc}");
    assert_eq!(glibc["path"], serde_json::Value::Null);
    assert_eq!(
        glibc["seen-loaded"], true,
        "glibc in effect: no allocator library mapped: {glibc}"
    );
    assert!(glibc.get("mapped").is_none(), "{glibc}");
    assert_eq!(je["name"], "jemalloc");
    assert_eq!(je["path"], lib.display().to_string());
    assert_eq!(
        je["sha256"],
        crate::support::sha256_hex(&std::fs::read(&lib).unwrap()),
        "{je}"
    );
    assert_eq!(je["seen-loaded"], true, "{je}");
    assert!(je["mapped"][0].as_str().unwrap().contains("libjemalloc"), "{je}");
    // The runs themselves agree: the preloaded shell maps jemalloc, the glibc one does not.
    let count = |name: &str| {
        std::fs::read_to_string(
            bundle
                .join("runs")
                .join(records_id(&records, name))
                .join(format!("{name}.txt")),
        )
        .unwrap()
        .trim()
        .to_string()
    };
    assert_ne!(count("jemalloc"), "0");
    assert_eq!(count("glibc"), "0");
    // plan.json names each run's allocator and its LD_PRELOAD.
    let plan = json(&bundle.join("plan.json"));
    assert_eq!(plan["runs"][1]["allocator"], "jemalloc");
    assert!(
        plan["runs"][1]["env"]["set"]
            .as_array()
            .unwrap()
            .iter()
            .any(|kv| kv[0] == "LD_PRELOAD" && kv[1] == lib.display().to_string())
    );
    assert!(
        plan["runs"][0]["env"]["unset"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "LD_PRELOAD")
    );
}

fn records_id(records: &[serde_json::Value], allocator: &str) -> String {
    records
        .iter()
        .find(|r| r["cell"]["allocator"] == allocator)
        .and_then(|r| r["run-id"].as_str())
        .expect("run of that allocator")
        .to_string()
}

#[test]
fn a_library_that_is_not_loaded_is_flagged_in_the_report() {
    // A file that is not a shared library: the dynamic loader says it cannot be preloaded and
    // goes on without it, so the run succeeds with glibc's malloc.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("not-a-library.so"), b"nothing here\n").unwrap();
    let m = ManifestBuilder::shell("alloc", "sleep 0.5; echo '{{\"x\": 1}}'")
        .output("out-{repetition}.json")
        .isolation("allocator", "./not-a-library.so")
        .set("measure", "sample-interval", "off")
        .write(dir.path());
    let (out, bundle) = run(dir.path(), &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.expect("bundle");
    let rec = &run_records(&bundle)[0];
    assert_eq!(rec["allocator"]["seen-loaded"], false, "{}", rec["allocator"]);
    let report = hwr(
        dir.path(),
        &["report", bundle.to_str().unwrap(), "--format", "json"],
    );
    assert_eq!(code(&report), 0, "{}", stderr(&report));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&report)).unwrap();
    let text = doc.to_string();
    assert!(text.contains("not seen loaded"), "{text}");
    let table = hwr(dir.path(), &["report", bundle.to_str().unwrap()]);
    assert!(stdout(&table).contains("not seen loaded"), "{}", stdout(&table));
}

#[test]
fn check_refuses_an_allocator_that_is_not_installed_naming_its_package() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), &["glibc", "jemalloc", "mimalloc"]);
    // An empty linker cache: nothing is installed.
    let out = hwr_command(dir.path())
        .env(hwr_exp::allocator::LDCONFIG_VAR, "/bin/true")
        .arg("check")
        .arg(&m)
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("allocator `jemalloc` is not installed"), "{err}");
    assert!(err.contains("apt-get install libjemalloc2"), "{err}");
    assert!(err.contains("libmimalloc2.0"), "{err}");
    assert!(err.contains("experiment.toml:"), "located in the manifest: {err}");
    // `run` refuses the same way and writes nothing.
    let out = hwr_command(dir.path())
        .env(hwr_exp::allocator::LDCONFIG_VAR, "/bin/true")
        .args(["run", "experiment.toml", "--quiet", "--results-dir", "results"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(!dir.path().join("results").exists());
    // A path that does not exist is refused by check too.
    let m = manifest(dir.path(), &["glibc", "/nowhere/libjemalloc.so.2"]);
    let out = hwr(dir.path(), &["check", m.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("/nowhere/libjemalloc.so.2"),
        "{}",
        stderr(&out)
    );
}

/// Issue 37 item 2: a statically linked probe cannot be given a preloaded allocator; its run is
/// not shown loaded (`seen-loaded` null with the reason), and the report leaves it out of the
/// estimates naming why, instead of aggregating it as if the allocator had run.
#[test]
fn a_statically_linked_probe_is_left_out_naming_why() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("probe.c"),
        "#include <stdio.h>\n#include <unistd.h>\nint main(void){usleep(300000);puts(\"{\\\"x\\\": 1}\");return 0;}\n",
    )
    .unwrap();
    std::fs::write(d.join("lib.c"), "int hwr_alloc_marker(void){return 1;}\n").unwrap();
    let cc = |args: &[&str]| {
        std::process::Command::new("cc")
            .current_dir(d)
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    };
    if !cc(&["-static", "-o", "probe", "probe.c"]) || !cc(&["-shared", "-fPIC", "-o", "liballoc.so", "lib.c"])
    {
        assert!(
            std::env::var("HWR_REQUIRE_ALLOCATORS").as_deref() != Ok("1"),
            "cc -static failed (apt-get install libc6-dev)"
        );
        eprintln!("skipping: cc -static not available");
        return;
    }
    let m = ManifestBuilder::argv("alloc", &["./probe"])
        .output("out-{repetition}.json")
        .isolation("allocator", "./liballoc.so")
        .set("measure", "sample-interval", "off")
        .write(d);
    let (out, bundle) = run(d, &m);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = bundle.expect("bundle");
    let alloc = &run_records(&bundle)[0]["allocator"];
    assert_eq!(alloc["seen-loaded"], serde_json::Value::Null, "{alloc}");
    let reason = alloc["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("never mapped the C library"), "{alloc}");
    let report = hwr(d, &["report", bundle.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code(&report), 0, "{}", stderr(&report));
    let text = stdout(&report);
    assert!(text.contains("not shown loaded"), "{text}");
    assert!(text.contains("statically linked"), "{text}");
    let table = hwr(d, &["report", bundle.to_str().unwrap()]);
    let table = stdout(&table);
    assert!(table.contains("left out of the aggregates"), "{table}");
    assert!(
        !table.contains("process ended before its libraries were mapped"),
        "{table}"
    );
}
