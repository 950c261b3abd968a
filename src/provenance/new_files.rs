//! The untracked files of working-tree.patch as new files, written in-process in the format of
//! `git diff --binary --full-index` of an intent-to-add entry (what `git add -N` in a temporary
//! index, then `git diff`, prints), without starting git: the same bytes for text files, and for
//! binary files a `GIT binary patch` literal (compressed by libgit2) that `git apply` turns back
//! into the same bytes.
//!
//! The files' exact bytes are shown: no attribute, clean filter or end-of-line conversion applies
//! (as `core.autocrlf=false` with attributes read from the empty tree), so `git apply` writes the
//! bytes back. A file is text unless its first 8,000 bytes hold a NUL byte or it is over git's
//! `core.bigFileThreshold` default (512 MiB), as git decides with no attribute.

use std::ffi::OsStr;
use std::io::{self, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use sha2::{Digest, Sha256};

/// Bytes git looks at for a NUL to call content binary (`FIRST_FEW_BYTES`).
const FIRST_FEW_BYTES: usize = 8000;

/// git's default `core.bigFileThreshold`: larger files are diffed as binary.
const BIG_FILE_THRESHOLD: usize = 512 * 1024 * 1024;

/// Writes the untracked `paths` (exact bytes, relative to `root`, in the order given) into `out`
/// as new files; `oid_len` is the length in hex digits of the repository's object ids (40 for
/// SHA-1, 64 for SHA-256), which names the hash of the `index` lines; `filemode` is the
/// repository's `core.filemode`. Each file is read whole, one at a time (a symlink's target is
/// its content, mode `120000`; a file is `100755` when the owner's execute bit is set and
/// `filemode` is true, else `100644`, as git decides for a new file).
///
/// # Errors
/// I/O errors reading a file or writing `out`; libgit2's error encoding a binary file.
pub(super) fn write(
    root: &Path,
    oid_len: usize,
    filemode: bool,
    paths: &[&[u8]],
    out: &mut dyn Write,
) -> io::Result<()> {
    for &path in paths {
        let full = root.join(OsStr::from_bytes(path));
        let meta = std::fs::symlink_metadata(&full)?;
        let (mode, content) = if meta.file_type().is_symlink() {
            ("120000", std::fs::read_link(&full)?.into_os_string().into_vec())
        } else {
            let exec = filemode && meta.permissions().mode() & 0o100 != 0;
            (if exec { "100755" } else { "100644" }, std::fs::read(&full)?)
        };
        write_one(path, mode, &content, oid_len, out)?;
    }
    Ok(())
}

/// One new file: the header, then its lines (text) or a `GIT binary patch` (binary).
fn write_one(path: &[u8], mode: &str, content: &[u8], oid_len: usize, out: &mut dyn Write) -> io::Result<()> {
    let a = quoted("a/", path);
    let b = quoted("b/", path);
    write!(out, "diff --git {a} {b}\nnew file mode {mode}\nindex ")?;
    out.write_all("0".repeat(oid_len).as_bytes())?;
    writeln!(out, "..{}", blob_id(content, oid_len)?)?;
    if content.is_empty() {
        return Ok(());
    }
    let head = &content[..content.len().min(FIRST_FEW_BYTES)];
    if memchr::memchr(0, head).is_some() || content.len() > BIG_FILE_THRESHOLD {
        return write_binary(content, out);
    }
    // git puts a tab after a name holding a space, so that the name's end can be found.
    let tab = if path.contains(&b' ') { "\t" } else { "" };
    let lines = content.split_inclusive(|&c| c == b'\n').count();
    let range = if lines == 1 {
        "+1".to_owned()
    } else {
        format!("+1,{lines}")
    };
    write!(out, "--- /dev/null\n+++ {b}{tab}\n@@ -0,0 {range} @@\n")?;
    for line in content.split_inclusive(|&c| c == b'\n') {
        out.write_all(b"+")?;
        out.write_all(line)?;
    }
    if !content.ends_with(b"\n") {
        out.write_all(b"\n\\ No newline at end of file\n")?;
    }
    Ok(())
}

/// The `GIT binary patch` of a new file holding `content` (a literal, and the empty literal
/// back), as libgit2 encodes it.
fn write_binary(content: &[u8], out: &mut dyn Write) -> io::Result<()> {
    let git =
        |e: git2::Error| io::Error::other(format!("libgit2 cannot encode a binary file: {}", e.message()));
    let mut opts = git2::DiffOptions::new();
    opts.force_binary(true).show_binary(true);
    let mut patch = git2::Patch::from_buffers(&[], None, content, None, Some(&mut opts)).map_err(git)?;
    let mut failed = None;
    let printed = patch.print(&mut |_, _, line| {
        if line.origin() != 'B' {
            return true;
        }
        match out.write_all(line.content()) {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        }
    });
    match (failed, printed) {
        (Some(e), _) => Err(e),
        (None, r) => r.map_err(git),
    }
}

/// The blob id of `content` in the repository's hash: SHA-1 or SHA-256 of `blob <size>\0`
/// followed by the bytes.
fn blob_id(content: &[u8], oid_len: usize) -> io::Result<String> {
    if oid_len == 64 {
        let mut h = Sha256::new();
        h.update(format!("blob {}\0", content.len()).as_bytes());
        h.update(content);
        return Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect());
    }
    git2::Oid::hash_object(git2::ObjectType::Blob, content)
        .map(|id| id.to_string())
        .map_err(|e| io::Error::other(e.message().to_owned()))
}

/// `prefix` and `path` as git prints a name with `core.quotePath=true`: as is, or in double
/// quotes with C escapes when it holds a control character, a double quote, a backslash or a
/// byte over 0x7e.
fn quoted(prefix: &str, path: &[u8]) -> String {
    let plain = |c: u8| (0x20..0x7f).contains(&c) && c != b'"' && c != b'\\';
    if path.iter().all(|&c| plain(c)) {
        return format!("{prefix}{}", String::from_utf8_lossy(path));
    }
    let mut s = format!("\"{prefix}");
    for &c in path {
        match c {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            0x07 => s.push_str("\\a"),
            0x08 => s.push_str("\\b"),
            b'\t' => s.push_str("\\t"),
            b'\n' => s.push_str("\\n"),
            0x0b => s.push_str("\\v"),
            0x0c => s.push_str("\\f"),
            b'\r' => s.push_str("\\r"),
            c if plain(c) => s.push(c as char),
            c => s.push_str(&format!("\\{c:03o}")),
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(root: &Path, index: &Path) -> Command {
        let mut cmd = super::super::git_cli::command(root);
        cmd.env("GIT_INDEX_FILE", index);
        cmd
    }

    /// Text files give the bytes git gives for the same files marked intent-to-add in an empty
    /// index (`git add -N`, `git diff --binary --full-index`); binary files give a patch that
    /// `git apply` turns back into their bytes; names are quoted as git quotes them.
    #[test]
    fn new_files_are_what_git_diff_shows_of_intent_to_add_entries() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let run = |cmd: &mut Command| {
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            out.stdout
        };
        run(super::super::git_cli::command(root).args(["init", "-q"]));
        let files: Vec<(&[u8], Vec<u8>)> = vec![
            (b"empty", Vec::new()),
            (b"no newline", b"last line".to_vec()),
            (b"crlf", b"a\r\nb\r\n".to_vec()),
            (b"esc", b"\x1b[1m\x01\x02\n".to_vec()),
            (b"three", b"a\n\nc\n".to_vec()),
            (b"tab\there", b"q\n".to_vec()),
            (b"quote\"back\\slash", b"q\n".to_vec()),
            (b"del\x7f", b"q\n".to_vec()),
            ("é".as_bytes(), b"q\n".to_vec()),
            (b"not-utf8-\xff", b"q\n".to_vec()),
            (b"dir/sub/deep", b"deep\n".to_vec()),
            (
                b"late-nul",
                [vec![b'a'; FIRST_FEW_BYTES], vec![0, b'\n']].concat(),
            ),
        ];
        for (name, content) in &files {
            let p = root.join(OsStr::from_bytes(name));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, content).unwrap();
        }
        std::fs::write(root.join("exe"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(root.join("exe"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("a target", root.join("link")).unwrap();
        let mut names: Vec<&[u8]> = files.iter().map(|(n, _)| *n).collect();
        names.extend([b"exe".as_slice(), b"link"]);
        names.sort();

        let index = root.join(".git/scratch-index");
        let mut add = git(root, &index);
        add.args(["--literal-pathspecs", "add", "-N", "--"]);
        for n in &names {
            add.arg(OsStr::from_bytes(n));
        }
        run(&mut add);
        let expected =
            run(git(root, &index).args(["diff", "--binary", "--full-index", "--no-renames", "--"]));
        let mut ours = Vec::new();
        write(root, 40, true, &names, &mut ours).unwrap();
        assert_eq!(String::from_utf8_lossy(&ours), String::from_utf8_lossy(&expected));
        assert_eq!(ours, expected);

        // `core.filemode=false`: git records a new executable file as 100644.
        run(super::super::git_cli::command(root).args(["config", "core.filemode", "false"]));
        std::fs::remove_file(&index).unwrap();
        run(&mut add);
        let expected =
            run(git(root, &index).args(["diff", "--binary", "--full-index", "--no-renames", "--"]));
        assert!(
            String::from_utf8_lossy(&expected).contains("diff --git a/exe b/exe\nnew file mode 100644\n")
        );
        let mut ours = Vec::new();
        write(root, 40, false, &names, &mut ours).unwrap();
        assert_eq!(String::from_utf8_lossy(&ours), String::from_utf8_lossy(&expected));
        assert_eq!(ours, expected);

        // Binary files: not git's compressed bytes, but the same file once applied.
        let bin: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(root.join("bin"), &bin).unwrap();
        let mut patch = Vec::new();
        write(root, 40, true, &[b"bin"], &mut patch).unwrap();
        let text = String::from_utf8_lossy(&patch);
        assert!(
            text.starts_with("diff --git a/bin b/bin\nnew file mode 100644\nindex "),
            "{text}"
        );
        assert!(text.contains("GIT binary patch\nliteral 70000\n"), "{text}");
        std::fs::remove_file(root.join("bin")).unwrap();
        std::fs::write(root.join("bin.patch"), &patch).unwrap();
        run(super::super::git_cli::command(root).args(["apply", "bin.patch"]));
        assert_eq!(std::fs::read(root.join("bin")).unwrap(), bin);
    }

    #[test]
    fn sha256_blob_ids_are_those_git_gives() {
        let tmp = tempfile::tempdir().unwrap();
        let init = super::super::git_cli::command(tmp.path())
            .args(["init", "-q", "--object-format=sha256"])
            .output()
            .unwrap();
        assert!(init.status.success());
        let mut out = Vec::new();
        write_one(b"f", "100644", b"q\n", 64, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let id = text
            .lines()
            .nth(2)
            .unwrap()
            .split("..")
            .nth(1)
            .unwrap()
            .to_owned();
        std::fs::write(tmp.path().join("f"), "q\n").unwrap();
        let want = super::super::git_cli::command(tmp.path())
            .args(["hash-object", "f"])
            .output()
            .unwrap();
        assert_eq!(id, String::from_utf8_lossy(&want.stdout).trim());
        assert!(text.contains(&format!("index {}..", "0".repeat(64))));
    }
}
