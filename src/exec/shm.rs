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
/// inode) pairs, with what tells cheaply whether they changed.
///
/// Reading them is kept cheap, since it happens twice per run: SysV segments are listed only
/// when `shmctl(SHM_INFO)` says any exist (one system call otherwise), and `/dev/shm` is read
/// only when the folder changed: its `stat` (inode, size, modification time in nanoseconds)
/// differs from that of the last listing, which is kept for the next run. A file made or removed
/// in `/dev/shm` changes the folder's modification time (and on tmpfs its size, 20 bytes an
/// entry); on Linux 6.13+ the time is fine-grained once it has been read, so a change right
/// after the `stat` is seen too.
#[derive(Debug, Default, Clone)]
pub(super) struct Snapshot {
    sysv: HashSet<i64>,
    dev_shm: Listing,
}

/// `/dev/shm` at one moment: its folder's stamp and its entries.
#[derive(Debug, Default, Clone)]
struct Listing {
    stamp: Option<Stamp>,
    entries: std::sync::Arc<HashSet<(std::ffi::OsString, u64)>>,
}

/// What changes when an entry of a folder is made, removed or renamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    size: i64,
    mtime: (i64, i64),
}

/// Where `/dev/shm` is.
const DEV_SHM: &str = "/dev/shm";

fn stamp() -> Option<Stamp> {
    let st = rustix::fs::stat(DEV_SHM).ok()?;
    Some(Stamp {
        ino: st.st_ino,
        size: st.st_size,
        mtime: (st.st_mtime, st.st_mtime_nsec as i64),
    })
}

/// The last full listing of `/dev/shm`, reused while the folder's stamp is unchanged.
static LAST: std::sync::Mutex<Option<Listing>> = std::sync::Mutex::new(None);

/// `/dev/shm` now: the last listing when the folder has not changed since, else a new one.
fn dev_shm_now() -> Listing {
    let Some(now) = stamp() else {
        return Listing::default();
    };
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(l) = last.as_ref().filter(|l| l.stamp == Some(now)) {
        return l.clone();
    }
    let entries: HashSet<(std::ffi::OsString, u64)> = fs::read_dir(DEV_SHM)
        .map(|dir| {
            dir.flatten()
                .map(|e| (e.file_name(), std::os::unix::fs::DirEntryExt::ino(&e)))
                .collect()
        })
        .unwrap_or_default();
    let listing = Listing {
        stamp: Some(now),
        entries: std::sync::Arc::new(entries),
    };
    *last = Some(listing.clone());
    listing
}

/// How many SysV shared memory segments exist (`shmctl(SHM_INFO)` `used_ids`); `None` when it
/// cannot be asked (then `/proc/sysvipc/shm` is read).
fn sysv_count() -> Option<u64> {
    /// `struct shm_info` of `<sys/shm.h>` (Linux), which the libc crate does not define.
    #[repr(C)]
    #[derive(Default)]
    struct ShmInfo {
        used_ids: libc::c_int,
        shm_tot: libc::c_ulong,
        shm_rss: libc::c_ulong,
        shm_swp: libc::c_ulong,
        swap_attempts: libc::c_ulong,
        swap_successes: libc::c_ulong,
    }
    /// `SHM_INFO` of `<sys/shm.h>` (Linux).
    const SHM_INFO: libc::c_int = 14;
    let mut info = ShmInfo::default();
    // SAFETY: SHM_INFO writes a `struct shm_info` into the buffer, which is one.
    let r = unsafe { libc::shmctl(0, SHM_INFO, std::ptr::addr_of_mut!(info).cast()) };
    (r >= 0).then(|| info.used_ids.max(0) as u64)
}

/// SysV segment ids now (none read when none exist).
fn sysv_now() -> Vec<SharedMemoryLeft> {
    if sysv_count() == Some(0) {
        return Vec::new();
    }
    sysv_segments()
}

/// Reads what shared memory exists now.
pub(super) fn snapshot() -> Snapshot {
    Snapshot {
        sysv: sysv_now().into_iter().map(|s| s.shmid.unwrap_or(-1)).collect(),
        dev_shm: dev_shm_now(),
    }
}

/// Shared memory present now that was not in `before`.
pub(super) fn left_since(before: &Snapshot) -> Vec<SharedMemoryLeft> {
    let mut out: Vec<SharedMemoryLeft> = sysv_now()
        .into_iter()
        .filter(|s| !before.sysv.contains(&s.shmid.unwrap_or(-1)))
        .collect();
    let now = dev_shm_now();
    if now.stamp == before.dev_shm.stamp {
        return out;
    }
    for (name, ino) in now.entries.iter() {
        if before.dev_shm.entries.contains(&(name.clone(), *ino)) {
            continue;
        }
        let path = std::path::Path::new(DEV_SHM).join(name);
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue; // gone since the listing
        };
        out.push(SharedMemoryLeft {
            kind: SharedMemoryKind::DevShm,
            name: format!("{DEV_SHM}/{}", name.to_string_lossy()),
            shmid: None,
            bytes: meta.len(),
            resident_bytes: meta.blocks() * 512,
            creator_pid: None,
            attached: None,
            removed: false,
        });
    }
    out.sort_by(|a, b| (a.kind as u8, &a.name).cmp(&(b.kind as u8, &b.name)));
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

    /// A file made in `/dev/shm` after the snapshot is listed with its size; one removed again
    /// is not; an unchanged folder lists nothing.
    #[test]
    fn a_new_dev_shm_file_is_listed() {
        if !std::path::Path::new(DEV_SHM).is_dir() {
            return;
        }
        let before = snapshot();
        let path = format!("{DEV_SHM}/hwr-exp-unit-{}", std::process::id());
        fs::write(&path, vec![7u8; 5000]).unwrap();
        let left = left_since(&before);
        let mine: Vec<_> = left.iter().filter(|l| l.name == path).collect();
        assert_eq!(mine.len(), 1, "{left:?}");
        assert_eq!((mine[0].kind, mine[0].bytes), (SharedMemoryKind::DevShm, 5000));
        let after = snapshot();
        assert!(!left_since(&after).iter().any(|l| l.name == path));
        fs::remove_file(&path).unwrap();
        assert!(!left_since(&before).iter().any(|l| l.name == path));
    }
}
