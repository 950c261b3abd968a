//! Shared memory a run leaves behind: SysV shared memory segments (`/proc/sysvipc/shm`) and files
//! in `/dev/shm` that exist after the run and did not before it (run.json `shared-memory-left`).
//!
//! Both outlive every process of the run and keep their memory until someone removes them. A run
//! here has no IPC or mount namespace of its own, so no isolation owns them: they are listed,
//! never removed (another program may be meant to use them). With `jobs > 1` an object made by
//! another run in flight at the same time is listed for both; a SysV segment's `creator-pid`
//! tells them apart.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;

use serde::{Deserialize, Serialize};

/// Where a [`SharedMemoryLeft`] lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SharedMemoryKind {
    /// A SysV shared memory segment (`shmget`), listed by `ipcs -m`.
    Sysv,
    /// A file in `/dev/shm` (POSIX `shm_open`, or any file written there).
    DevShm,
}

/// One shared memory object that appeared during a run and outlived it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SharedMemoryLeft {
    /// SysV segment or `/dev/shm` file.
    pub kind: SharedMemoryKind,
    /// The segment's key (`0x0000162e`, `0x00000000` for IPC_PRIVATE) or the file's path.
    pub name: String,
    /// SysV only: the segment id (`ipcrm -m <id>` removes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shmid: Option<i64>,
    /// Size in bytes (the segment's size, or the file's length).
    pub bytes: u64,
    /// Resident bytes: the segment's `rss`, or the file's allocated blocks x 512.
    pub resident_bytes: u64,
    /// SysV only: the pid that created the segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creator_pid: Option<i64>,
    /// SysV only: processes attached to it when the run ended (`nattch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attached: Option<u64>,
    /// Whether hwr-exp removed it: always `false` (no isolation of the run owns it; see the
    /// module docs).
    pub removed: bool,
}

/// The shared memory objects present at one moment: SysV segment ids and `/dev/shm` (name,
/// inode) pairs.
#[derive(Debug, Default)]
pub(super) struct Snapshot {
    sysv: HashSet<i64>,
    dev_shm: HashSet<(std::ffi::OsString, u64)>,
}

/// Reads what shared memory exists now.
pub(super) fn snapshot() -> Snapshot {
    Snapshot {
        sysv: sysv_segments()
            .into_iter()
            .map(|s| s.shmid.unwrap_or(-1))
            .collect(),
        dev_shm: dev_shm_files().into_iter().map(|(n, ino, _)| (n, ino)).collect(),
    }
}

/// Shared memory present now that was not in `before`.
pub(super) fn left_since(before: &Snapshot) -> Vec<SharedMemoryLeft> {
    let mut out: Vec<SharedMemoryLeft> = sysv_segments()
        .into_iter()
        .filter(|s| !before.sysv.contains(&s.shmid.unwrap_or(-1)))
        .collect();
    for (name, ino, meta) in dev_shm_files() {
        if before.dev_shm.contains(&(name.clone(), ino)) {
            continue;
        }
        out.push(SharedMemoryLeft {
            kind: SharedMemoryKind::DevShm,
            name: format!("/dev/shm/{}", name.to_string_lossy()),
            shmid: None,
            bytes: meta.len(),
            resident_bytes: meta.blocks() * 512,
            creator_pid: None,
            attached: None,
            removed: false,
        });
    }
    out
}

/// The segments of `/proc/sysvipc/shm`, by its header's column names.
fn sysv_segments() -> Vec<SharedMemoryLeft> {
    let Ok(text) = fs::read_to_string("/proc/sysvipc/shm") else {
        return Vec::new();
    };
    parse_sysv(&text)
}

fn parse_sysv(text: &str) -> Vec<SharedMemoryLeft> {
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let cols: Vec<&str> = header.split_whitespace().collect();
    let col = |name: &str| cols.iter().position(|c| *c == name);
    let (Some(key), Some(id), Some(size)) = (col("key"), col("shmid"), col("size")) else {
        return Vec::new();
    };
    let (cpid, nattch, rss) = (col("cpid"), col("nattch"), col("rss"));
    lines
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let num = |i: Option<usize>| i.and_then(|i| f.get(i)?.parse::<i64>().ok());
            let key: i64 = f.get(key)?.parse().ok()?;
            Some(SharedMemoryLeft {
                kind: SharedMemoryKind::Sysv,
                name: format!("0x{:08x}", key as i32 as u32),
                shmid: Some(f.get(id)?.parse().ok()?),
                bytes: num(Some(size))?.max(0) as u64,
                resident_bytes: num(rss).unwrap_or(0).max(0) as u64,
                creator_pid: num(cpid),
                attached: num(nattch).map(|n| n.max(0) as u64),
                removed: false,
            })
        })
        .collect()
}

/// `(name, inode, metadata)` of each entry of `/dev/shm` (not followed).
fn dev_shm_files() -> Vec<(std::ffi::OsString, u64, fs::Metadata)> {
    let Ok(dir) = fs::read_dir("/dev/shm") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            Some((e.file_name(), meta.ino(), meta))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_sysvipc_shm() {
        let text = "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap\n\
      5678          3   600              1048576  4242     0      0     0     0     0     0          0          0 1700000000                  8192                     0\n";
        let s = parse_sysv(text);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].name, "0x0000162e");
        assert_eq!(s[0].shmid, Some(3));
        assert_eq!(s[0].bytes, 1 << 20);
        assert_eq!(s[0].resident_bytes, 8192);
        assert_eq!(s[0].creator_pid, Some(4242));
        assert_eq!(s[0].attached, Some(0));
        assert!(parse_sysv("").is_empty());
    }
}
