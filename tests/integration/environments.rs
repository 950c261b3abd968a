//! `[environments]` (issue 21): Python environments built with uv from a local wheel folder (no
//! network): two versions of a tiny package written by the test, one environment each, the locks
//! and freezes in the bundle, the cached venv reused by a second run and a rerun resolving the same
//! versions, a venv changed by hand (freeze and lock disagree) refused, uv missing named.
//!
//! Needs uv and python3; without them the test skips, unless `HWR_REQUIRE_UV=1` (set by `.ci/run`,
//! which installs uv) makes that a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{ManifestBuilder, code, hwr_command, json, run_records, sha256_hex, stderr, stdout};

fn ready() -> bool {
    let ok = |p: &str| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ok("uv") && ok("python3") {
        return true;
    }
    assert!(
        std::env::var("HWR_REQUIRE_UV").as_deref() != Ok("1"),
        "HWR_REQUIRE_UV=1 but uv or python3 is missing (pip install uv)"
    );
    eprintln!("skipping: uv or python3 not on PATH (pip install uv)");
    false
}

/// Writes `wheels/tinypkg-<v>-py3-none-any.whl` for each version: a minimal pure-Python wheel
/// whose module prints its version.
fn write_wheels(dir: &Path, versions: &[&str]) -> PathBuf {
    let wheels = dir.join("wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    let script = r#"
import base64, hashlib, sys, zipfile
out, versions = sys.argv[1], sys.argv[2:]
for v in versions:
    di = f"tinypkg-{v}.dist-info"
    files = {
        "tinypkg/__init__.py": f"__version__ = {v!r}\n",
        f"{di}/METADATA": f"Metadata-Version: 2.1\nName: tinypkg\nVersion: {v}\n",
        f"{di}/WHEEL": "Wheel-Version: 1.0\nGenerator: hwr-exp-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append(f"{di}/RECORD,,")
    files[f"{di}/RECORD"] = "\n".join(record) + "\n"
    with zipfile.ZipFile(f"{out}/tinypkg-{v}-py3-none-any.whl", "w") as z:
        for name, text in files.items():
            z.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), text)
"#;
    let status = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&wheels)
        .args(versions)
        .status()
        .unwrap();
    assert!(status.success());
    wheels
}

fn manifest(dir: &Path) -> PathBuf {
    let text = ManifestBuilder::shell(
        "envs",
        "python -c 'import sys, tinypkg; print(tinypkg.__version__, sys.prefix == __import__(\"os\").environ[\"VIRTUAL_ENV\"])'",
    )
    .text_output()
    .output("{environment}.txt")
    .matrix("environment", ["old", "new"])
    .set("measure", "sample-interval", "off")
    .text();
    let text = format!(
        "{text}[environments.old]\nrequirements = [\"tinypkg==1.0\"]\nfind-links = [\"wheels\"]\nno-index = true\n\
         [environments.new]\nrequirements = [\"tinypkg==2.0\"]\nfind-links = [\"wheels\"]\nno-index = true\n"
    );
    crate::support::write_manifest(dir, &text)
}

/// `hwr-exp ARGS` in `dir` with hwr-exp's and uv's caches inside `dir`.
fn hwr_env(dir: &Path, args: &[&str]) -> Output {
    hwr_command(dir)
        .env("HWR_EXP_CACHE", dir.join("cache"))
        .env("UV_CACHE_DIR", dir.join("uv-cache"))
        .env("UV_PYTHON_DOWNLOADS", "never")
        .args(args)
        .output()
        .unwrap()
}

fn run(dir: &Path) -> (Output, PathBuf) {
    let out = hwr_env(
        dir,
        &["run", "experiment.toml", "--quiet", "--results-dir", "results"],
    );
    let bundle = stdout(&out)
        .lines()
        .last()
        .map(|p| dir.join(p))
        .unwrap_or_default();
    (out, bundle)
}

fn output_of(bundle: &Path, env: &str) -> String {
    let rec = run_records(bundle)
        .into_iter()
        .find(|r| r["cell"]["environment"] == env)
        .expect("run of that environment");
    std::fs::read_to_string(
        bundle
            .join("runs")
            .join(rec["run-id"].as_str().unwrap())
            .join(format!("{env}.txt")),
    )
    .unwrap()
}

#[test]
fn two_environments_from_a_local_wheel_folder() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_wheels(d, &["1.0", "2.0"]);
    manifest(d);

    let (out, first) = run(d);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(output_of(&first, "old").trim(), "1.0 True");
    assert_eq!(output_of(&first, "new").trim(), "2.0 True");
    for (env, version) in [("old", "1.0"), ("new", "2.0")] {
        let folder = first.join("environments").join(env);
        let lock = std::fs::read_to_string(folder.join("lock.txt")).unwrap();
        assert!(lock.contains(&format!("tinypkg=={version}")), "{lock}");
        assert!(lock.contains("--hash=sha256:"), "hashes in the lock: {lock}");
        let freeze = std::fs::read_to_string(folder.join("freeze.txt")).unwrap();
        assert!(freeze.contains(&format!("tinypkg=={version}")), "{freeze}");
        let python = std::fs::read_to_string(folder.join("python.txt")).unwrap();
        assert!(python.starts_with("3."), "{python}");
        let rec = run_records(&first)
            .into_iter()
            .find(|r| r["cell"]["environment"] == env)
            .unwrap();
        assert_eq!(rec["environment"]["name"], env);
        assert_eq!(rec["environment"]["lock-sha256"], sha256_hex(lock.as_bytes()));
        let info = json(&first.join("bundle.json"));
        assert_eq!(info["environments"][env]["reused"], false, "{info}");
        assert!(info["environments"][env]["exclude-newer"].is_string(), "{info}");
    }

    // A second run reuses both venvs: nothing is built again.
    let venv = PathBuf::from(
        json(&first.join("bundle.json"))["environments"]["old"]["venv"]
            .as_str()
            .unwrap(),
    );
    let marker = venv.join(".hwr-exp-complete");
    let built_at = std::fs::metadata(&marker).unwrap().modified().unwrap();
    let out = hwr_env(d, &["run", "experiment.toml", "--results-dir", "results"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("environment old: reusing"),
        "{}",
        stderr(&out)
    );
    let second = d.join(stdout(&out).lines().last().unwrap());
    let info = json(&second.join("bundle.json"));
    assert_eq!(info["environments"]["old"]["reused"], true, "{info}");
    assert_eq!(info["environments"]["new"]["reused"], true, "{info}");
    assert_eq!(std::fs::metadata(&marker).unwrap().modified().unwrap(), built_at);
    assert_eq!(output_of(&second, "old").trim(), "1.0 True");

    // A rerun resolves the same versions, with the recorded exclude-newer time.
    let out = hwr_env(d, &["rerun", first.to_str().unwrap(), "--quiet"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let rerun = d.join(stdout(&out).lines().last().unwrap());
    let info_rerun = json(&rerun.join("bundle.json"));
    let info_first = json(&first.join("bundle.json"));
    for env in ["old", "new"] {
        assert_eq!(
            info_rerun["environments"][env]["lock-sha256"],
            info_first["environments"][env]["lock-sha256"]
        );
        assert_eq!(
            info_rerun["environments"][env]["exclude-newer"],
            info_first["environments"][env]["exclude-newer"]
        );
    }
    assert_eq!(output_of(&rerun, "new").trim(), "2.0 True");

    // The cached venv changed by hand: its freeze no longer matches the lock, so preflight refuses.
    let changed = Command::new("uv")
        .env("UV_CACHE_DIR", d.join("uv-cache"))
        .args(["pip", "install", "--quiet", "--no-index", "--find-links"])
        .arg(d.join("wheels"))
        .arg("--python")
        .arg(venv.join("bin").join("python"))
        .arg("tinypkg==2.0")
        .status()
        .unwrap();
    assert!(changed.success());
    let (out, _) = run(d);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("does not match its lock"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("tinypkg 1.0 locked, 2.0 installed"),
        "{}",
        stderr(&out)
    );
}

/// Issue 36 item 4: `--where environment=NAME` builds only that environment. The wheel folder
/// has no tinypkg 2.0, so building `new` would fail the preflight (as a full run still does).
#[test]
fn where_on_the_environment_axis_builds_only_the_selected_environment() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_wheels(d, &["1.0"]);
    manifest(d);
    let out = hwr_env(
        d,
        &[
            "run",
            "experiment.toml",
            "--quiet",
            "--results-dir",
            "results",
            "--where",
            "environment=old",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = d.join(stdout(&out).lines().last().unwrap());
    assert_eq!(output_of(&bundle, "old").trim(), "1.0 True");
    let built: Vec<String> = std::fs::read_dir(bundle.join("environments"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(built, ["old"]);
    // Without --where both are built, and `new` cannot be.
    let (out, _) = run(d);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("environment `new`"), "{}", stderr(&out));
}

#[test]
fn without_uv_the_error_says_pip_install_uv() {
    let dir = tempfile::tempdir().unwrap();
    manifest(dir.path());
    let out = hwr_command(dir.path())
        .env("PATH", "/nonexistent")
        .env("HWR_EXP_CACHE", dir.path().join("cache"))
        .args(["run", "experiment.toml", "--quiet", "--results-dir", "results"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("pip install uv"), "{}", stderr(&out));
    assert!(!dir.path().join("results").exists());
}

#[test]
fn an_environment_value_must_name_an_environment() {
    let dir = tempfile::tempdir().unwrap();
    let text = ManifestBuilder::shell("envs", "true")
        .text_output()
        .matrix("environment", ["old", "typo"])
        .text()
        + "[environments.old]\nrequirements = [\"tinypkg==1.0\"]\n";
    let m = crate::support::write_manifest(dir.path(), &text);
    let out = crate::support::hwr(dir.path(), &["check", m.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("environment = typo names no [environments.typo]"),
        "{}",
        stderr(&out)
    );
}

/// The minor version (`3.X`) of the interpreter at `path`, if it runs.
fn minor_version(path: &Path) -> Option<String> {
    let out = Command::new(path)
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Two interpreters of different minor versions on this machine: what `uv python find 3.X` finds
/// (no downloads) and pyenv's versions folder.
fn two_pythons() -> Option<[(String, PathBuf); 2]> {
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    let mut candidates: Vec<PathBuf> = Vec::new();
    for minor in 8..=14 {
        let out = Command::new("uv")
            .env("UV_PYTHON_DOWNLOADS", "never")
            .args(["python", "find", &format!("3.{minor}")])
            .output();
        if let Some(out) = out.ok().filter(|o| o.status.success()) {
            candidates.push(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
        }
    }
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")));
    if let Some(Ok(dir)) = pyenv.map(|p| std::fs::read_dir(p.join("versions"))) {
        candidates.extend(dir.flatten().map(|e| e.path().join("bin").join("python3")));
    }
    for path in candidates {
        if let Some(v) = minor_version(&path)
            && v.starts_with("3.")
            && v != "3.6"
            && v != "3.7"
            && !found.iter().any(|(w, _)| *w == v)
        {
            found.push((v, path));
        }
    }
    let mut it = found.into_iter();
    Some([it.next()?, it.next()?])
}

/// Issue 37 item 1: two environments that differ only in `python` (same requirements, same lock)
/// get two venvs, and each run runs the interpreter its environment names (before, both shared the
/// venv keyed by the lock's sha256 alone, so the second ran the first's Python without a word).
#[test]
fn environments_that_differ_only_in_python_get_their_own_venvs() {
    if !ready() {
        return;
    }
    let Some([(va, pa), (vb, pb)]) = two_pythons() else {
        assert!(
            std::env::var("HWR_REQUIRE_UV").as_deref() != Ok("1"),
            "HWR_REQUIRE_UV=1 but this machine has no two Python versions"
        );
        eprintln!("skipping: fewer than two Python versions here");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_wheels(d, &["1.0"]);
    // `python = "3.X"` finds these first on PATH.
    let bin = d.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(&pa, bin.join(format!("python{va}"))).unwrap();
    std::os::unix::fs::symlink(&pb, bin.join(format!("python{vb}"))).unwrap();
    let text = ManifestBuilder::shell(
        "pythons",
        "python -c 'import sys, tinypkg; print(\"%d.%d\" % sys.version_info[:2], tinypkg.__version__)'",
    )
    .text_output()
    .output("{environment}.txt")
    .matrix("environment", ["a", "b"])
    .set("measure", "sample-interval", "off")
    .text();
    let env = |name: &str, v: &str| {
        format!(
            "[environments.{name}]\nrequirements = [\"tinypkg==1.0\"]\npython = \"{v}\"\n\
             find-links = [\"wheels\"]\nno-index = true\n"
        )
    };
    crate::support::write_manifest(d, &format!("{text}{}{}", env("a", &va), env("b", &vb)));
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = hwr_command(d)
        .env("PATH", path)
        .env("HWR_EXP_CACHE", d.join("cache"))
        .env("UV_CACHE_DIR", d.join("uv-cache"))
        .env("UV_PYTHON_DOWNLOADS", "never")
        .args(["run", "experiment.toml", "--quiet", "--results-dir", "results"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let bundle = d.join(stdout(&out).lines().last().unwrap());
    assert_eq!(output_of(&bundle, "a").trim(), format!("{va} 1.0"));
    assert_eq!(output_of(&bundle, "b").trim(), format!("{vb} 1.0"));
    let info = json(&bundle.join("bundle.json"));
    let envs = &info["environments"];
    // One lock, two venvs, each keyed by its interpreter.
    assert_eq!(envs["a"]["lock-sha256"], envs["b"]["lock-sha256"], "{info}");
    assert_ne!(envs["a"]["venv"], envs["b"]["venv"], "{info}");
    assert_ne!(envs["a"]["venv-key"], envs["b"]["venv-key"], "{info}");
    for (name, v) in [("a", &va), ("b", &vb)] {
        let python =
            std::fs::read_to_string(bundle.join("environments").join(name).join("python.txt")).unwrap();
        assert!(python.starts_with(&format!("{v}.")), "{name}: {python}");
        let venv = PathBuf::from(envs[name]["venv"].as_str().unwrap());
        let key = std::fs::read_to_string(venv.join(".hwr-exp-key")).unwrap();
        assert!(key.contains(&format!("version: {v}.")), "{key}");
        assert!(
            key.contains("find-links: ") && key.contains("no-index: true"),
            "{key}"
        );
        assert_eq!(
            sha256_hex(key.as_bytes()),
            envs[name]["venv-key"].as_str().unwrap()
        );
        assert!(envs[name]["interpreter"].is_string(), "{info}");
    }
}
