//! Host facts for `host.json`: the machine and the runner's allocator-relevant environment.
//!
//! Every fact is best effort: a fact that cannot be read (a missing `/proc` file, an unreadable
//! `/etc/os-release`, a non-glibc target) is left out of the JSON (`None`), never an error or a panic.

use std::collections::BTreeMap;
use std::ffi::OsString;

use serde::{Deserialize, Serialize};

/// Format version of `host.json`.
pub const HOST_FORMAT: u32 = 1;

/// Facts about the machine and the runner, serialised as `host.json` (kebab-case keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct HostFacts {
    /// Format version of this document ([`HOST_FORMAT`]).
    pub format: u32,
    /// Host name (`gethostname`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Kernel identification from `uname(2)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<Kernel>,
    /// `PRETTY_NAME` from `/etc/os-release` (falling back to `/usr/lib/os-release`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    /// `model name` of the first processor in `/proc/cpuinfo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_model: Option<String>,
    /// Online logical CPUs of the machine (`sysconf(_SC_NPROCESSORS_ONLN)`), regardless of affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logical_cpus: Option<usize>,
    /// CPUs the runner may run on (CPU affinity from `sched_getaffinity`), ascending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_cpus: Option<Vec<usize>>,
    /// `MemTotal` from `/proc/meminfo`, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total_bytes: Option<u64>,
    /// glibc version from `gnu_get_libc_version()` (absent on non-glibc targets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glibc_version: Option<String>,
    /// The runner's allocator-relevant variables only: `MALLOC_*`, `LD_PRELOAD`, `PYTHONMALLOC`
    /// (see [`runner_env`]). Never the whole environment.
    pub env: BTreeMap<String, String>,
    /// Version of hwr-exp that collected these facts (`CARGO_PKG_VERSION`).
    pub hwr_exp_version: String,
}

/// Kernel identification from `uname(2)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Kernel {
    /// Kernel name, e.g. `Linux`.
    pub sysname: String,
    /// Kernel release, e.g. `6.1.0-18-amd64`.
    pub release: String,
    /// Kernel build version string, e.g. `#1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)`.
    pub version: String,
    /// Hardware architecture, e.g. `x86_64`.
    pub machine: String,
}

/// Collects host facts; a fact that cannot be read is `None`, never an error or a panic.
///
/// Sources: `gethostname`, `uname(2)`, `/etc/os-release`, `/proc/cpuinfo`, `sysconf`,
/// `sched_getaffinity`, `/proc/meminfo`, `gnu_get_libc_version`, and the process environment
/// filtered by [`runner_env`].
pub fn collect() -> HostFacts {
    HostFacts {
        format: HOST_FORMAT,
        hostname: hostname(),
        kernel: Some(kernel()),
        os: os_pretty_name(),
        cpu_model: cpu_model(),
        logical_cpus: logical_cpus(),
        allowed_cpus: crate::exec::affinity::allowed_cpus()
            .ok()
            .filter(|c| !c.is_empty()),
        memory_total_bytes: memory_total_bytes(),
        glibc_version: glibc_version(),
        env: runner_env(std::env::vars_os()),
        hwr_exp_version: env!("CARGO_PKG_VERSION").to_owned(),
    }
}

/// Picks the allocator-relevant variables out of an environment: names starting with `MALLOC_`,
/// and exactly `LD_PRELOAD` and `PYTHONMALLOC`. Everything else (tokens, credentials, paths) is
/// dropped. Non-UTF-8 names are skipped; non-UTF-8 values are converted lossily.
pub fn runner_env<I>(vars: I) -> BTreeMap<String, String>
where
    I: IntoIterator<Item = (OsString, OsString)>,
{
    vars.into_iter()
        .filter_map(|(name, value)| {
            let name = name.into_string().ok()?;
            let keep = name.starts_with("MALLOC_") || name == "LD_PRELOAD" || name == "PYTHONMALLOC";
            keep.then(|| (name, value.to_string_lossy().into_owned()))
        })
        .collect()
}

fn hostname() -> Option<String> {
    let name = hostname::get().ok()?;
    let name = name.to_string_lossy().trim().to_owned();
    (!name.is_empty()).then_some(name)
}

fn kernel() -> Kernel {
    let u = rustix::system::uname();
    let s = |c: &std::ffi::CStr| c.to_string_lossy().into_owned();
    Kernel {
        sysname: s(u.sysname()),
        release: s(u.release()),
        version: s(u.version()),
        machine: s(u.machine()),
    }
}

fn os_pretty_name() -> Option<String> {
    ["/etc/os-release", "/usr/lib/os-release"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .and_then(|text| parse_os_release_pretty_name(&text))
}

/// Extracts `PRETTY_NAME` from os-release text (shell-style `KEY=value`, value optionally quoted).
fn parse_os_release_pretty_name(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let value = line.trim().strip_prefix("PRETTY_NAME=")?;
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        let value = value.replace("\\\"", "\"").replace("\\\\", "\\");
        (!value.is_empty()).then_some(value)
    })
}

fn cpu_model() -> Option<String> {
    use procfs::Current;
    let info = procfs::CpuInfo::current().ok()?;
    // x86 has `model name`; some arm64 kernels only give `Model`/`Hardware` in the global section.
    info.model_name(0)
        .or_else(|| info.get_field(0, "Model"))
        .or_else(|| info.fields.get("Model").map(String::as_str))
        .or_else(|| info.fields.get("Hardware").map(String::as_str))
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn logical_cpus() -> Option<usize> {
    // SAFETY: sysconf has no preconditions; it returns -1 on error.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|&n| n > 0)
}

fn memory_total_bytes() -> Option<u64> {
    use procfs::Current;
    procfs::Meminfo::current()
        .ok()
        .map(|m| m.mem_total)
        .filter(|&b| b > 0)
}

/// The running glibc's version (`gnu_get_libc_version()`, e.g. `"2.39"`); `None` on other C
/// libraries.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn glibc_version() -> Option<String> {
    // SAFETY: gnu_get_libc_version returns a pointer to a static NUL-terminated string.
    let ptr = unsafe { libc::gnu_get_libc_version() };
    if ptr.is_null() {
        return None;
    }
    // SAFETY: non-null, static, NUL-terminated (glibc contract).
    let version = unsafe { std::ffi::CStr::from_ptr(ptr) };
    Some(version.to_string_lossy().into_owned())
}

/// The running glibc's version; always `None` when not built against glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn glibc_version() -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_name_parsing() {
        let text = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n";
        assert_eq!(
            parse_os_release_pretty_name(text).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(
            parse_os_release_pretty_name("PRETTY_NAME=Plain\n").as_deref(),
            Some("Plain")
        );
        assert_eq!(parse_os_release_pretty_name("ID=x\n"), None);
    }

    #[test]
    fn runner_env_keeps_only_allocator_variables() {
        let vars = [
            ("MALLOC_ARENA_MAX", "2"),
            ("LD_PRELOAD", "/usr/lib/libjemalloc.so.2"),
            ("PYTHONMALLOC", "malloc"),
            ("AWS_SECRET_ACCESS_KEY", "hunter2"),
            ("PATH", "/usr/bin"),
            ("LD_PRELOAD_EXTRA", "x"),
            ("MALLOC", "y"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = runner_env(vars);
        let keys: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(keys, ["LD_PRELOAD", "MALLOC_ARENA_MAX", "PYTHONMALLOC"]);
        assert_eq!(env["MALLOC_ARENA_MAX"], "2");
    }
}
