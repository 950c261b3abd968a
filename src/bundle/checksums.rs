//! Whole-bundle tamper evidence (DESIGN 5): `checksums.sha256`, the SHA-256 of every file of a
//! finished bundle, and the hashing of a run's own files for run.json.
//!
//! The list is written by [`write_checksums`] when a bundle is finished (from
//! [`super::BundleWriter::finish`], so `run`, `rerun` and `resume` all write it, after bundle.json
//! has its final status and while the bundle's lock is still held). Its format is that of
//! `sha256sum` (`<64 hex>  <path>` per line, paths relative to the bundle folder with `/`, sorted
//! component by component), so `cd BUNDLE && sha256sum -c checksums.sha256` checks it too. A path
//! holding a backslash or a newline is written as `sha256sum` does: the line starts with `\` and the
//! path has `\\` and `\n`. Every regular file is listed, bundle.json included; the list itself and
//! the lock file `.lock` are not. Symbolic links, FIFOs and other non-regular entries are not
//! followed or read, and not listed (`hwr-exp verify` names them).
//!
//! [`read_checksums`] parses the list for `hwr-exp verify`; paths in it are checked with
//! [`super::contained`] before anything is opened.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io::{self, BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::FileType;

use super::atomic::{FILE_MODE, write_atomic_with};
use super::contained::{open_folder, open_in, open_regular_at};
use super::format::files;
pub use super::walk::{Walked, walk};
use crate::digest::sha256_reader;

/// Hashes a run's own files `names` in its folder `dir` for run.json's `sha256` (name -> 64 hex
/// digits), setting each to [`FILE_MODE`] first (the executor created them under the runner's
/// umask) through the open descriptor (`fchmod`). A name that does not exist, or is not a regular
/// file (a program may replace its output with a symbolic link or a FIFO), is left out unread:
/// nothing outside the folder is touched, nothing blocks, and `hwr-exp verify` names the entry.
///
/// # Errors
/// I/O errors opening, changing the mode of or reading a regular file.
pub fn hash_run_files(dir: &Path, names: &[&str]) -> io::Result<BTreeMap<String, String>> {
    let mut sha256 = BTreeMap::new();
    let folder = open_folder(dir)?;
    for name in names {
        let (file, stat) = match open_regular_at(&folder, Path::new(name)) {
            Ok(f) => f,
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::InvalidInput) => continue,
            Err(e) => return Err(e),
        };
        if stat.st_mode & 0o7777 != FILE_MODE {
            file.set_permissions(fs::Permissions::from_mode(FILE_MODE))?;
        }
        sha256.insert((*name).to_string(), sha256_of((file, stat))?);
    }
    Ok(sha256)
}

/// The SHA-256 of an open regular file and its `fstat`, read to its end; most runs leave
/// stderr.log empty, and an empty file's digest needs no read.
///
/// # Errors
/// Read errors.
fn sha256_of((file, stat): (fs::File, rustix::fs::Stat)) -> io::Result<String> {
    if stat.st_size == 0 {
        return Ok(crate::digest::sha256_bytes(b""));
    }
    sha256_reader(file)
}

/// Whether `rel` (relative to the bundle folder) is one of the files the list leaves out: the list
/// itself and the lock file.
pub fn unlisted(rel: &Path) -> bool {
    rel == Path::new(files::CHECKSUMS) || rel == Path::new(files::LOCK)
}

/// Whether `rel` is a temporary file of the atomic writer at the bundle's top level
/// ([`super::atomic::write_atomic`]); the list's own is one while it is written.
fn top_level_temporary(rel: &Path) -> bool {
    rel.parent() == Some(Path::new("")) && rel.as_os_str().as_bytes().starts_with(b".tmp-")
}

/// A path as `sha256sum` writes it: whether the line needs the leading `\\`, and the path's bytes
/// with `\\` and newline escaped when it does.
fn escape(rel: &Path) -> (bool, Vec<u8>) {
    let bytes = rel.as_os_str().as_bytes();
    if !bytes.iter().any(|b| *b == b'\\' || *b == b'\n') {
        return (false, bytes.to_vec());
    }
    let mut out = Vec::with_capacity(bytes.len() + 2);
    for &b in bytes {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b => out.push(b),
        }
    }
    (true, out)
}

/// Writes `checksums.sha256` into the bundle folder `dir` atomically: the SHA-256 of every regular
/// file under `dir` (streamed in 64 KiB blocks, opened without following links) except the list
/// itself, `.lock` and the atomic writer's temporary files `.tmp-*` at the top level, in [`walk`]
/// order. Called when a bundle is finished, with bundle.json final.
///
/// # Errors
/// I/O errors listing folders, reading files or writing the list.
pub fn write_checksums(dir: &Path) -> io::Result<()> {
    write_atomic_with(&dir.join(files::CHECKSUMS), |out| {
        walk(dir, &mut |entry| {
            let rel = entry.rel;
            if entry.kind != FileType::RegularFile || unlisted(rel) || top_level_temporary(rel) {
                return Ok(());
            }
            let sha = sha256_of(entry.open_regular()?)?;
            let (escaped, name) = escape(rel);
            if escaped {
                out.write_all(b"\\")?;
            }
            out.write_all(sha.as_bytes())?;
            out.write_all(b"  ")?;
            out.write_all(&name)?;
            out.write_all(b"\n")
        })
    })
}

/// One line of `checksums.sha256`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path relative to the bundle folder, made only of plain names.
    pub path: PathBuf,
    /// 64 lowercase hex digits.
    pub sha256: String,
}

/// What [`read_checksums`] found: the entries that parse, and one message per line that does not
/// (`line N: ...`).
#[derive(Debug, Clone, Default)]
pub struct Checksums {
    /// Entries by path.
    pub entries: BTreeMap<PathBuf, String>,
    /// Lines that could not be used and why.
    pub bad_lines: Vec<String>,
}

fn parse_line(line: &[u8]) -> Result<Entry, String> {
    let (escaped, line) = match line.strip_prefix(b"\\") {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    if line.len() < 66 || &line[64..66] != b"  " {
        return Err("not `<64 hex digits>  <path>`".into());
    }
    let sha = std::str::from_utf8(&line[..64])
        .ok()
        .filter(|h| {
            h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
        .ok_or("the checksum is not 64 lowercase hex digits")?;
    let raw = &line[66..];
    let name = if escaped {
        let mut out = Vec::with_capacity(raw.len());
        let mut it = raw.iter();
        while let Some(&b) = it.next() {
            if b == b'\\' {
                match it.next() {
                    Some(b'\\') => out.push(b'\\'),
                    Some(b'n') => out.push(b'\n'),
                    _ => return Err("bad escape in the path".into()),
                }
            } else {
                out.push(b);
            }
        }
        out
    } else {
        raw.to_vec()
    };
    let path = PathBuf::from(OsStr::from_bytes(&name));
    let plain = !name.is_empty()
        && !name.contains(&0)
        && !name.starts_with(b"/")
        && path.components().all(|c| matches!(c, Component::Normal(_)));
    if !plain {
        return Err(format!(
            "`{}` is not a path inside the bundle (plain names joined by `/`)",
            path.display()
        ));
    }
    Ok(Entry {
        path,
        sha256: sha.to_string(),
    })
}

/// Reads `checksums.sha256` of the bundle folder `dir` line by line (opened without following a
/// link; only a regular file is read).
///
/// # Errors
/// As [`open_in`] (`NotFound` when the bundle has no list); read errors.
pub fn read_checksums(dir: &Path) -> io::Result<Checksums> {
    let file = open_in(dir, Path::new(files::CHECKSUMS))?;
    let mut out = Checksums::default();
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    let mut number = 0usize;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        number += 1;
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        match parse_line(text) {
            Ok(e) => {
                if out.entries.insert(e.path.clone(), e.sha256).is_some() {
                    out.bad_lines
                        .push(format!("line {number}: `{}` listed twice", e.path.display()));
                }
            }
            Err(why) => out.bad_lines.push(format!("line {number}: {why}")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_round_trips_and_skips_links_lock_and_itself() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::create_dir_all(d.join("runs/0000-a")).unwrap();
        fs::write(d.join("bundle.json"), "{}").unwrap();
        fs::write(d.join(".lock"), "1").unwrap();
        fs::write(d.join("runs/0000-a/out.json"), "1").unwrap();
        fs::write(d.join("runs/0000-a/we\\ird\nname"), "2").unwrap();
        fs::write(d.join("runs.txt"), "3").unwrap();
        std::os::unix::fs::symlink("/dev/zero", d.join("runs/0000-a/zero")).unwrap();
        write_checksums(d).unwrap();
        write_checksums(d).unwrap();
        let text = fs::read(d.join(files::CHECKSUMS)).unwrap();
        let lines: Vec<&[u8]> = text.split(|b| *b == b'\n').filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), 4, "{}", String::from_utf8_lossy(&text));
        assert!(lines[0].ends_with(b"  bundle.json"));
        assert!(
            lines[1].ends_with(b"  runs/0000-a/out.json"),
            "Path order: runs/ before runs.txt"
        );
        assert!(lines[2].starts_with(b"\\") && lines[2].ends_with(b"we\\\\ird\\nname"));
        assert!(lines[3].ends_with(b"  runs.txt"));
        let read = read_checksums(d).unwrap();
        assert!(read.bad_lines.is_empty(), "{:?}", read.bad_lines);
        assert_eq!(read.entries.len(), 4);
        assert_eq!(
            read.entries[Path::new("runs/0000-a/we\\ird\nname")],
            crate::digest::sha256_bytes(b"2")
        );
        // sha256sum agrees with the format.
        let out = std::process::Command::new("sha256sum")
            .args(["-c", "--quiet", files::CHECKSUMS])
            .current_dir(d)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    }

    #[test]
    fn lines_leading_outside_are_refused() {
        let h = "0".repeat(64);
        assert!(parse_line(format!("{h}  ../x").as_bytes()).is_err());
        assert!(parse_line(format!("{h}  /etc/passwd").as_bytes()).is_err());
        assert!(
            parse_line(format!("{h}  a/./b").as_bytes()).is_ok(),
            "`.` parts are dropped by Path"
        );
        assert!(parse_line(format!("{h} x").as_bytes()).is_err());
        assert!(parse_line(format!("{}  x", "G".repeat(64)).as_bytes()).is_err());
        assert!(parse_line(format!("{h}  runs/x/run.json").as_bytes()).is_ok());
    }

    #[test]
    fn run_files_that_are_not_regular_are_not_hashed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::write(d.join("stderr.log"), "e").unwrap();
        std::os::unix::fs::symlink("/dev/zero", d.join("out.json")).unwrap();
        let got = hash_run_files(d, &["out.json", "stderr.log", "memory.jsonl"]).unwrap();
        assert_eq!(got.keys().collect::<Vec<_>>(), ["stderr.log"]);
    }
}
