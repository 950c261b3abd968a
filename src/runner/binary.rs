//! The running hwr-exp binary (`{hwr-exp}`): its path, version and sha256, recorded in bundle.json
//! (`hwr-exp-path`, `hwr-exp-version`, `hwr-exp-sha256`) so that a bundle says which probe
//! `{hwr-exp}` was (DESIGN 5).
//!
//! Hashing a 100 MB debug binary takes a noticeable fraction of a second, so the sum is kept in
//! a small cache file per binary file under [`super::cache_dir`]`/binaries/`, named by
//! the file's device, inode, size and change time (`st_ctime`, which no user can set back): a
//! binary rebuilt or replaced in place gets a new name and is hashed again.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The running binary, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binary {
    /// Absolute path (`std::env::current_exe`).
    pub path: PathBuf,
    /// `CARGO_PKG_VERSION` of this build.
    pub version: String,
    /// sha256 (hex) of the file; `None` when it could not be read.
    pub sha256: Option<String>,
}

/// The running binary, found and hashed once per process.
pub fn running() -> &'static Binary {
    static ONCE: OnceLock<Binary> = OnceLock::new();
    ONCE.get_or_init(|| {
        let path = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
        Binary {
            sha256: sha256_cached(&path),
            path,
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    })
}

/// sha256 of the file at `path`, from the cache when its identity (device, inode, size, ctime)
/// was hashed before.
fn sha256_cached(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    let key = format!(
        "{:x}-{:x}-{:x}-{}.{:09}",
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.ctime(),
        meta.ctime_nsec()
    );
    let file = super::cache_dir().map(|d| d.join("binaries").join(key));
    if let Some(f) = &file
        && let Ok(text) = std::fs::read_to_string(f)
        && text.trim().len() == 64
        && text.trim().bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Some(text.trim().to_owned());
    }
    let sum = crate::digest::sha256_file(path).ok()?;
    if let Some(f) = file
        && let Some(dir) = f.parent()
        && std::fs::create_dir_all(dir).is_ok()
    {
        // Written under a temporary name and renamed: a reader never sees half a sum.
        let tmp = dir.join(format!(".{}.tmp", std::process::id()));
        if std::fs::write(&tmp, format!("{sum}\n")).is_ok() && std::fs::rename(&tmp, &f).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
    Some(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_binary_is_hashed() {
        let b = running();
        assert!(b.path.is_absolute());
        let sum = b.sha256.clone().expect("readable");
        assert_eq!(sum, crate::digest::sha256_file(&b.path).unwrap());
        assert_eq!(sha256_cached(&b.path), Some(sum), "second time from the cache");
    }
}
