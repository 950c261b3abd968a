//! Optional tools and machine features a test needs, checked one way: [`need`] returns what was
//! found, or prints why the test is skipped and returns `None`; where skips are not allowed (CI)
//! a missing one fails the test instead.
//!
//! Skips are failures when `CI` is `true` or `1` (set by `.ci/run` and by CI services), or when
//! the requirement's own `HWR_REQUIRE_*` variable is `1` (`HWR_REQUIRE_CGROUP`,
//! `HWR_REQUIRE_CHROMIUM`, `HWR_REQUIRE_TMPFS`, `HWR_REQUIRE_SLURM`). A test uses it as
//!
//! ```ignore
//! let Some(chromium) = need(Chromium) else { return };
//! if need(Python(&["safetensors", "numpy"])).is_none() { return; }
//! ```
//!
//! A module with a requirement of its own (a tmpfs it mounts, a cluster setting) implements
//! [`Requirement`] for it, or passes a [`Check`].

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Something a test needs that a machine may lack.
pub trait Requirement {
    /// What a met requirement hands the test (a path, a client, a mount guard, `()`).
    type Found;
    /// What is needed, for messages: `chromium`, `python3 with safetensors, numpy`.
    fn what(&self) -> String;
    /// How to get it: `apt-get install -y chromium`.
    fn hint(&self) -> String;
    /// The `HWR_REQUIRE_*` variable that makes this requirement mandatory (besides `CI`).
    fn require_var(&self) -> Option<&'static str> {
        None
    }
    /// Looks for it: `Err(why)` when it is missing.
    fn find(self) -> Result<Self::Found, String>;
}

/// Why a skip is a failure here (`CI` is `true` or `1`, or `var` is `1`); `None` when it is not.
fn skips_fail(var: Option<&str>) -> Option<String> {
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        return Some("CI is set".into());
    }
    var.filter(|v| std::env::var(v).is_ok_and(|x| x == "1"))
        .map(|v| format!("{v}=1"))
}

/// What `r` gives the test, or `None` after printing on stderr why the test is skipped.
///
/// # Panics
/// When `r` is missing and skips are failures ([`skips_fail`]: `CI`, or `r`'s `HWR_REQUIRE_*`).
#[track_caller]
pub fn need<R: Requirement>(r: R) -> Option<R::Found> {
    let (what, hint, var) = (r.what(), r.hint(), r.require_var());
    let why = match r.find() {
        Ok(found) => return Some(found),
        Err(why) => why,
    };
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("this test");
    if let Some(strict) = skips_fail(var) {
        panic!("{test} needs {what}: {why} ({hint}); a skip is a failure where {strict}");
    }
    let var = var.map_or(String::new(), |v| format!(" or {v}=1"));
    eprintln!("skipped: {test} needs {what}: {why} ({hint}; CI=true{var} makes this a failure)");
    None
}

/// A requirement checked by a closure: `Check::new("a Slurm cluster with MaxArraySize >= 11",
/// "restart it with SLURM_EXTRA_CONF=MaxArraySize=11", || ...)`.
pub struct Check<T, F: FnOnce() -> Result<T, String>> {
    what: String,
    hint: String,
    var: Option<&'static str>,
    find: F,
}

impl<T, F: FnOnce() -> Result<T, String>> Check<T, F> {
    /// `what` is needed, `hint` says how to get it, `find` looks for it.
    pub fn new(what: impl Into<String>, hint: impl Into<String>, find: F) -> Self {
        Check {
            what: what.into(),
            hint: hint.into(),
            var: None,
            find,
        }
    }

    /// Also mandatory where `var=1`.
    pub fn required_by(mut self, var: &'static str) -> Self {
        self.var = Some(var);
        self
    }
}

impl<T, F: FnOnce() -> Result<T, String>> Requirement for Check<T, F> {
    type Found = T;
    fn what(&self) -> String {
        self.what.clone()
    }
    fn hint(&self) -> String {
        self.hint.clone()
    }
    fn require_var(&self) -> Option<&'static str> {
        self.var
    }
    fn find(self) -> Result<T, String> {
        (self.find)()
    }
}

/// The first executable file `name` on `PATH`.
pub fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// A program on `PATH` (`Program("groff")`); gives its path.
pub struct Program(pub &'static str);

impl Requirement for Program {
    type Found = PathBuf;
    fn what(&self) -> String {
        format!("`{}` on PATH", self.0)
    }
    fn hint(&self) -> String {
        match self.0 {
            "groff" => "apt-get install -y groff".into(),
            "cc" => "apt-get install -y gcc".into(),
            "script" => "apt-get install -y util-linux".into(),
            "python3" => "apt-get install -y python3".into(),
            "uv" => "python3 -m pip install uv".into(),
            other => format!("install {other}"),
        }
    }
    fn find(self) -> Result<PathBuf, String> {
        on_path(self.0).ok_or_else(|| "not found".into())
    }
}

/// `python3` that imports the modules listed (`Python(&["safetensors", "numpy"])`; none: only
/// python3 itself).
pub struct Python(pub &'static [&'static str]);

impl Requirement for Python {
    type Found = ();
    fn what(&self) -> String {
        if self.0.is_empty() {
            "python3".into()
        } else {
            format!("python3 with {}", self.0.join(", "))
        }
    }
    fn hint(&self) -> String {
        format!("python3 -m pip install {}", self.0.join(" "))
    }
    fn find(self) -> Result<(), String> {
        let script = if self.0.is_empty() {
            "pass".to_string()
        } else {
            format!("import {}", self.0.join(", "))
        };
        let out = Command::new("python3")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("python3 does not start: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "`python3 -c '{script}'` failed: {}",
                String::from_utf8_lossy(&out.stderr)
                    .trim()
                    .lines()
                    .last()
                    .unwrap_or("")
            ))
        }
    }
}

/// chromium (or chromium-browser) on `PATH`; gives its path. Mandatory with `HWR_REQUIRE_CHROMIUM=1`.
pub struct Chromium;

impl Requirement for Chromium {
    type Found = PathBuf;
    fn what(&self) -> String {
        "chromium".into()
    }
    fn hint(&self) -> String {
        "apt-get install -y chromium".into()
    }
    fn require_var(&self) -> Option<&'static str> {
        Some("HWR_REQUIRE_CHROMIUM")
    }
    fn find(self) -> Result<PathBuf, String> {
        on_path("chromium")
            .or_else(|| on_path("chromium-browser"))
            .ok_or_else(|| "neither chromium nor chromium-browser is on PATH".into())
    }
}

/// At least this many CPUs allowed to this process (`sched_getaffinity`).
pub struct Cpus(pub usize);

impl Requirement for Cpus {
    type Found = usize;
    fn what(&self) -> String {
        format!("{} allowed CPUs", self.0)
    }
    fn hint(&self) -> String {
        "run on a machine (or taskset) with more CPUs".into()
    }
    fn find(self) -> Result<usize, String> {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        if n >= self.0 {
            Ok(n)
        } else {
            Err(format!("{n} allowed"))
        }
    }
}

/// A shared library the dynamic loader finds by its file name (`SharedLib("libjemalloc.so.2")`),
/// from `ldconfig -p` or the usual library folders; gives its path.
pub struct SharedLib(pub &'static str);

impl Requirement for SharedLib {
    type Found = PathBuf;
    fn what(&self) -> String {
        self.0.to_string()
    }
    fn hint(&self) -> String {
        match self.0 {
            n if n.starts_with("libjemalloc") => "apt-get install -y libjemalloc2".into(),
            n if n.starts_with("libtcmalloc") => "apt-get install -y libtcmalloc-minimal4".into(),
            n if n.starts_with("libmimalloc") => "apt-get install -y libmimalloc2.0".into(),
            n => format!("install the package that ships {n}"),
        }
    }
    fn find(self) -> Result<PathBuf, String> {
        let listed = Command::new("ldconfig").arg("-p").output().ok().and_then(|o| {
            String::from_utf8_lossy(&o.stdout).lines().find_map(|l| {
                let (name, path) = l.trim().split_once(" => ")?;
                name.starts_with(&format!("{} ", self.0))
                    .then(|| PathBuf::from(path))
            })
        });
        listed
            .or_else(|| {
                [
                    "/usr/lib/x86_64-linux-gnu",
                    "/usr/lib/aarch64-linux-gnu",
                    "/usr/lib64",
                    "/usr/lib",
                    "/lib",
                ]
                .iter()
                .map(|d| Path::new(d).join(self.0))
                .find(|p| p.is_file())
            })
            .ok_or_else(|| "not known to ldconfig nor in the usual library folders".into())
    }
}

/// A requirement that is never met, for the tests below.
fn never() -> Check<(), impl FnOnce() -> Result<(), String>> {
    Check::new("a tool no machine has", "none: this is a test", || {
        Err("missing".to_string())
    })
}

/// Not a test by itself: the child half of `a_missing_tool_skips_here_and_fails_under_ci`.
#[test]
#[ignore = "child half of a_missing_tool_skips_here_and_fails_under_ci"]
fn missing_tool_child() {
    assert!(need(never()).is_none());
    assert!(need(never().required_by("HWR_REQUIRE_NOTHING")).is_none());
}

/// A missing tool skips the test with its reason where skips are allowed, and fails it under CI
/// (`CI=true` or `CI=1`) or with the requirement's own `HWR_REQUIRE_*=1`; a found one is handed
/// over.
#[test]
fn a_missing_tool_skips_here_and_fails_under_ci() {
    let child = |env: &[(&str, &str)]| {
        let mut cmd = super::rerun_this_test(module_path!(), "missing_tool_child");
        cmd.env_remove("CI").env_remove("HWR_REQUIRE_NOTHING");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("the test binary runs")
    };
    let out = child(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("skipped: support::need::missing_tool_child needs a tool no machine has: missing"),
        "{err}"
    );
    for env in [[("CI", "true")], [("CI", "1")], [("HWR_REQUIRE_NOTHING", "1")]] {
        let out = child(&env);
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{env:?}: {all}");
        assert!(all.contains("a skip is a failure where"), "{env:?}: {all}");
    }
    assert!(need(SharedLib("libc.so.6")).is_some_and(|p| p.is_file()));
    assert!(need(Program("sh")).is_some());
    assert!(need(Cpus(1)).is_some_and(|n| n >= 1));
}
