//! The spawner's protocol (`spawner.rs`): the request the runner sends for each run
//! ([`SpawnRequest`]) and the spawner's answer ([`SpawnAnswer`]), encoded and decoded here only.
//!
//! A request is one length-prefixed message on a Unix stream socket: a header of five
//! native-endian `u32` (the message's whole length in bytes, flags, number of CPUs, argc, envc),
//! the CPU numbers (`u32` each), then program, workdir, argv and envp as NUL-terminated strings.
//! Its descriptors travel with its first part as `SCM_RIGHTS`, in this order: stdin, stdout,
//! stderr, the report pipe, then the v1 memory cgroup's `tasks` and the cgroup folder where the
//! flags say so. The answer is 8 bytes: the child's pid, then the fork's errno (one of them 0).
//!
//! Both sides run in ordinary processes (the runner before its fork, the spawner before its
//! `clone3`), so encoding and decoding may allocate; nothing here runs between fork and exec.

use std::borrow::Cow;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;

use rustix::thread::CpuSet;

/// The first bytes a spawner that serves sends.
pub(super) const READY: &[u8; 4] = b"hwr1";

/// Most descriptors one request carries.
pub(super) const MAX_FDS: usize = 6;

/// Bytes of the length prefix (the header's first word).
pub(super) const LENGTH_BYTES: usize = 4;

/// Bytes of the header: length, flags, CPUs, argc, envc.
const HEADER_BYTES: usize = 5 * 4;

/// Header flags: the request carries a v1 memory cgroup's `tasks` / a cgroup folder.
const HAS_MEMCG: u32 = 1;
const HAS_CGROUP: u32 = 2;

/// Descriptors every request carries: stdin, stdout, stderr and the report pipe.
const FIXED_FDS: usize = 4;

/// What the runner asks the spawner to start: the child's program image, CPUs and descriptors.
/// Borrowed on the runner's side (encoded from the prepared image), owned once decoded.
pub(super) struct SpawnRequest<'a> {
    /// The path to exec.
    pub(super) program: Cow<'a, CStr>,
    /// The working directory the child changes to.
    pub(super) workdir: Cow<'a, CStr>,
    pub(super) argv: Cow<'a, [CString]>,
    /// `KEY=value` strings.
    pub(super) envp: Cow<'a, [CString]>,
    /// The child's CPUs; `None` keeps the spawner's.
    pub(super) cpus: Option<CpuSet>,
    /// Become the child's 0, 1, 2.
    pub(super) stdio: [RawFd; 3],
    /// The write end of the report pipe.
    pub(super) report: RawFd,
    /// `tasks` of the run's v1 memory cgroup, open for writing.
    pub(super) memcg: Option<RawFd>,
    /// The run's cgroup folder (`CLONE_INTO_CGROUP`).
    pub(super) cgroup: Option<RawFd>,
}

impl SpawnRequest<'_> {
    /// The message's bytes and the descriptors to send with them, in the protocol's order.
    pub(super) fn encode(&self) -> (Vec<u8>, Vec<RawFd>) {
        let cpus: Vec<u32> = self
            .cpus
            .map(|set| {
                (0..CpuSet::MAX_CPU)
                    .filter(|&c| set.is_set(c))
                    .map(|c| c as u32)
                    .collect()
            })
            .unwrap_or_default();
        let flags = if self.memcg.is_some() { HAS_MEMCG } else { 0 }
            | if self.cgroup.is_some() { HAS_CGROUP } else { 0 };
        let strings = [&*self.program, &*self.workdir]
            .into_iter()
            .chain(self.argv.iter().map(CString::as_c_str))
            .chain(self.envp.iter().map(CString::as_c_str));
        let mut out = Vec::with_capacity(64);
        for v in [
            0,
            flags,
            cpus.len() as u32,
            self.argv.len() as u32,
            self.envp.len() as u32,
        ] {
            out.extend_from_slice(&v.to_ne_bytes());
        }
        for c in &cpus {
            out.extend_from_slice(&c.to_ne_bytes());
        }
        for s in strings {
            out.extend_from_slice(s.to_bytes_with_nul());
        }
        let len = out.len() as u32;
        out[0..LENGTH_BYTES].copy_from_slice(&len.to_ne_bytes());
        let mut fds = vec![self.stdio[0], self.stdio[1], self.stdio[2], self.report];
        fds.extend(self.memcg);
        fds.extend(self.cgroup);
        (out, fds)
    }

    /// The whole length of the message whose length prefix is `prefix`; `None` when it is
    /// shorter than a header (a malformed message).
    pub(super) fn length(prefix: [u8; LENGTH_BYTES]) -> Option<usize> {
        let len = u32::from_ne_bytes(prefix) as usize;
        (len >= HEADER_BYTES).then_some(len)
    }

    /// Decodes the whole `message` (length prefix included) received with the descriptors `fds`
    /// (their numbers in this process; the caller keeps them open).
    ///
    /// # Errors
    /// `EBADMSG` for a malformed message: too short for its counts, a CPU beyond
    /// [`CpuSet::MAX_CPU`], a string without its NUL, or not the descriptors the flags announce.
    pub(super) fn decode(message: &[u8], fds: &[RawFd]) -> io::Result<SpawnRequest<'static>> {
        let bad = || io::Error::from_raw_os_error(libc::EBADMSG);
        let word = |i: usize| -> io::Result<u32> {
            message
                .get(i * 4..i * 4 + 4)
                .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                .ok_or_else(bad)
        };
        let (flags, ncpus, argc, envc) = (word(1)?, word(2)? as usize, word(3)? as usize, word(4)? as usize);
        let mut cpus = None;
        for i in 0..ncpus {
            let c = word(HEADER_BYTES / 4 + i)? as usize;
            if c >= CpuSet::MAX_CPU {
                return Err(bad());
            }
            cpus.get_or_insert_with(CpuSet::new).set(c);
        }
        let mut strings = message
            .get(HEADER_BYTES + ncpus * 4..)
            .ok_or_else(bad)?
            .split_inclusive(|&b| b == 0);
        let mut next = || -> io::Result<CString> {
            let s = strings.next().ok_or_else(bad)?;
            CString::from_vec_with_nul(s.to_vec()).map_err(|_| bad())
        };
        let program = next()?;
        let workdir = next()?;
        let argv = (0..argc).map(|_| next()).collect::<io::Result<Vec<_>>>()?;
        let envp = (0..envc).map(|_| next()).collect::<io::Result<Vec<_>>>()?;
        let (has_memcg, has_cgroup) = (flags & HAS_MEMCG != 0, flags & HAS_CGROUP != 0);
        if fds.len() != FIXED_FDS + usize::from(has_memcg) + usize::from(has_cgroup) {
            return Err(bad());
        }
        Ok(SpawnRequest {
            program: Cow::Owned(program),
            workdir: Cow::Owned(workdir),
            argv: Cow::Owned(argv),
            envp: Cow::Owned(envp),
            cpus,
            stdio: [fds[0], fds[1], fds[2]],
            report: fds[3],
            memcg: has_memcg.then(|| fds[FIXED_FDS]),
            cgroup: has_cgroup.then(|| fds[fds.len() - 1]),
        })
    }
}

/// The spawner's answer to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SpawnAnswer {
    /// The child's pid (a child of the runner).
    Started(i32),
    /// The errno of the fork (or `EBADMSG` for a malformed request).
    Failed(i32),
}

impl SpawnAnswer {
    /// Bytes of an encoded answer.
    pub(super) const BYTES: usize = 8;

    /// The answer for the result of a start: a failure without an OS error counts as `EIO`.
    pub(super) fn of(started: io::Result<i32>) -> SpawnAnswer {
        match started {
            Ok(pid) => SpawnAnswer::Started(pid),
            Err(e) => SpawnAnswer::Failed(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }

    /// The answer as bytes: pid, then errno (no allocation).
    pub(super) fn encode(self) -> [u8; Self::BYTES] {
        let (pid, errno) = match self {
            SpawnAnswer::Started(pid) => (pid, 0),
            SpawnAnswer::Failed(errno) => (0, errno),
        };
        let mut out = [0u8; Self::BYTES];
        out[0..4].copy_from_slice(&pid.to_ne_bytes());
        out[4..8].copy_from_slice(&errno.to_ne_bytes());
        out
    }

    /// The answer of `bytes`: a positive pid is a started child, anything else the errno.
    pub(super) fn decode(bytes: [u8; Self::BYTES]) -> SpawnAnswer {
        let pid = i32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let errno = i32::from_ne_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        if pid > 0 {
            SpawnAnswer::Started(pid)
        } else {
            SpawnAnswer::Failed(errno)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> CString {
        CString::new(s).unwrap()
    }

    fn cpus_of(set: Option<CpuSet>) -> Vec<usize> {
        set.map(|s| (0..CpuSet::MAX_CPU).filter(|&c| s.is_set(c)).collect())
            .unwrap_or_default()
    }

    fn request<'a>(argv: &'a [CString], envp: &'a [CString], cpus: Option<CpuSet>) -> SpawnRequest<'a> {
        SpawnRequest {
            program: Cow::Owned(c("/bin/true")),
            workdir: Cow::Owned(c("/tmp")),
            argv: Cow::Borrowed(argv),
            envp: Cow::Borrowed(envp),
            cpus,
            stdio: [10, 11, 12],
            report: 13,
            memcg: None,
            cgroup: Some(15),
        }
    }

    #[test]
    fn a_request_decodes_to_what_was_encoded() {
        let argv = [c("true"), c(""), c("a b")];
        let envp = [c("PATH=/bin"), c("X=1")];
        let mut set = CpuSet::new();
        set.set(1);
        set.set(3);
        for (memcg, cgroup) in [
            (None, None),
            (Some(14), None),
            (None, Some(15)),
            (Some(14), Some(15)),
        ] {
            let mut sent = request(&argv, &envp, Some(set));
            (sent.memcg, sent.cgroup) = (memcg, cgroup);
            let (bytes, fds) = sent.encode();
            let prefix = bytes[..LENGTH_BYTES].try_into().unwrap();
            assert_eq!(SpawnRequest::length(prefix), Some(bytes.len()));
            let got = SpawnRequest::decode(&bytes, &fds).unwrap();
            assert_eq!(got.program.as_ref(), c("/bin/true").as_c_str());
            assert_eq!(got.workdir.as_ref(), c("/tmp").as_c_str());
            assert_eq!(got.argv.as_ref(), argv);
            assert_eq!(got.envp.as_ref(), envp);
            assert_eq!(cpus_of(got.cpus), [1, 3]);
            assert_eq!((got.stdio, got.report), ([10, 11, 12], 13));
            assert_eq!((got.memcg, got.cgroup), (memcg, cgroup));
        }
        let (bytes, fds) = request(&[], &[], None).encode();
        let got = SpawnRequest::decode(&bytes, &fds).unwrap();
        assert!(got.cpus.is_none() && got.argv.is_empty() && got.envp.is_empty());
    }

    #[test]
    fn a_malformed_request_is_refused_with_ebadmsg() {
        let argv = [c("true")];
        let (bytes, fds) = request(&argv, &[], None).encode();
        let refused = |message: &[u8], fds: &[RawFd]| {
            SpawnRequest::decode(message, fds)
                .err()
                .and_then(|e| e.raw_os_error())
        };
        // Cut anywhere: a header, a string or its NUL is missing.
        for cut in 0..bytes.len() {
            assert_eq!(refused(&bytes[..cut], &fds), Some(libc::EBADMSG), "cut at {cut}");
        }
        // Not the descriptors the flags announce (a cgroup folder, no memory cgroup).
        assert_eq!(refused(&bytes, &fds[..4]), Some(libc::EBADMSG));
        assert_eq!(refused(&bytes, &[10, 11, 12, 13, 14, 15]), Some(libc::EBADMSG));
        // A CPU beyond the largest a CPU set holds.
        let mut bad_cpu = bytes.clone();
        bad_cpu[8..12].copy_from_slice(&1u32.to_ne_bytes());
        bad_cpu.splice(20..20, (CpuSet::MAX_CPU as u32).to_ne_bytes());
        assert_eq!(refused(&bad_cpu, &fds), Some(libc::EBADMSG));
        // A length prefix shorter than a header.
        assert_eq!(SpawnRequest::length(19u32.to_ne_bytes()), None);
    }

    #[test]
    fn answers_round_trip() {
        for answer in [SpawnAnswer::Started(4242), SpawnAnswer::Failed(libc::EAGAIN)] {
            assert_eq!(SpawnAnswer::decode(answer.encode()), answer);
        }
        let failed = SpawnAnswer::of(Err(io::Error::other("no errno")));
        assert_eq!(failed, SpawnAnswer::Failed(libc::EIO));
        assert_eq!(SpawnAnswer::of(Ok(7)), SpawnAnswer::Started(7));
    }
}
