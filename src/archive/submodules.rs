//! Submodules in a rebuilt tree (`rerun --at-recorded-revision`, `bisect`): `git worktree add`
//! leaves every submodule an empty folder, so each one the tree's index names (a gitlink, mode
//! 160000) is cloned without a checkout from the repository the recorded working tree holds at
//! that path (or, when that is gone, the URL in the tree's `.gitmodules`) and checked out detached
//! at its commit: the one provenance.json recorded as checked out when given, else the gitlink's.
//! Nested submodules are followed `DEPTH` levels down. Nothing is written into the user's
//! repositories (a local clone reads them only). What cannot be checked out is returned as one
//! line each, for the notes and the differences: the run then goes on with that folder empty.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::verify::run_git;
use crate::provenance::git_cli;

/// Levels of submodules inside submodules that are checked out.
const DEPTH: usize = 3;

/// Checks out the submodules of the worktree `tree`, whose recorded counterpart is the working
/// tree `root`; `recorded` gives (path, commit) pairs that take precedence over the gitlinks.
/// Returns a line for each submodule that is not as recorded.
pub fn check_out(root: &Path, tree: &Path, recorded: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    check_out_level(root, tree, recorded, "", DEPTH, &mut out);
    out
}

fn check_out_level(
    root: &Path,
    tree: &Path,
    recorded: &[(String, String)],
    prefix: &str,
    depth: usize,
    out: &mut Vec<String>,
) {
    let links = match gitlinks(tree) {
        Ok(links) => links,
        Err(why) => {
            out.push(format!(
                "submodules of {} not checked out: cannot list them ({why})",
                if prefix.is_empty() { "the tree" } else { prefix }
            ));
            return;
        }
    };
    for (path, gitlink) in links {
        let shown = format!("{prefix}{path}");
        let commit = recorded
            .iter()
            .find(|(p, _)| *p == shown)
            .map_or(gitlink.as_str(), |(_, c)| c.as_str());
        let dest = tree.join(&path);
        match clone_at(root, tree, &path, &dest, commit) {
            Ok(()) if depth > 0 => check_out_level(
                &root.join(&path),
                &dest,
                recorded,
                &format!("{shown}/"),
                depth - 1,
                out,
            ),
            Ok(()) => {}
            Err(why) => out.push(format!(
                "submodule {shown}: not checked out at {commit} ({why}); the rebuilt tree holds it as an empty folder"
            )),
        }
    }
}

/// The gitlinks of the worktree `tree`'s index: (path, commit), from `git ls-files --stage -z`.
///
/// # Errors
/// git's message when it fails.
fn gitlinks(tree: &Path) -> Result<Vec<(String, String)>, String> {
    let out = git_cli::command(tree)
        .args(["ls-files", "--stage", "-z"])
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    Ok(out
        .stdout
        .split(|&b| b == 0)
        .filter_map(|entry| {
            let (meta, path) = entry.split_at(entry.iter().position(|&b| b == b'\t')?);
            let meta = std::str::from_utf8(meta).ok()?;
            let mut words = meta.split(' ');
            (words.next()? == "160000").then_some(())?;
            let commit = words.next()?.to_owned();
            Some((String::from_utf8_lossy(&path[1..]).into_owned(), commit))
        })
        .collect())
}

/// Clones the submodule at `path` into `dest` (an empty folder) without a checkout and checks out
/// `commit` detached. The source: the repository at `root/path` when there is one, else the
/// `.gitmodules` URL of `tree`.
///
/// # Errors
/// Why it could not be done.
fn clone_at(root: &Path, tree: &Path, path: &str, dest: &Path, commit: &str) -> Result<(), String> {
    let local = root.join(path);
    let source = if local.join(".git").exists() {
        local.into_os_string()
    } else {
        url_of(tree, path).ok_or_else(|| {
            format!(
                "{} holds no repository and .gitmodules names no URL for it",
                local.display()
            )
        })?
    };
    run_git(
        git_cli::command(tree)
            .args([
                "-c",
                "protocol.file.allow=always",
                "clone",
                "--quiet",
                "--no-checkout",
            ])
            .arg(&source)
            .arg(dest),
    )
    .map_err(|m| format!("git clone {}: {m}", Path::new(&source).display()))?;
    run_git(git_cli::command(dest).args([
        "-c",
        "advice.detachedHead=false",
        "checkout",
        "--quiet",
        "--detach",
        commit,
    ]))
    .map_err(|m| format!("git checkout: {m}"))
}

/// The URL `.gitmodules` of `tree` gives the submodule at `path`.
fn url_of(tree: &Path, path: &str) -> Option<std::ffi::OsString> {
    let file = tree.join(".gitmodules");
    let out = git_cli::command(tree)
        .arg("config")
        .arg("-f")
        .arg(&file)
        .args(["-z", "--get-regexp", r"^submodule\..*\.path$"])
        .output()
        .ok()?;
    let name = out.stdout.split(|&b| b == 0).find_map(|entry| {
        let text = std::str::from_utf8(entry).ok()?;
        let (key, value) = text.split_once('\n')?;
        (value == path).then(|| key.strip_suffix(".path").map(str::to_owned))?
    })?;
    let out = git_cli::command(tree)
        .arg("config")
        .arg("-f")
        .arg(&file)
        .arg("--get")
        .arg(format!("{name}.url"))
        .output()
        .ok()?;
    let url = out.stdout.strip_suffix(b"\n").unwrap_or(&out.stdout);
    (out.status.success() && !url.is_empty()).then(|| OsStr::from_bytes(url).to_os_string())
}
