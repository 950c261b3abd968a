//! Memory figures read from `/proc/<pid>/smaps_rollup` (Linux 4.14+), parsed by the `procfs` crate.
//!
//! Shared by the built-in probe (which reads `/proc/self/smaps_rollup`) and the runner's external
//! sampler (which reads `/proc/<run pid>/smaps_rollup` into `memory.jsonl`).

use std::io::Read;
use std::path::Path;

use procfs::FromRead;
use procfs::process::SmapsRollup;
use serde::{Deserialize, Serialize};

/// One reading of smaps_rollup, all values in bytes.
///
/// A field the kernel does not print (older kernels lack `Pss_Anon`, for example) is `None` and is
/// left out of the JSON, never reported as 0.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Rollup {
    /// `Rss`: resident set size, file-backed pages included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss: Option<u64>,
    /// `Pss`: proportional set size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pss: Option<u64>,
    /// `Pss_Anon`: proportional share of anonymous pages (Linux 5.1+).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pss_anon: Option<u64>,
    /// `Private_Clean + Private_Dirty`: pages mapped by this process alone (can be file-backed).
    /// `None` when either field is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub private: Option<u64>,
    /// `Anonymous`: anonymous pages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anonymous: Option<u64>,
    /// `Swap`: swapped-out anonymous pages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<u64>,
}

/// Errors reading or parsing smaps_rollup.
#[derive(Debug, thiserror::Error)]
pub enum RollupError {
    /// The file could not be opened or read (no such process, permission, kernel without the file).
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file that was read, e.g. `/proc/self/smaps_rollup`.
        path: String,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The text is not in smaps format.
    #[error("cannot parse {path}: {message}")]
    Parse {
        /// The file that was parsed.
        path: String,
        /// What the parser said.
        message: String,
    },
}

impl Rollup {
    /// Reads and parses one smaps_rollup file, e.g. `/proc/self/smaps_rollup` or `/proc/1234/smaps_rollup`.
    ///
    /// # Errors
    /// [`RollupError::Read`] when the file cannot be read, [`RollupError::Parse`] when its text is not
    /// in smaps format.
    pub fn read(path: &Path) -> Result<Rollup, RollupError> {
        let mut text = String::with_capacity(1024);
        std::fs::File::open(path)
            .and_then(|mut f| f.read_to_string(&mut text))
            .map_err(|source| RollupError::Read {
                path: path.display().to_string(),
                source,
            })?;
        Rollup::parse(&text).map_err(|message| RollupError::Parse {
            path: path.display().to_string(),
            message,
        })
    }

    /// Adds `other` field by field (for a process group). A field stays `None` only when both are
    /// `None`.
    pub fn add(&mut self, other: &Rollup) {
        let sum = |a: &mut Option<u64>, b: Option<u64>| {
            *a = match (*a, b) {
                (Some(x), Some(y)) => Some(x + y),
                (x, y) => x.or(y),
            }
        };
        sum(&mut self.rss, other.rss);
        sum(&mut self.pss, other.pss);
        sum(&mut self.pss_anon, other.pss_anon);
        sum(&mut self.private, other.private);
        sum(&mut self.anonymous, other.anonymous);
        sum(&mut self.swap, other.swap);
    }

    /// Reads `/proc/self/smaps_rollup` of the calling process.
    ///
    /// # Errors
    /// As [`Rollup::read`].
    pub fn read_self() -> Result<Rollup, RollupError> {
        Rollup::read(Path::new("/proc/self/smaps_rollup"))
    }

    /// Reads `/proc/<pid>/smaps_rollup`.
    ///
    /// # Errors
    /// As [`Rollup::read`]; a process that has exited gives [`RollupError::Read`].
    pub fn read_pid(pid: u32) -> Result<Rollup, RollupError> {
        Rollup::read(Path::new(&format!("/proc/{pid}/smaps_rollup")))
    }

    /// Parses smaps_rollup text: an optional `[rollup]` header line, then `Key:   N kB` lines.
    /// Fields are taken by key; unknown keys are ignored; missing keys stay `None`.
    ///
    /// # Errors
    /// The parser's message when the text is not in smaps format.
    pub fn parse(text: &str) -> Result<Rollup, String> {
        // procfs expects a mapping header line before the fields; the kernel prints one
        // (`... [rollup]`), hand-written fixtures may not.
        let owned;
        let text = if text
            .lines()
            .next()
            .is_some_and(|l| l.contains(" kB") && !l.contains('['))
        {
            owned = format!("00000000-00000000 ---p 00000000 00:00 0 [rollup]\n{text}");
            owned.as_str()
        } else {
            text
        };
        let rollup = SmapsRollup::from_read(text.as_bytes()).map_err(|e| e.to_string())?;
        let Some(map) = rollup.memory_map_rollup.0.first() else {
            return Ok(Rollup::default());
        };
        let get = |k: &str| map.extension.map.get(k).copied();
        let private = match (get("Private_Clean"), get("Private_Dirty")) {
            (Some(c), Some(d)) => Some(c + d),
            _ => None,
        };
        Ok(Rollup {
            rss: get("Rss"),
            pss: get("Pss"),
            pss_anon: get("Pss_Anon"),
            private,
            anonymous: get("Anonymous"),
            swap: get("Swap"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_current_kernel_text() {
        let text = "55b56ec00000-7fff44d6a000 ---p 00000000 00:00 0                          [rollup]\n\
Rss:                1668 kB\nPss:                 801 kB\nPss_Anon:            112 kB\n\
Private_Clean:       160 kB\nPrivate_Dirty:       112 kB\nAnonymous:           112 kB\nSwap:                  0 kB\n";
        let r = Rollup::parse(text).unwrap();
        assert_eq!(r.rss, Some(1668 * 1024));
        assert_eq!(r.private, Some((160 + 112) * 1024));
        assert_eq!(r.pss_anon, Some(112 * 1024));
        assert_eq!(r.swap, Some(0));
    }

    #[test]
    fn reads_self() {
        let r = Rollup::read_self().unwrap();
        assert!(r.rss.unwrap() > 0);
    }
}
