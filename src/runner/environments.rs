//! Building the `[environments]` of a manifest with uv, in the preflight (never in a run's timed
//! window; DESIGN 3 and 5):
//!
//! 1. resolve: `uv pip compile --generate-hashes --no-header --exclude-newer <time>` of the
//!    requirements (with `--python`, `--find-links`, `--no-index` as given), tried `--offline`
//!    first (uv's cache) and online only when that fails. The time is the session's start, or the
//!    time an archived bundle recorded (`rerun`), so a rerun resolves the same versions even after
//!    newer releases. `resume` takes the bundle's lock.txt as it is.
//! 2. install: one venv per key, `<cache>/venvs/<key>` ([`super::cache_dir`]), where the key is
//!    the sha256 of everything that makes the venv ([`VenvKey`]): the interpreter (`uv python
//!    find` of `python`, then the interpreter's own version, implementation, real executable path
//!    and platform), this machine's OS and architecture, the lock's sha256 and the index settings
//!    (`find-links`, `no-index` and uv's index variables). Made with `uv venv --python <that
//!    interpreter>` and filled with `uv pip sync` (offline first), then marked complete. A complete
//!    venv is reused by every run, rerun and resume with the same key; a folder without the mark (a
//!    build that was killed) is built again. A lock file (`flock`) keeps two runners from building
//!    the same venv at once. Two environments that differ only in `python` get two venvs.
//! 3. check: `uv pip freeze` of the venv must list exactly the lock's `name==version` pins;
//!    otherwise the preflight refuses (a venv changed by hand since it was built).
//!
//! The bundle keeps, per environment, `environments/<name>/lock.txt`, `freeze.txt` and
//! `python.txt` (the interpreter's `sys.version` and path).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::manifest::{EnvironmentSpec, Manifest};
use crate::plan::RunEnvironment;

/// One built environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    /// `[environments.<name>]`.
    pub name: String,
    /// lock.txt: `uv pip compile` output.
    pub lock: String,
    /// sha256 (hex) of `lock`.
    pub lock_sha256: String,
    /// The `--exclude-newer` time the lock was resolved with (RFC 3339), `None` for a lock taken
    /// from a bundle as it is.
    pub exclude_newer: Option<String>,
    /// The venv folder.
    pub venv: PathBuf,
    /// freeze.txt: `uv pip freeze` of the venv.
    pub freeze: String,
    /// python.txt: the interpreter's version and path.
    pub python: String,
    /// The venv's cache key: sha256 (hex) of [`VenvKey::text`].
    pub key: String,
    /// The interpreter the venv was made from ([`Interpreter::executable`]).
    pub interpreter: String,
    /// Whether the venv was already built (nothing installed this time).
    pub reused: bool,
}

impl Built {
    /// What the plan needs of it.
    pub fn run_environment(&self) -> RunEnvironment {
        RunEnvironment {
            name: self.name.clone(),
            lock_sha256: Some(self.lock_sha256.clone()),
            venv: Some(self.venv.clone()),
        }
    }
}

/// The plan context's map of built environments.
pub fn context_map(built: &[Built]) -> BTreeMap<String, RunEnvironment> {
    built
        .iter()
        .map(|b| (b.name.clone(), b.run_environment()))
        .collect()
}

/// How the locks are made.
#[derive(Debug, Clone)]
pub enum Locks {
    /// Resolve with `--exclude-newer` this time (RFC 3339 UTC).
    Resolve(String),
    /// Use these lock texts by environment name (`resume`); an environment without one is
    /// resolved with the time given.
    Given(BTreeMap<String, String>, String),
}

/// Builds every environment of `manifest` (none: nothing to do), saying what it does on stderr
/// unless `quiet`.
///
/// # Errors
/// One message per environment that could not be built or whose venv does not match its lock;
/// uv missing from PATH is one message saying `pip install uv`.
pub fn build_all(manifest: &Manifest, locks: &Locks, quiet: bool) -> Result<Vec<Built>, Vec<String>> {
    if manifest.environments.is_empty() {
        return Ok(Vec::new());
    }
    let uv = find_uv().map_err(|e| vec![e])?;
    let Some(cache) = super::cache_dir() else {
        return Err(vec![format!(
            "no cache folder for the Python environments: set {} (or XDG_CACHE_HOME or HOME)",
            super::CACHE_VAR
        )]);
    };
    let mut built = Vec::new();
    let mut problems = Vec::new();
    let used = used_environments(manifest);
    for (name, spec) in manifest.environments.iter().filter(|(n, _)| used.contains(n)) {
        let (given, time) = match locks {
            Locks::Resolve(t) => (None, t.clone()),
            Locks::Given(map, t) => (map.get(name).cloned(), t.clone()),
        };
        match build_one(&uv, &cache, name, spec, given, &time, quiet) {
            Ok(b) => built.push(b),
            Err(e) => problems.push(format!("environment `{name}`: {e}")),
        }
    }
    if problems.is_empty() {
        Ok(built)
    } else {
        Err(problems)
    }
}

/// The environments some cell of `manifest` runs in: the values of its `environment` axis that
/// no `exclude` entry drops whole (`run --where environment=NAME` excludes the others, so they
/// are not built), and those of its `include` cells.
fn used_environments(manifest: &Manifest) -> std::collections::BTreeSet<String> {
    let key = crate::manifest::ENVIRONMENT_KEY;
    let matrix = &manifest.matrix;
    // An entry drops every cell of environment `v` when each of its keys is `v` (the
    // environment) or the one value of a single-valued axis.
    let dropped = |v: &crate::manifest::Value| {
        matrix.exclude.iter().any(|e| {
            e.iter().all(|(k, ev)| {
                if k == key {
                    ev.same_cell(v)
                } else {
                    matrix
                        .axes
                        .iter()
                        .find(|(a, _)| a == k)
                        .is_some_and(|(_, vs)| vs.len() == 1 && vs[0].same_cell(ev))
                }
            })
        })
    };
    matrix
        .axes
        .iter()
        .filter(|(k, _)| k == key)
        .flat_map(|(_, values)| values.iter())
        .filter(|v| !dropped(v))
        .chain(matrix.include.iter().filter_map(|c| c.get(key)))
        .map(ToString::to_string)
        .collect()
}

fn say(quiet: bool, text: std::fmt::Arguments<'_>) {
    if !quiet {
        eprintln!("{text}");
    }
}

/// `uv` on PATH.
fn find_uv() -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("uv"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "uv is not on PATH; [environments] are built with uv: `pip install uv` (or see https://docs.astral.sh/uv/)".to_string()
        })
}

/// Runs `cmd`, returning stdout, or stderr's last lines in the error.
fn output(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{what}: cannot run: {e}"))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = tail[tail.len().saturating_sub(6)..].join("\n    ");
    Err(format!("{what} failed ({}):\n    {tail}", out.status))
}

fn uv_command(uv: &Path) -> Command {
    let mut cmd = Command::new(uv);
    // uv's own progress bars would go to our stderr; its errors are kept.
    cmd.env("UV_NO_PROGRESS", "1").env_remove("VIRTUAL_ENV");
    cmd
}

fn index_args(cmd: &mut Command, spec: &EnvironmentSpec) {
    for link in &spec.find_links {
        cmd.arg("--find-links").arg(link);
    }
    if spec.no_index {
        cmd.arg("--no-index");
    }
}

/// Runs the command made by `make` with `--offline` first, then without.
fn offline_first(make: impl Fn() -> Command, what: &str) -> Result<String, String> {
    let mut offline = make();
    offline.arg("--offline");
    match output(&mut offline, what) {
        Ok(out) => Ok(out),
        Err(_) => output(&mut make(), what),
    }
}

/// The interpreter a venv is made from, as it describes itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Interpreter {
    /// `sys.executable`: what `uv venv --python` and `uv pip compile --python` are given.
    pub executable: String,
    /// `os.path.realpath(sys.executable)`: two paths of one interpreter (a symlink) are one.
    pub real: String,
    /// `sys.version`, newlines made spaces.
    pub version: String,
    /// `sys.implementation.name` (`cpython`, `pypy`, ...).
    pub implementation: String,
    /// `sysconfig.get_platform()` (`linux-x86_64`, ...).
    pub platform: String,
}

const DESCRIBE: &str = "import json, os, sys, sysconfig; print(json.dumps({'executable': sys.executable, \
    'real': os.path.realpath(sys.executable), 'version': ' '.join(sys.version.split()), \
    'implementation': sys.implementation.name, 'platform': sysconfig.get_platform()}))";

/// The environment variables through which uv takes index settings: part of the key.
const INDEX_VARS: [&str; 7] = [
    "UV_INDEX",
    "UV_DEFAULT_INDEX",
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "UV_NO_INDEX",
    "UV_INDEX_STRATEGY",
];

/// Finds the interpreter `python` names (uv's default without one) with `uv python find`, as `uv
/// venv` would; when uv finds none and `python` is given, `uv python install` is tried once (it
/// fails when `UV_PYTHON_DOWNLOADS=never`), then the interpreter is asked what it is.
///
/// # Errors
/// No such interpreter (uv's message), or an interpreter that cannot describe itself.
pub fn find_interpreter(uv: &Path, python: Option<&str>) -> Result<Interpreter, String> {
    let find = || {
        let mut cmd = uv_command(uv);
        cmd.args(["python", "find"]).args(python);
        output(&mut cmd, "uv python find")
    };
    let found = match (find(), python) {
        (Ok(found), _) => found,
        (Err(e), None) => return Err(e),
        (Err(e), Some(p)) => {
            let mut install = uv_command(uv);
            install.args(["python", "install", "--quiet", p]);
            if output(&mut install, "uv python install").is_err() {
                return Err(e);
            }
            find()?
        }
    };
    let path = found.trim();
    let text = output(Command::new(path).args(["-c", DESCRIBE]), path)?;
    serde_json::from_str(text.trim())
        .map_err(|e| format!("{path} did not describe itself ({e}): {}", text.trim()))
}

/// Everything that makes a cached venv; two environments share a venv only when all of it is
/// equal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VenvKey<'a> {
    /// The interpreter the venv is made from.
    pub interpreter: &'a Interpreter,
    /// sha256 (hex) of the lock installed into it.
    pub lock_sha256: &'a str,
    /// `find-links`, in the manifest's order.
    pub find_links: &'a [String],
    /// `no-index`.
    pub no_index: bool,
    /// uv's index variables (`INDEX_VARS`: `UV_INDEX_URL`, `UV_DEFAULT_INDEX` and the rest) that are set, with their values.
    pub index_vars: Vec<(&'static str, String)>,
}

impl<'a> VenvKey<'a> {
    /// The key of `spec` built from `interpreter` with the lock `lock_sha256`, index variables
    /// read from this process's environment.
    pub fn new(interpreter: &'a Interpreter, lock_sha256: &'a str, spec: &'a EnvironmentSpec) -> Self {
        let index_vars = INDEX_VARS
            .iter()
            .filter_map(|v| Some((*v, std::env::var(v).ok()?)))
            .collect();
        VenvKey {
            interpreter,
            lock_sha256,
            find_links: &spec.find_links,
            no_index: spec.no_index,
            index_vars,
        }
    }

    /// The key's parts, one `name: value` a line (written to the venv's `.hwr-exp-key`).
    pub fn text(&self) -> String {
        let i = self.interpreter;
        let mut out = format!(
            "hwr-exp venv key 1\ninterpreter: {}\nversion: {}\nimplementation: {}\n\
             interpreter-platform: {}\nhost: {} {}\nlock-sha256: {}\nno-index: {}\n",
            i.real,
            i.version,
            i.implementation,
            i.platform,
            std::env::consts::OS,
            std::env::consts::ARCH,
            self.lock_sha256,
            self.no_index
        );
        for link in self.find_links {
            out.push_str(&format!("find-links: {link}\n"));
        }
        for (var, value) in &self.index_vars {
            out.push_str(&format!("env {var}: {value}\n"));
        }
        out
    }

    /// The venv folder's name: sha256 (hex) of [`Self::text`].
    pub fn digest(&self) -> String {
        crate::digest::sha256_bytes(self.text().as_bytes())
    }
}

fn build_one(
    uv: &Path,
    cache: &Path,
    name: &str,
    spec: &EnvironmentSpec,
    given: Option<String>,
    time: &str,
    quiet: bool,
) -> Result<Built, String> {
    let tmp = tempfile::Builder::new()
        .prefix("hwr-exp-env-")
        .tempdir()
        .map_err(|e| format!("cannot create a temporary folder: {e}"))?;
    let interpreter = find_interpreter(uv, spec.python.as_deref())?;
    let (lock, exclude_newer) = match given {
        Some(lock) => (lock, None),
        None => {
            say(
                quiet,
                format_args!("environment {name}: resolving with uv pip compile (exclude-newer {time})"),
            );
            let input = tmp.path().join("requirements.in");
            std::fs::write(&input, spec.requirements.join("\n") + "\n")
                .map_err(|e| format!("{}: {e}", input.display()))?;
            let lock = offline_first(
                || {
                    let mut cmd = uv_command(uv);
                    // Run in the temporary folder with a relative input and no annotations, so
                    // that the lock holds no temporary path: the same resolution, the same lock.
                    cmd.current_dir(tmp.path())
                        .args([
                            "pip",
                            "compile",
                            "--quiet",
                            "--generate-hashes",
                            "--no-header",
                            "--no-annotate",
                        ])
                        .arg("--exclude-newer")
                        .arg(time)
                        .arg("requirements.in")
                        .arg("--python")
                        .arg(&interpreter.executable);
                    index_args(&mut cmd, spec);
                    cmd
                },
                "uv pip compile",
            )?;
            (lock, Some(time.to_string()))
        }
    };
    let lock_sha256 = crate::digest::sha256_bytes(lock.as_bytes());
    let venvs = cache.join("venvs");
    std::fs::create_dir_all(&venvs).map_err(|e| format!("{}: {e}", venvs.display()))?;
    let venv_key = VenvKey::new(&interpreter, &lock_sha256, spec);
    let key = venv_key.digest();
    let venv = venvs.join(&key);
    let complete = venv.join(".hwr-exp-complete");
    let guard = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(venvs.join(format!("{key}.lock")))
        .map_err(|e| format!("{}: {e}", venvs.display()))?;
    rustix::fs::flock(&guard, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| format!("locking {}: {e}", venv.display()))?;
    let reused = complete.is_file();
    if reused {
        say(
            quiet,
            format_args!("environment {name}: reusing {}", venv.display()),
        );
    } else {
        say(
            quiet,
            format_args!(
                "environment {name}: building {} (uv venv, uv pip sync)",
                venv.display()
            ),
        );
        if venv.exists() {
            std::fs::remove_dir_all(&venv)
                .map_err(|e| format!("removing the unfinished {}: {e}", venv.display()))?;
        }
        let mut cmd = uv_command(uv);
        cmd.args(["venv", "--quiet"])
            .arg(&venv)
            .arg("--python")
            .arg(&interpreter.executable);
        output(&mut cmd, "uv venv")?;
        let key_file = venv.join(".hwr-exp-key");
        std::fs::write(&key_file, venv_key.text()).map_err(|e| format!("{}: {e}", key_file.display()))?;
        let lock_file = tmp.path().join("lock.txt");
        std::fs::write(&lock_file, &lock).map_err(|e| format!("{}: {e}", lock_file.display()))?;
        let python = venv.join("bin").join("python");
        offline_first(
            || {
                let mut cmd = uv_command(uv);
                cmd.args(["pip", "sync", "--quiet", "--require-hashes"])
                    .arg("--python")
                    .arg(&python)
                    .arg(&lock_file);
                index_args(&mut cmd, spec);
                cmd
            },
            "uv pip sync",
        )?;
        std::fs::write(&complete, format!("{key}\n")).map_err(|e| format!("{}: {e}", complete.display()))?;
    }
    let python = venv.join("bin").join("python");
    let freeze = output(
        uv_command(uv).args(["pip", "freeze", "--python"]).arg(&python),
        "uv pip freeze",
    )?;
    let version = output(
        Command::new(&python).args(["-c", "import sys; print(sys.version); print(sys.executable)"]),
        "python --version",
    )?;
    drop(guard);
    let problems = mismatch(&lock, &freeze);
    if !problems.is_empty() {
        return Err(format!(
            "the venv {} does not match its lock ({}); remove the folder to rebuild it",
            venv.display(),
            problems.join(", ")
        ));
    }
    Ok(Built {
        name: name.to_string(),
        lock,
        lock_sha256,
        exclude_newer,
        venv,
        freeze,
        python: version,
        key,
        interpreter: interpreter.executable,
        reused,
    })
}

/// `name==version` pins of a lock or a freeze, names normalized (PEP 503: lowercase, runs of
/// `-_.` as `-`).
pub fn pins(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with([' ', '\t', '#']) || line.trim().is_empty() {
            continue;
        }
        let line = line.trim_end_matches('\\').trim();
        let line = line.split(';').next().unwrap_or(line).trim();
        if let Some((name, version)) = line.split_once("==") {
            out.insert(normalize(name), version.trim().to_string());
        }
    }
    out
}

fn normalize(name: &str) -> String {
    let mut out = String::new();
    let mut sep = false;
    for c in name.trim().chars() {
        if matches!(c, '-' | '_' | '.') {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// How the freeze differs from the lock, one entry per package; empty when they agree.
pub fn mismatch(lock: &str, freeze: &str) -> Vec<String> {
    let (a, b) = (pins(lock), pins(freeze));
    let mut out = Vec::new();
    for (name, v) in &a {
        match b.get(name) {
            Some(w) if w == v => {}
            Some(w) => out.push(format!("{name} {v} locked, {w} installed")),
            None => out.push(format!("{name} {v} locked, not installed")),
        }
    }
    for (name, w) in &b {
        if !a.contains_key(name) {
            out.push(format!("{name} {w} installed, not locked"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_and_freeze_pins_are_compared_by_normalized_name() {
        let lock = "tiny-pkg==1.0 \\\n    --hash=sha256:ab\nnumpy==2.0.1 ; python_version >= '3.9' \\\n    --hash=sha256:cd\n";
        let freeze = "Tiny_Pkg==1.0\nnumpy==2.0.1\n";
        assert!(mismatch(lock, freeze).is_empty());
        let freeze = "tiny.pkg==2.0\nextra==1\n";
        assert_eq!(
            mismatch(lock, freeze),
            [
                "numpy 2.0.1 locked, not installed",
                "tiny-pkg 1.0 locked, 2.0 installed",
                "extra 1 installed, not locked"
            ]
        );
    }

    fn interpreter(version: &str, real: &str) -> Interpreter {
        Interpreter {
            executable: real.to_string(),
            real: real.to_string(),
            version: version.to_string(),
            implementation: "cpython".into(),
            platform: "linux-x86_64".into(),
        }
    }

    fn digest(
        interpreter: &Interpreter,
        lock_sha256: &str,
        find_links: &[String],
        no_index: bool,
        index_vars: Vec<(&'static str, String)>,
    ) -> String {
        VenvKey {
            interpreter,
            lock_sha256,
            find_links,
            no_index,
            index_vars,
        }
        .digest()
    }

    /// Every part of the key changes the key: interpreter (version, path), lock, index settings.
    #[test]
    fn the_venv_key_changes_with_everything_that_makes_the_venv() {
        let py310 = interpreter("3.10.13", "/opt/py310/bin/python3.10");
        let py312 = interpreter("3.12.1", "/opt/py312/bin/python3.12");
        let other_path = interpreter("3.10.13", "/usr/bin/python3.10");
        let links = ["/w/wheels".to_string()];
        let other_links = ["/w/other".to_string()];
        let base = digest(&py310, "ab", &links, true, vec![]);
        assert_eq!(base, digest(&py310, "ab", &links, true, vec![]));
        let mirror = vec![("UV_INDEX_URL", "https://mirror/simple".to_string())];
        let variants = [
            digest(&py312, "ab", &links, true, vec![]),
            digest(&other_path, "ab", &links, true, vec![]),
            digest(&py310, "cd", &links, true, vec![]),
            digest(&py310, "ab", &other_links, true, vec![]),
            digest(&py310, "ab", &links, false, vec![]),
            digest(&py310, "ab", &links, true, mirror),
        ];
        for (n, v) in variants.iter().enumerate() {
            assert_ne!(&base, v, "variant {n}");
        }
    }
}
