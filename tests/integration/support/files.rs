//! Files the tests read and write: the repository's own files, the checked-in fixture bundles,
//! the JSON files of a bundle, and trees copied or written in temporary folders.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The package root (`CARGO_MANIFEST_DIR`): the folder of `Cargo.toml`, `src/`, `tests/`, and the
/// working directory of commands given paths such as `tests/fixtures/bundles/NAME`.
pub fn package_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `REL` under the package root ([`package_root`]), e.g. `tests/manifests/bad` or `experiments`.
pub fn source_path(rel: &str) -> PathBuf {
    package_root().join(rel)
}

/// The checked-in fixture bundle `NAME` as the relative path `tests/fixtures/bundles/NAME`
/// (tests run in the package root; error messages then name the file as a user would type it).
pub fn bundle_fixture(name: &str) -> PathBuf {
    Path::new("tests/fixtures/bundles").join(name)
}

/// Parses a JSON file; panics naming the file when it cannot be read or parsed.
pub fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `run.json` of every run of the bundle that has one, in plan order (`plan.json`).
pub fn run_records(bundle: &Path) -> Vec<serde_json::Value> {
    let plan = json(&bundle.join("plan.json"));
    plan["runs"]
        .as_array()
        .expect("plan.json has runs")
        .iter()
        .filter_map(|r| {
            let p = bundle
                .join("runs")
                .join(r["run-id"].as_str().expect("run-id is a string"))
                .join("run.json");
            p.exists().then(|| json(&p))
        })
        .collect()
}

/// Removes `summary` from the run.json in the run folder `run_dir` (with serde_json), as a
/// bundle written before run.json had it: a report then reads the run's output. Returns whether
/// there was one.
pub fn strip_summary(run_dir: &Path) -> bool {
    let path = run_dir.join("run.json");
    let mut doc = json(&path);
    let had = doc
        .as_object_mut()
        .expect("run.json is an object")
        .remove("summary")
        .is_some();
    std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    had
}

/// The bundle folders under `RESULTS/EXPERIMENT`, sorted; hidden entries (a `.tmp-*` staging
/// folder of a bundle still being set up) are left out. Empty when the folder does not exist.
pub fn bundles(results: &Path, experiment: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(results.join(experiment)) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .map(|e| e.expect("a readable folder entry").path())
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    found.sort();
    found
}

/// The one bundle folder under `RESULTS/EXPERIMENT` ([`bundles`]); panics unless there is exactly one.
pub fn the_bundle(results: &Path, experiment: &str) -> PathBuf {
    let mut found = bundles(results, experiment);
    assert_eq!(
        found.len(),
        1,
        "bundles under {}: {found:?}",
        results.join(experiment).display()
    );
    found.pop().expect("exactly one")
}

/// SHA-256 of `bytes` as 64 lowercase hex digits (the form bundle files record).
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// `len` pseudo-random bytes from `seed`, every seventh a NUL (git sees them as binary);
/// deterministic.
pub fn binary_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len)
        .map(|i| if i % 7 == 0 { 0 } else { rng.u8(..) })
        .collect()
}

/// Writes `bytes` to `root/rel`, creating the folders on the way.
pub fn write_file(root: &Path, rel: &str, bytes: &[u8]) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().expect("a file under root"))
        .unwrap_or_else(|e| panic!("creating the folder of {}: {e}", path.display()));
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// Copies the tree `src` into `dst` (created): regular files and folders.
pub fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), to).unwrap();
        }
    }
}

/// `hwr-exp report BUNDLE --format FORMAT --wide` through the library, as text (no width
/// limit: tables one line per row).
pub fn report_text(bundle: impl Into<PathBuf>, format: hwr_exp::report::Format) -> anyhow::Result<String> {
    hwr_exp::report::report_to_string(&hwr_exp::report::ReportOptions {
        bundle: bundle.into(),
        format,
        ..Default::default()
    })
}
