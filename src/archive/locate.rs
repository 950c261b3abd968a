//! Bundles by shorter names: what `report`, `verify`, `resume`, `rerun` and `compare` accept
//! where a bundle folder is asked for.
//!
//! - a bundle folder (it holds a bundle.json): that bundle;
//! - an experiment folder (`results/leak-demo`) or a results folder (`results`): the newest bundle
//!   in it (one or two levels down);
//! - `latest`: the newest bundle under the default results folder (any experiment);
//! - any of the last two followed by `~N`: the N-th bundle before the newest (`latest~1`, the one
//!   before; `results/leak-demo~2`).
//!
//! A path that exists is always taken as a path: a folder named `latest` is a folder. "Newest" is
//! the latest `created` timestamp in bundle.json (the bundle's name breaks ties: it starts with the
//! same timestamp). A bundle whose bundle.json cannot be read is passed over. When the name was a
//! shorter one, [`Located::note`] says which bundle it stands for, for stderr.

use std::path::{Path, PathBuf};

use super::ArchiveError;
use crate::bundle::files;

/// The word that stands for the newest bundle under the results folder.
pub const LATEST: &str = "latest";

/// The bundle a command-line name stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The bundle folder.
    pub bundle: PathBuf,
    /// `results/leak-demo: its newest bundle, results/leak-demo/20261201T...`, when the name was
    /// not the bundle folder itself.
    pub note: Option<String>,
}

/// The bundle `name` stands for (see the module documentation); `results_dir` is the default
/// results folder, where `latest` looks.
///
/// # Errors
/// [`ArchiveError::BadPath`] naming `name` when it is none of the accepted forms, or a folder
/// with no bundle in it, or `~N` goes back past the oldest bundle.
pub fn locate(name: &Path, results_dir: &Path) -> Result<Located, ArchiveError> {
    let bad = |message: String| ArchiveError::BadPath {
        path: name.to_path_buf(),
        message,
    };
    // Anything named bundle.json makes `name` the bundle: a link, FIFO or folder there is for
    // the bundle reader to name, not a reason to look for bundles below it.
    if name.join(files::BUNDLE).symlink_metadata().is_ok() || (name.exists() && !name.is_dir()) {
        return Ok(Located {
            bundle: name.to_path_buf(),
            note: None,
        });
    }
    let (base, back) = split_back(name);
    let folder = if name.is_dir() {
        name.to_path_buf()
    } else if base == Path::new(LATEST) {
        results_dir.to_path_buf()
    } else if back.is_some() && base.is_dir() {
        base.to_path_buf()
    } else {
        // Not a shorter name: the caller's bundle check says what is wrong with it.
        return Ok(Located {
            bundle: name.to_path_buf(),
            note: None,
        });
    };
    if !folder.is_dir() {
        return Err(bad(format!(
            "no results folder {} to find the newest bundle in",
            folder.display()
        )));
    }
    let mut bundles = bundles_in(&folder);
    if bundles.is_empty() {
        return Err(bad(format!(
            "not a bundle folder (no {}), and no bundle in it or in its folders",
            files::BUNDLE
        )));
    }
    bundles.sort();
    let back = back.unwrap_or(0);
    let Some(index) = bundles.len().checked_sub(back + 1) else {
        return Err(bad(format!(
            "only {} bundle(s) in {}; ~{back} goes back past the oldest",
            bundles.len(),
            folder.display()
        )));
    };
    let (_, bundle) = bundles.swap_remove(index);
    let which = match back {
        0 => "its newest bundle".to_string(),
        1 => "the bundle before its newest".to_string(),
        n => format!("{n} bundles before its newest"),
    };
    let note = format!("{}: {which}, {}", name.display(), bundle.display());
    Ok(Located {
        bundle,
        note: Some(note),
    })
}

/// `name` without a trailing `~N`, and N (`latest~2` -> `latest`, 2). A bare `~` or one not
/// followed by digits is part of the name.
fn split_back(name: &Path) -> (&Path, Option<usize>) {
    let Some(text) = name.to_str() else {
        return (name, None);
    };
    match text.rsplit_once('~') {
        Some((base, n)) if !base.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            match n.parse() {
                Ok(n) => (Path::new(base), Some(n)),
                Err(_) => (name, None),
            }
        }
        _ => (name, None),
    }
}

/// The bundles one or two levels below `folder` (an experiment folder or a results folder), each
/// with its `created` timestamp and name as the sort key; hidden folders (a bundle being set up)
/// and unreadable bundle.json files are passed over.
fn bundles_in(folder: &Path) -> Vec<((String, PathBuf), PathBuf)> {
    let mut found = Vec::new();
    for child in subdirs(folder) {
        if is_bundle(&child) {
            found.push(child);
        } else {
            found.extend(subdirs(&child).into_iter().filter(|g| is_bundle(g)));
        }
    }
    found
        .into_iter()
        .filter_map(|b| {
            let created = created(&b)?;
            let name = b.file_name().map(PathBuf::from).unwrap_or_default();
            Some(((created, name), b))
        })
        .collect()
}

/// Whether `folder` holds a bundle.json that is a regular file (not through a link).
fn is_bundle(folder: &Path) -> bool {
    folder
        .join(files::BUNDLE)
        .symlink_metadata()
        .is_ok_and(|m| m.file_type().is_file())
}

/// The most of a bundle.json read to find its `created`: far more than hwr-exp writes.
const BUNDLE_JSON_LIMIT: u64 = 16 << 20;

/// `created` of the bundle.json in `bundle` (RFC 3339 UTC with milliseconds: sorts as text),
/// read as every bundle file is (no link followed, a regular file only, at most
/// [`BUNDLE_JSON_LIMIT`] bytes).
fn created(bundle: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = Vec::new();
    crate::bundle::contained::open_in(bundle, Path::new(files::BUNDLE))
        .ok()?
        .take(BUNDLE_JSON_LIMIT)
        .read_to_end(&mut text)
        .ok()?;
    let value: serde_json::Value = serde_json::from_slice(&text).ok()?;
    value.get("created")?.as_str().map(str::to_owned)
}

/// The folders directly in `dir` whose names do not start with `.`.
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(results: &Path, experiment: &str, name: &str, created: &str) -> PathBuf {
        let dir = results.join(experiment).join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(files::BUNDLE), format!("{{\"created\": \"{created}\"}}")).unwrap();
        dir
    }

    #[test]
    fn shorter_names_stand_for_the_newest_bundles() {
        let tmp = tempfile::tempdir().unwrap();
        let results = tmp.path().join("results");
        let a1 = bundle(&results, "a", "20261201T100000Z-0001", "2026-12-01T10:00:00.000Z");
        let a2 = bundle(&results, "a", "20261201T110000Z-0002", "2026-12-01T11:00:00.000Z");
        let b1 = bundle(&results, "b", "20261201T103000Z-0003", "2026-12-01T10:30:00.000Z");
        std::fs::create_dir_all(results.join("a/.staging-x")).unwrap();
        let at = |name: &Path| locate(name, &results).unwrap().bundle;
        assert_eq!(at(&a1), a1);
        assert_eq!(locate(&a1, &results).unwrap().note, None);
        assert_eq!(at(&results.join("a")), a2);
        assert_eq!(at(&results.join("a~1")), a1);
        assert_eq!(at(&results.join("b")), b1);
        assert_eq!(at(&results), a2);
        assert_eq!(at(Path::new("latest")), a2);
        assert_eq!(at(Path::new("latest~1")), b1);
        assert_eq!(at(Path::new("latest~2")), a1);
        assert!(locate(Path::new("latest~3"), &results).is_err());
        let note = locate(&results.join("a"), &results).unwrap().note.unwrap();
        assert!(
            note.contains("its newest bundle") && note.contains("20261201T110000Z-0002"),
            "{note}"
        );
        // A folder with no bundle says so; a name that is nothing passes through.
        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(locate(&empty, &results).is_err());
        let nothing = tmp.path().join("nothing");
        assert_eq!(at(&nothing), nothing);
        assert!(locate(Path::new("latest"), &tmp.path().join("none")).is_err());
    }

    /// A bundle.json that is a link, FIFO or folder makes its folder the bundle (for the reader
    /// to name what it is), and is passed over when looking for the newest: a link is not
    /// followed (to a huge file outside, it was read whole), a FIFO not waited on (the breaking
    /// pass of 2026-12-04).
    #[test]
    fn a_bundle_json_that_is_no_regular_file_is_not_followed_or_read() {
        let tmp = tempfile::tempdir().unwrap();
        let results = tmp.path().join("results");
        let good = bundle(&results, "a", "20261201T100000Z-0001", "2026-12-01T10:00:00.000Z");
        let outside = tmp.path().join("outside.json");
        std::fs::write(&outside, "{\"created\": \"2026-12-09T00:00:00.000Z\"}").unwrap();
        let linked = results.join("a/20261201T120000Z-0002");
        std::fs::create_dir_all(&linked).unwrap();
        std::os::unix::fs::symlink(&outside, linked.join(files::BUNDLE)).unwrap();
        let fifo = results.join("a/20261201T130000Z-0003");
        std::fs::create_dir_all(&fifo).unwrap();
        crate::bundle::contained::testing::fifo(&fifo.join(files::BUNDLE));
        let folder = results.join("a/20261201T140000Z-0004");
        std::fs::create_dir_all(folder.join(files::BUNDLE)).unwrap();
        let r = results.clone();
        let newest = crate::bundle::contained::testing::returns(
            "finding the newest bundle past a FIFO bundle.json",
            move || {
                locate(&r.join("a"), &r)
                    .map(|l| l.bundle)
                    .map_err(|e| e.to_string())
            },
        );
        assert_eq!(newest.unwrap(), good, "the link, FIFO and folder are passed over");
        for odd in [&linked, &fifo, &folder] {
            assert_eq!(&locate(odd, &results).unwrap().bundle, odd, "{}", odd.display());
        }
    }
}
