//! Memory figures of one process, from three kernel files that differ in what they cost:
//!
//! - [`Rollup`]: `/proc/<pid>/smaps_rollup` (Linux 4.14+, parsed by the `procfs` crate): RSS, PSS,
//!   private, anonymous and swap bytes. The kernel walks every page table of the process to make
//!   it, holding the process's memory-map lock: the process's own `mmap`/`munmap` wait meanwhile
//!   (about 12 ms per GiB resident on this project's test machine).
//! - [`StatusCounters`]: the `VmRSS`, `RssAnon`, `RssFile`, `RssShmem` and `VmSwap` lines of
//!   `/proc/<pid>/status`: counters the kernel keeps as pages come and go, read without a
//!   page-table walk and without that lock (tens of microseconds whatever the size).
//! - [`Mappings`]: `/proc/<pid>/smaps`, one block per mapping (the same walk as smaps_rollup,
//!   and more text), folded into one row per heap, stack, file, shared memory object and the sum
//!   of anonymous mappings.
//!
//! Shared by the built-in probe (which reads `/proc/self/smaps_rollup`) and the runner's external
//! sampler (which reads the files of every process of a run into `memory.jsonl`).

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

/// The memory counters of `/proc/<pid>/status`, bytes (the kernel prints kB). The kernel keeps
/// them as per-CPU counters and adds them up on reading, so they can lag the truth by a few
/// pages per CPU; they need no page-table walk. A line the kernel did not print (a process whose
/// memory is gone: a zombie, or a thread-group leader whose main thread has exited) is `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct StatusCounters {
    /// `VmRSS`: resident pages, file-backed and shared memory included
    /// (`RssAnon + RssFile + RssShmem`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss: Option<u64>,
    /// `RssAnon`: resident anonymous pages (heap, stacks, anonymous mappings, copy-on-write
    /// copies of private file pages).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_anon: Option<u64>,
    /// `RssFile`: resident pages of mapped files (shared with the page cache and with every other
    /// process that maps them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_file: Option<u64>,
    /// `RssShmem`: resident shared memory (SysV segments, `/dev/shm` and tmpfs files, shared
    /// anonymous mappings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_shmem: Option<u64>,
    /// `VmSwap`: swapped-out anonymous pages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<u64>,
}

impl StatusCounters {
    /// Parses the text of `/proc/<pid>/status`: the `Key:  N kB` lines named above, by key.
    pub fn parse(text: &str) -> StatusCounters {
        let mut c = StatusCounters::default();
        for line in text.lines() {
            let Some((key, rest)) = line.split_once(':') else {
                continue;
            };
            let slot = match key {
                "VmRSS" => &mut c.rss,
                "RssAnon" => &mut c.rss_anon,
                "RssFile" => &mut c.rss_file,
                "RssShmem" => &mut c.rss_shmem,
                "VmSwap" => &mut c.swap,
                _ => continue,
            };
            *slot = kb(rest);
        }
        c
    }

    /// Reads `<dir>/status`, e.g. `/proc/1234/status` or `/proc/1234/task/1240/status`.
    ///
    /// # Errors
    /// The I/O error of opening or reading the file (no such process).
    pub fn read(dir: &str) -> std::io::Result<StatusCounters> {
        let mut text = String::with_capacity(1600);
        std::fs::File::open(format!("{dir}/status"))?.read_to_string(&mut text)?;
        Ok(StatusCounters::parse(&text))
    }

    /// Adds `other` field by field; a field stays `None` only when both are `None`.
    pub fn add(&mut self, other: &StatusCounters) {
        for (a, b) in [
            (&mut self.rss, other.rss),
            (&mut self.rss_anon, other.rss_anon),
            (&mut self.rss_file, other.rss_file),
            (&mut self.rss_shmem, other.rss_shmem),
            (&mut self.swap, other.swap),
        ] {
            *a = match (*a, b) {
                (Some(x), Some(y)) => Some(x + y),
                (x, y) => x.or(y),
            };
        }
    }
}

/// `  1234 kB` -> bytes.
fn kb(rest: &str) -> Option<u64> {
    let mut it = rest.split_whitespace();
    let n: u64 = it.next()?.parse().ok()?;
    Some(match it.next() {
        Some("kB") => n * 1024,
        _ => n,
    })
}

/// What kind of mapping a [`MappingRow`] stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MappingKind {
    /// `[heap]`: the brk heap.
    Heap,
    /// `[stack]` (the main thread's stack; other threads' stacks are anonymous mappings).
    Stack,
    /// Every private anonymous mapping without a name, summed (malloc arenas, large allocations,
    /// thread stacks, the Python and torch allocators' pools).
    Anonymous,
    /// One mapped file (all its mappings summed), e.g. a safetensors file or a shared library.
    File,
    /// One shared memory object: a SysV segment (`/SYSV<key>`), a `/dev/shm` or memfd file, or
    /// a shared anonymous mapping (`/dev/zero`).
    Shmem,
    /// Kernel-provided mappings (`[vdso]`, `[vvar]`, `[vsyscall]`) and other named ones.
    Other,
}

impl MappingKind {
    /// The kebab-case word, as in JSON (`heap`, `anonymous`, `shmem`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            MappingKind::Heap => "heap",
            MappingKind::Stack => "stack",
            MappingKind::Anonymous => "anonymous",
            MappingKind::File => "file",
            MappingKind::Shmem => "shmem",
            MappingKind::Other => "other",
        }
    }
}

/// One row of a [`Mappings`] breakdown: the sum over the mappings it stands for, bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MappingFigures {
    /// `Size`: virtual size.
    pub size: u64,
    /// `Rss`.
    pub rss: u64,
    /// `Pss`.
    pub pss: u64,
    /// `Pss_Anon` (Linux 5.1+; 0 where the kernel does not print it).
    #[serde(default)]
    pub pss_anon: u64,
    /// `Private_Dirty`: pages written by this process alone.
    pub private_dirty: u64,
    /// `Private_Clean`: pages mapped by this process alone, unmodified.
    pub private_clean: u64,
    /// `Shared_Clean + Shared_Dirty`: resident pages also mapped by another process.
    pub shared: u64,
    /// Resident file-backed pages of a file or shared memory mapping (`Rss - Anonymous`); 0 for
    /// anonymous memory.
    pub file_backed: u64,
    /// `Anonymous`: anonymous pages (copy-on-write copies in a private file mapping included).
    pub anonymous: u64,
    /// `AnonHugePages`: anonymous pages in transparent huge pages.
    pub anon_huge_pages: u64,
    /// `Swap`.
    pub swap: u64,
}

impl MappingFigures {
    fn add(&mut self, o: &MappingFigures) {
        self.size += o.size;
        self.rss += o.rss;
        self.pss += o.pss;
        self.pss_anon += o.pss_anon;
        self.private_dirty += o.private_dirty;
        self.private_clean += o.private_clean;
        self.shared += o.shared;
        self.file_backed += o.file_backed;
        self.anonymous += o.anonymous;
        self.anon_huge_pages += o.anon_huge_pages;
        self.swap += o.swap;
    }

    /// `private_dirty + private_clean`: the process's private bytes in these mappings.
    pub fn private(&self) -> u64 {
        self.private_dirty + self.private_clean
    }
}

/// One row of a per-mapping breakdown: a kind, a name (the file path, `[heap]`, ...), how many
/// mappings it sums, and their figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MappingRow {
    /// Which kind of mapping.
    pub kind: MappingKind,
    /// The path of a file or shared memory object, `[heap]`, `[stack]`, `[anonymous]` for the
    /// anonymous sum, or the kernel's name of another mapping.
    pub name: String,
    /// How many mappings (lines of `/proc/<pid>/maps`) the row sums.
    pub mappings: u32,
    /// Their figures, summed.
    #[serde(flatten)]
    pub figures: MappingFigures,
}

/// A per-mapping breakdown of one process (or, with [`Mappings::add`], of several) from
/// `/proc/<pid>/smaps`: one [`MappingRow`] per heap, stack, anonymous sum, mapped file, shared
/// memory object and other named mapping, ordered by kind then name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mappings(pub Vec<MappingRow>);

impl Mappings {
    /// Parses smaps text: a header line per mapping (`start-end perms offset dev inode [name]`)
    /// followed by `Key: N kB` lines; mappings are folded into rows by kind and name.
    pub fn parse(text: &str) -> Mappings {
        Mappings::parse_with_rollup(text).0
    }

    /// [`Mappings::parse`], and the whole process's figures summed over every mapping as
    /// smaps_rollup would give them (`Pss_Anon` only where the kernel prints it).
    pub fn parse_with_rollup(text: &str) -> (Mappings, Rollup) {
        let mut rows: std::collections::BTreeMap<(MappingKind, String), (u32, MappingFigures)> =
            std::collections::BTreeMap::new();
        let mut current: Option<((MappingKind, String), MappingFigures)> = None;
        let mut saw_pss_anon = false;
        let mut flush = |cur: Option<((MappingKind, String), MappingFigures)>| {
            if let Some((key, mut f)) = cur {
                if matches!(key.0, MappingKind::File | MappingKind::Shmem) {
                    f.file_backed = f.rss.saturating_sub(f.anonymous);
                }
                let e = rows.entry(key).or_default();
                e.0 += 1;
                e.1.add(&f);
            }
        };
        for line in text.lines() {
            // A header line starts with `start-end` in hex; a field line with `Key:`.
            let first = line.split_ascii_whitespace().next().unwrap_or("");
            if first.contains('-') && first.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
                flush(current.take());
                current = Some((classify(line), MappingFigures::default()));
                continue;
            }
            let Some((key, rest)) = line.split_once(':') else {
                continue;
            };
            let Some((_, f)) = current.as_mut() else {
                continue;
            };
            let Some(v) = kb(rest) else { continue };
            match key {
                "Size" => f.size = v,
                "Rss" => f.rss = v,
                "Pss" => f.pss = v,
                "Pss_Anon" => {
                    f.pss_anon = v;
                    saw_pss_anon = true;
                }
                "Private_Dirty" => f.private_dirty = v,
                "Private_Clean" => f.private_clean = v,
                "Shared_Clean" | "Shared_Dirty" => f.shared += v,
                "Anonymous" => f.anonymous = v,
                "AnonHugePages" => f.anon_huge_pages = v,
                "Swap" => f.swap = v,
                _ => {}
            }
        }
        flush(current.take());
        let mut total = MappingFigures::default();
        for (_, f) in rows.values() {
            total.add(f);
        }
        let any = !rows.is_empty();
        let rollup = Rollup {
            rss: any.then_some(total.rss),
            pss: any.then_some(total.pss),
            pss_anon: (any && saw_pss_anon).then_some(total.pss_anon),
            private: any.then_some(total.private()),
            anonymous: any.then_some(total.anonymous),
            swap: any.then_some(total.swap),
        };
        let rows = rows
            .into_iter()
            .map(|((kind, name), (mappings, figures))| MappingRow {
                kind,
                name,
                mappings,
                figures,
            })
            .collect();
        (Mappings(rows), rollup)
    }

    /// Reads and parses `<dir>/smaps`, e.g. `/proc/1234/smaps`.
    ///
    /// # Errors
    /// The I/O error of opening or reading the file.
    pub fn read(dir: &str) -> std::io::Result<Mappings> {
        Ok(Mappings::parse(&Mappings::read_text(dir)?))
    }

    /// The text of `<dir>/smaps` (the kernel's walk happens here; parsing is the reader's).
    ///
    /// # Errors
    /// The I/O error of opening or reading the file.
    pub fn read_text(dir: &str) -> std::io::Result<String> {
        let mut text = String::with_capacity(64 * 1024);
        std::fs::File::open(format!("{dir}/smaps"))?.read_to_string(&mut text)?;
        Ok(text)
    }

    /// Adds `other`'s rows (for a process tree): rows of the same kind and name are summed.
    pub fn add(&mut self, other: &Mappings) {
        for row in &other.0 {
            match self
                .0
                .iter_mut()
                .find(|r| r.kind == row.kind && r.name == row.name)
            {
                Some(r) => {
                    r.mappings += row.mappings;
                    r.figures.add(&row.figures);
                }
                None => self.0.push(row.clone()),
            }
        }
        self.0.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    }

    /// Rows of `self` (later) against `earlier` by kind and name: (row, growth of private
    /// bytes, growth of RSS), largest private growth first; rows only in one side count the
    /// other as 0.
    pub fn growth<'a>(&'a self, earlier: &'a Mappings) -> Vec<(&'a MappingRow, i64, i64)> {
        let find = |m: &'a Mappings, r: &MappingRow| {
            m.0.iter()
                .find(|x| x.kind == r.kind && x.name == r.name)
                .map(|x| &x.figures)
        };
        let zero = MappingFigures::default();
        let mut out: Vec<(&MappingRow, i64, i64)> = self
            .0
            .iter()
            .map(|r| {
                let before = find(earlier, r).unwrap_or(&zero);
                (
                    r,
                    r.figures.private() as i64 - before.private() as i64,
                    r.figures.rss as i64 - before.rss as i64,
                )
            })
            .chain(
                earlier
                    .0
                    .iter()
                    .filter(|r| find(self, r).is_none())
                    .map(|r| (r, -(r.figures.private() as i64), -(r.figures.rss as i64))),
            )
            .collect();
        out.sort_by(|a, b| b.1.abs().cmp(&a.1.abs()).then(b.2.abs().cmp(&a.2.abs())));
        out
    }
}

/// The kind and row name of a smaps header line.
fn classify(header: &str) -> (MappingKind, String) {
    // start-end perms offset dev inode name: the name is everything after the fifth field.
    let mut rest = header;
    let mut fields = Vec::with_capacity(5);
    for _ in 0..5 {
        rest = rest.trim_start();
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        fields.push(&rest[..end]);
        rest = &rest[end..];
    }
    let name = rest.trim();
    let perms = fields.get(1).copied().unwrap_or("");
    let inode = fields.get(4).copied().unwrap_or("0");
    let shared = perms.as_bytes().get(3) == Some(&b's');
    if name.is_empty() {
        return if shared {
            (MappingKind::Shmem, "[shared anonymous]".into())
        } else {
            (MappingKind::Anonymous, "[anonymous]".into())
        };
    }
    match name {
        "[heap]" => return (MappingKind::Heap, name.into()),
        "[stack]" => return (MappingKind::Stack, name.into()),
        _ => {}
    }
    if name.starts_with("[anon:") {
        return (MappingKind::Anonymous, "[anonymous]".into());
    }
    if name.starts_with('[') {
        return (MappingKind::Other, name.into());
    }
    let shm = name.starts_with("/SYSV")
        || name.starts_with("/dev/shm/")
        || name.starts_with("/memfd:")
        || name.starts_with("/dev/zero")
        || (shared && inode != "0" && name.ends_with("(deleted)") && name.starts_with("/dev/shm"));
    if shm {
        (MappingKind::Shmem, name.into())
    } else {
        (MappingKind::File, name.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `as_str` is the serde name, both ways, of every variant.
    #[test]
    fn mapping_kind_names_are_the_serde_names() {
        use MappingKind::*;
        for v in [Heap, Stack, Anonymous, File, Shmem, Other] {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str(), "{v:?}");
            assert_eq!(
                serde_json::from_value::<MappingKind>(v.as_str().into()).unwrap(),
                v
            );
        }
    }

    #[test]
    fn parses_status_counters() {
        let text = "Name:\tx\nVmPeak:\t  1000 kB\nVmRSS:\t   300 kB\nRssAnon:\t   100 kB\n\
RssFile:\t   150 kB\nRssShmem:\t    50 kB\nVmSwap:\t     0 kB\nThreads:\t2\n";
        let c = StatusCounters::parse(text);
        assert_eq!(c.rss, Some(300 * 1024));
        assert_eq!(c.rss_anon, Some(100 * 1024));
        assert_eq!(c.rss_file, Some(150 * 1024));
        assert_eq!(c.rss_shmem, Some(50 * 1024));
        assert_eq!(c.swap, Some(0));
        // A leader whose main thread exited prints no Vm lines.
        let gone = StatusCounters::parse("Name:\tx\nState:\tZ (zombie)\nThreads:\t2\n");
        assert_eq!(gone, StatusCounters::default());
        let me = StatusCounters::read("/proc/self").unwrap();
        assert!(me.rss.unwrap() > 0);
    }

    #[test]
    fn folds_smaps_into_rows() {
        let text = "\
55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]
Size:                132 kB
Rss:                  40 kB
Pss:                  40 kB
Private_Dirty:        40 kB
Anonymous:            40 kB
7f0000000000-7f0000100000 r--p 00000000 08:01 1234                       /data/w.safetensors
Size:               1024 kB
Rss:                1024 kB
Pss:                 512 kB
Shared_Clean:       1024 kB
Anonymous:             0 kB
7f0000100000-7f0000200000 r--p 00100000 08:01 1234                       /data/w.safetensors
Size:               1024 kB
Rss:                 512 kB
Pss:                 512 kB
Private_Clean:       512 kB
7f0000200000-7f0000400000 rw-p 00000000 00:00 0 
Size:               2048 kB
Rss:                2048 kB
Private_Dirty:      2048 kB
Anonymous:          2048 kB
AnonHugePages:      2048 kB
7f0000400000-7f0000500000 rw-s 00000000 00:01 5                          /SYSV00001234 (deleted)
Size:               1024 kB
Rss:                 100 kB
Shared_Dirty:        100 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
Rss:                  12 kB
Private_Dirty:        12 kB
Anonymous:            12 kB
";
        let m = Mappings::parse(text);
        let row = |name: &str| m.0.iter().find(|r| r.name == name).unwrap();
        let file = row("/data/w.safetensors");
        assert_eq!((file.kind, file.mappings), (MappingKind::File, 2));
        assert_eq!(file.figures.rss, 1536 * 1024);
        assert_eq!(file.figures.private_clean, 512 * 1024);
        assert_eq!(file.figures.shared, 1024 * 1024);
        assert_eq!(file.figures.file_backed, 1536 * 1024);
        let anon = row("[anonymous]");
        assert_eq!(anon.figures.anon_huge_pages, 2048 * 1024);
        assert_eq!(anon.figures.file_backed, 0);
        assert_eq!(row("/SYSV00001234 (deleted)").kind, MappingKind::Shmem);
        assert_eq!(row("[heap]").figures.private_dirty, 40 * 1024);
        assert_eq!(row("[stack]").kind, MappingKind::Stack);

        let mut later = m.clone();
        later
            .0
            .iter_mut()
            .find(|r| r.name == "[heap]")
            .unwrap()
            .figures
            .private_dirty += 4096 * 1024;
        let g = later.growth(&m);
        assert_eq!(g[0].0.name, "[heap]");
        assert_eq!(g[0].1, 4096 * 1024);
        let mut two = m.clone();
        two.add(&m);
        assert_eq!(two.0.len(), m.0.len());
        assert_eq!(two.0.iter().find(|r| r.name == "[heap]").unwrap().mappings, 2);
        let me = Mappings::read("/proc/self").unwrap();
        assert!(me.0.iter().any(|r| r.kind == MappingKind::File));
    }

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
