//! Memory allocators a run can be given with `[isolation] allocator` (DESIGN 3): `glibc` (nothing
//! preloaded), the libraries known by name (`jemalloc`, `tcmalloc`, `mimalloc`, found through the
//! dynamic linker's cache, `ldconfig -p`), or a path to a shared library. The run gets the library
//! in `LD_PRELOAD`; after its process starts, its `/proc/<pid>/maps` is read to see whether the
//! library was really loaded ([`look`]).
//!
//! Imports only [`crate::digest`].

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};

/// The name meaning "glibc's own malloc": nothing is preloaded and `LD_PRELOAD` is removed.
pub const GLIBC: &str = "glibc";

/// An allocator known by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    /// The name written in the manifest.
    pub name: &'static str,
    /// Library file names looked up in the linker cache, preferred first.
    pub sonames: &'static [&'static str],
    /// The Debian/Ubuntu package that provides the first soname.
    pub package: &'static str,
    /// File-name prefix of the library in `/proc/<pid>/maps`.
    pub prefix: &'static str,
}

/// Every allocator known by name (besides [`GLIBC`]).
pub const KNOWN: &[Known] = &[
    Known {
        name: "jemalloc",
        sonames: &["libjemalloc.so.2", "libjemalloc.so"],
        package: "libjemalloc2",
        prefix: "libjemalloc",
    },
    Known {
        name: "tcmalloc",
        sonames: &[
            "libtcmalloc_minimal.so.4",
            "libtcmalloc.so.4",
            "libtcmalloc_minimal.so",
            "libtcmalloc.so",
        ],
        package: "libtcmalloc-minimal4",
        prefix: "libtcmalloc",
    },
    Known {
        name: "mimalloc",
        sonames: &["libmimalloc.so.2", "libmimalloc.so"],
        package: "libmimalloc2.0",
        prefix: "libmimalloc",
    },
];

/// Every name `allocator` accepts besides a path, for messages.
pub const NAMES: &[&str] = &[GLIBC, "jemalloc", "tcmalloc", "mimalloc"];

/// The known allocator called `name`.
pub fn known(name: &str) -> Option<&'static Known> {
    KNOWN.iter().find(|k| k.name == name)
}

/// Whether an `allocator` value is a path (it holds a `/`) rather than a name.
pub fn is_path(value: &str) -> bool {
    value.contains('/')
}

/// The linker-cache architecture tag of this build (`ldconfig -p` writes `(libc6,x86-64)`).
fn arch_tag() -> Option<&'static str> {
    match std::env::consts::ARCH {
        "x86_64" => Some("x86-64"),
        "aarch64" => Some("AArch64"),
        "riscv64" => Some("riscv64"),
        "powerpc64" => Some("64bit"),
        "s390x" => Some("64bit"),
        _ => None,
    }
}

/// Parses `ldconfig -p` output into `(file name, flags, path)` entries.
pub fn parse_ldconfig(text: &str) -> Vec<(String, String, PathBuf)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some((left, path)) = line.split_once(" => ") else {
            continue;
        };
        let Some((name, flags)) = left.split_once(" (") else {
            continue;
        };
        out.push((
            name.trim().to_string(),
            flags.trim_end_matches(')').to_string(),
            PathBuf::from(path.trim()),
        ));
    }
    out
}

/// The known allocators found in the `ldconfig -p` listing `text`, by name: for each, the first of
/// its sonames listed for this architecture (or with no architecture tag when this build's is not
/// known).
pub fn installed_from(text: &str) -> BTreeMap<String, PathBuf> {
    let entries = parse_ldconfig(text);
    let tag = arch_tag();
    let mut found = BTreeMap::new();
    for k in KNOWN {
        let hit = k.sonames.iter().find_map(|soname| {
            entries
                .iter()
                .find(|(name, flags, _)| name == soname && tag.is_none_or(|t| flags.contains(t)))
                .map(|(_, _, path)| path.clone())
        });
        if let Some(path) = hit {
            found.insert(k.name.to_string(), path);
        }
    }
    found
}

/// The variable naming the program run instead of `ldconfig` (with `-p`), for hosts whose linker
/// cache lives elsewhere and for tests.
pub const LDCONFIG_VAR: &str = "HWR_LDCONFIG";

/// The known allocators installed on this host, by name, from the dynamic linker's cache
/// (`ldconfig -p`, tried as [`LDCONFIG_VAR`] when set, else `/sbin/ldconfig`,
/// `/usr/sbin/ldconfig`, then on `PATH`). Read once per process. Empty when ldconfig cannot be run.
pub fn installed() -> &'static BTreeMap<String, PathBuf> {
    static FOUND: OnceLock<BTreeMap<String, PathBuf>> = OnceLock::new();
    FOUND.get_or_init(|| {
        let chosen = std::env::var(LDCONFIG_VAR).ok().filter(|v| !v.is_empty());
        let programs: Vec<String> = match chosen {
            Some(p) => vec![p],
            None => ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"]
                .map(String::from)
                .to_vec(),
        };
        for program in &programs {
            if let Ok(out) = std::process::Command::new(program)
                .arg("-p")
                .stdin(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .output()
                && out.status.success()
            {
                return installed_from(&String::from_utf8_lossy(&out.stdout));
            }
        }
        BTreeMap::new()
    })
}

/// Why a known allocator cannot be used here, with how to install it.
pub fn not_installed(k: &Known) -> (String, String) {
    (
        format!(
            "allocator `{}` is not installed: none of {} is in the dynamic linker's cache (`ldconfig -p`)",
            k.name,
            k.sonames.join(", ")
        ),
        format!(
            "install the package that provides it (Debian/Ubuntu: `apt-get install {}`), or give the library's path",
            k.package
        ),
    )
}

/// sha256 (hex) of the file at `path`, computed once per path and process.
///
/// # Errors
/// I/O errors reading the file.
pub fn sha256_cached(path: &Path) -> io::Result<String> {
    static CACHE: OnceLock<Mutex<BTreeMap<PathBuf, String>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(path) {
        return Ok(hit.clone());
    }
    let sum = crate::digest::sha256_file(path)?;
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(path.to_path_buf(), sum.clone());
    Ok(sum)
}

/// The allocator a run is given, as the runner hands it to the executor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Choice {
    /// The manifest's value after placeholders: `glibc`, a known name, or the path as written.
    pub name: String,
    /// The library preloaded (absolute); `None` for `glibc`.
    pub path: Option<PathBuf>,
    /// sha256 (hex) of the library; `None` for `glibc` or when it could not be read.
    pub sha256: Option<String>,
}

/// run.json `allocator`: what the run was given and what its process had mapped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Record {
    /// `glibc`, a known name, or the path as written.
    pub name: String,
    /// The preloaded library; `None` for `glibc`.
    pub path: Option<String>,
    /// sha256 (hex) of the preloaded library.
    pub sha256: Option<String>,
    /// Whether the run's process was seen with the allocator in effect: for a preloaded library,
    /// that library in its `/proc/<pid>/maps`; for `glibc`, the C library mapped and no other
    /// known allocator library. Looked at until seen or the run ended. `None` when no look saw
    /// the C library mapped (a statically linked program, or a process that ended before its
    /// dynamic loader finished). Only `Some(true)` runs enter the report's estimates.
    pub seen_loaded: Option<bool>,
    /// The allocator libraries (jemalloc, tcmalloc, mimalloc, or the preloaded path) the process had
    /// mapped when it was looked at.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mapped: Vec<String>,
    /// Why the allocator was not shown in effect (`seen-loaded` not `true`); absent when it was,
    /// and in bundles from before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Record {
    /// A record for `choice` with nothing seen yet.
    pub fn unseen(choice: &Choice) -> Record {
        Record {
            name: choice.name.clone(),
            path: choice.path.as_ref().map(|p| p.display().to_string()),
            sha256: choice.sha256.clone(),
            seen_loaded: None,
            mapped: Vec::new(),
            reason: None,
        }
    }
}

/// One look at a process's `/proc/<pid>/maps`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MapsView {
    /// Whether the C library (`libc.so*`) is mapped: the dynamic loader has done its work
    /// (preloaded libraries are mapped before the C library).
    pub libc: bool,
    /// Whether the expected library is mapped (by path or device and inode).
    pub expected: bool,
    /// Allocator libraries mapped, as named in maps.
    pub allocators: Vec<String>,
}

/// Reads `/proc/<pid>/maps` and looks for the C library, the `expected` library (canonical path and
/// inode) and any known allocator library.
///
/// # Errors
/// The process is gone or maps is unreadable.
pub fn look(pid: i32, expected: Option<&(PathBuf, u64)>) -> io::Result<MapsView> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    Ok(view_of(&text, expected))
}

/// [`look`] on the text of a maps file.
pub fn view_of(text: &str, expected: Option<&(PathBuf, u64)>) -> MapsView {
    let mut view = MapsView::default();
    for line in text.lines() {
        // address perms offset dev inode pathname
        let mut fields = line.splitn(6, ' ');
        let (Some(_), Some(_), Some(_), Some(_), Some(inode)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        let Some(path) = fields.next().map(str::trim) else {
            continue;
        };
        if !path.starts_with('/') {
            continue;
        }
        let file = path.rsplit('/').next().unwrap_or(path);
        if file.starts_with("libc.so") || file.starts_with("libc-") {
            view.libc = true;
        }
        let inode: u64 = inode.parse().unwrap_or(0);
        let is_expected = expected.is_some_and(|(p, i)| Path::new(path) == p || (*i != 0 && *i == inode));
        if is_expected {
            view.expected = true;
        }
        if (is_expected || KNOWN.iter().any(|k| file.starts_with(k.prefix)))
            && !view.allocators.iter().any(|a| a == path)
        {
            view.allocators.push(path.to_string());
        }
    }
    view
}

/// What the executor looks for in a run's maps: the preloaded library's canonical path and inode,
/// or `None` for glibc.
pub fn expectation(choice: &Choice) -> Option<(PathBuf, u64)> {
    use std::os::unix::fs::MetadataExt;
    let path = choice.path.as_ref()?;
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
    let inode = std::fs::metadata(&canonical).map(|m| m.ino()).unwrap_or(0);
    Some((canonical, inode))
}

/// Judges one look: `Some(seen)` once the answer is known, `None` while the loader has not
/// finished (neither the expected library nor the C library mapped yet).
pub fn judge(view: &MapsView, preloaded: bool) -> Option<bool> {
    if preloaded {
        if view.expected {
            Some(true)
        } else if view.libc {
            Some(false)
        } else {
            None
        }
    } else if view.libc {
        Some(view.allocators.is_empty())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LDCONFIG: &str = "4 libs found in cache `/etc/ld.so.cache'
\tlibtcmalloc_minimal_debug.so.4 (libc6,x86-64) => /lib/x86_64-linux-gnu/libtcmalloc_minimal_debug.so.4
\tlibtcmalloc_minimal.so.4 (libc6,x86-64) => /lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
\tlibjemalloc.so.2 (libc6) => /lib/i386-linux-gnu/libjemalloc.so.2
\tlibjemalloc.so.2 (libc6,x86-64) => /lib/x86_64-linux-gnu/libjemalloc.so.2
";

    #[test]
    fn finds_known_libraries_in_the_linker_cache() {
        let found = installed_from(LDCONFIG);
        if std::env::consts::ARCH == "x86_64" {
            assert_eq!(
                found.get("jemalloc").map(PathBuf::as_path),
                Some(Path::new("/lib/x86_64-linux-gnu/libjemalloc.so.2"))
            );
            assert_eq!(
                found.get("tcmalloc").map(PathBuf::as_path),
                Some(Path::new("/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"))
            );
        }
        assert!(!found.contains_key("mimalloc"));
    }

    #[test]
    fn maps_views_are_judged() {
        let maps = "5600-5700 r--p 00000000 08:01 1234 /usr/bin/python3.11
7f00-7f10 r-xp 00000000 08:01 99 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2
7f20-7f30 r-xp 00000000 08:01 77 /usr/lib/x86_64-linux-gnu/libc.so.6
7f40-7f50 rw-p 00000000 00:00 0 
7ffd-7ffe rw-p 00000000 00:00 0                          [stack]
";
        let expected = (PathBuf::from("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"), 99);
        let v = view_of(maps, Some(&expected));
        assert!(v.libc && v.expected);
        assert_eq!(judge(&v, true), Some(true));
        assert_eq!(judge(&v, false), Some(false), "glibc run with jemalloc mapped");
        let by_inode = view_of(maps, Some(&(PathBuf::from("/lib/elsewhere.so"), 99)));
        assert!(by_inode.expected);
        let early = view_of(
            "5600-5700 r--p 00000000 08:01 1234 /usr/bin/python3.11\n",
            Some(&expected),
        );
        assert_eq!(judge(&early, true), None);
        let plain = view_of(
            "7f20-7f30 r-xp 00000000 08:01 77 /usr/lib/x86_64-linux-gnu/libc.so.6\n",
            Some(&expected),
        );
        assert_eq!(judge(&plain, true), Some(false));
        assert_eq!(judge(&plain, false), Some(true));
    }
}
