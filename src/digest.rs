//! SHA-256 digests as lowercase hex, shared by the bundle writer and reader, provenance capture and
//! the archive commands. A leaf: imports no other module of the crate.

use std::io::{self, Read};
use std::path::Path;

use sha2::{Digest, Sha256};

/// SHA-256 of `bytes` as 64 lowercase hex digits.
pub fn sha256_bytes(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// SHA-256 of a file's bytes as 64 lowercase hex digits, read in 64 KiB blocks (never loaded whole).
///
/// # Errors
/// I/O errors opening or reading the file.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    sha256_reader(std::fs::File::open(path)?)
}

/// SHA-256 of everything `reader` yields, as 64 lowercase hex digits, read in 64 KiB blocks.
///
/// # Errors
/// Read errors.
pub fn sha256_reader(mut reader: impl Read) -> io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

/// A writer that passes bytes on to `inner` and hashes what was written ([`Sha256Writer::finish`]).
pub struct Sha256Writer<W> {
    inner: W,
    hasher: Sha256,
}

impl<W: io::Write> Sha256Writer<W> {
    /// Wraps `inner`.
    pub fn new(inner: W) -> Self {
        Sha256Writer {
            inner,
            hasher: Sha256::new(),
        }
    }

    /// The SHA-256 of every byte written, as 64 lowercase hex digits.
    pub fn finish(self) -> String {
        hex(&self.hasher.finalize())
    }
}

impl<W: io::Write> io::Write for Sha256Writer<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digests() {
        assert_eq!(
            sha256_bytes(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"abc").unwrap();
        assert_eq!(sha256_file(&p).unwrap(), sha256_bytes(b"abc"));
    }
}
