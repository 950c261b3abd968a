//! The repository state as the `git` command-line tool reports it, the primary capture method
//! whenever `git` is on PATH: working-tree.txt is what `git status --short --untracked-files=all`
//! says and working-tree.patch what `git diff HEAD --binary` says (plus untracked files as new
//! files), so that filters, sparse checkouts, index bits, conflicts and repository layouts are
//! decided by git itself (DESIGN section 5).
//!
//! Every git subprocess hwr-exp makes is built by [`command`]: it names the repository explicitly
//! (`git -C <dir>`) and removes the caller's variables that would point git at another
//! repository, index, object store or invocation-wide configuration ([`scrub_environment`]).

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::names::NameBytes;

/// `GIT_*` variables passed on to git subprocesses: the user's choice of configuration files and
/// git's own installation. Every other `GIT_*` variable is removed, among them GIT_DIR,
/// GIT_WORK_TREE, GIT_INDEX_FILE, GIT_OBJECT_DIRECTORY, GIT_ALTERNATE_OBJECT_DIRECTORIES,
/// GIT_CEILING_DIRECTORIES, GIT_COMMON_DIR, GIT_NAMESPACE, GIT_DISCOVERY_ACROSS_FILESYSTEM,
/// GIT_PREFIX, GIT_SHALLOW_FILE, GIT_CONFIG, GIT_CONFIG_PARAMETERS, GIT_CONFIG_COUNT /
/// GIT_CONFIG_KEY_n / GIT_CONFIG_VALUE_n (what an outer `git -c` hands to hooks),
/// GIT_EXTERNAL_DIFF and the pathspec switches.
const KEPT_GIT_VARIABLES: &[&str] = &[
    "GIT_EXEC_PATH",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_ATTR_NOSYSTEM",
];

/// Configuration every git subprocess hwr-exp makes runs with (`git -c KEY=VALUE`, which beats the
/// user's, the system's and the repository's configuration), so that what it records and checks
/// does not depend on whose configuration it meets: the form of `git status` and `git diff` output
/// (context lines, prefixes, colour, quoting, relative paths, rename detection in the status,
/// hunk order), end-of-line conversion (`core.autocrlf`, `core.eol`, `core.safecrlf`: the bytes
/// recorded and checked out are the files' bytes), what `git apply` accepts (`apply.whitespace`),
/// and side effects (no hooks in a worktree `rerun` checks out, no automatic gc or maintenance,
/// no fsmonitor daemon, no recursion into submodules). Global attributes are not read
/// (`core.attributesFile`); the repository's `.gitattributes` and filter drivers are, as git
/// decides content with them. What stays the user's: ignore rules (`core.excludesFile`), which
/// decide what is source. External diff drivers and textconv are turned off by flags of `git diff`
/// (`--no-ext-diff`, `--no-textconv`).
pub const PINNED_CONFIG: &[&str] = &[
    "core.quotePath=true",
    "core.autocrlf=false",
    "core.eol=lf",
    "core.safecrlf=false",
    "core.attributesFile=/dev/null",
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.pager=cat",
    "color.ui=never",
    "color.diff=never",
    "color.status=never",
    "diff.context=3",
    "diff.interHunkContext=0",
    "diff.noprefix=false",
    "diff.mnemonicPrefix=false",
    "diff.relative=false",
    "diff.suppressBlankEmpty=false",
    "diff.orderFile=/dev/null",
    "diff.submodule=short",
    "status.renames=true",
    "status.relativePaths=false",
    "status.branch=false",
    "status.showStash=false",
    "status.submoduleSummary=false",
    "apply.whitespace=nowarn",
    "apply.ignoreWhitespace=no",
    "submodule.recurse=false",
    "gc.auto=0",
    "maintenance.auto=false",
];

/// Adds [`PINNED_CONFIG`] (as `-c` options, before the subcommand) and `LC_ALL=C` (git's messages,
/// which hwr-exp reads, in English) to `cmd`.
fn pin(cmd: &mut Command) -> &mut Command {
    for kv in PINNED_CONFIG {
        cmd.arg("-c").arg(kv);
    }
    cmd.env("LC_ALL", "C")
}

/// Removes from `cmd` every inherited `GIT_*` variable but `KEPT_GIT_VARIABLES` (read from
/// this process's environment), so that git finds the repository from its working directory or
/// `-C` argument alone.
pub fn scrub_environment(cmd: &mut Command) -> &mut Command {
    for (key, _) in std::env::vars_os() {
        let Some(name) = key.to_str() else { continue };
        if name.starts_with("GIT_") && !KEPT_GIT_VARIABLES.contains(&name) {
            cmd.env_remove(&key);
        }
    }
    cmd
}

/// `git -C <dir>` with the environment scrubbed ([`scrub_environment`]), the configuration it
/// depends on pinned ([`PINNED_CONFIG`]) and stdin closed. Callers add the subcommand; they may
/// set variables such as GIT_INDEX_FILE themselves after this call.
pub fn command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    scrub_environment(&mut cmd);
    pin(&mut cmd);
    cmd.arg("-C").arg(dir).stdin(Stdio::null());
    cmd
}

/// `git --git-dir=<git_dir>` with the environment scrubbed ([`scrub_environment`]) and stdin
/// closed, for commands that need no working tree (`read-tree` and `apply --cached` into a
/// temporary index); the working directory is the caller's.
pub fn command_for_git_dir(git_dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    scrub_environment(&mut cmd);
    pin(&mut cmd);
    cmd.arg("--git-dir").arg(git_dir).stdin(Stdio::null());
    cmd
}

/// A git subprocess that could not be run or failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// No `git` executable on PATH.
    #[error("git is not on PATH")]
    NotFound,
    /// git could not be started or its output read.
    #[error("cannot run git {args}: {source}")]
    Spawn {
        /// The arguments after `git -C <dir>`.
        args: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// git exited non-zero.
    #[error("git {args} failed ({status}): {stderr}")]
    Failed {
        /// The arguments after `git -C <dir>`.
        args: String,
        /// Exit status as text.
        status: String,
        /// git's stderr, trimmed.
        stderr: String,
    },
}

/// Runs `git -C dir args...` and returns its output when it exits 0.
///
/// # Errors
/// [`GitError::NotFound`] without git on PATH, [`GitError::Failed`] with git's stderr.
pub(super) fn run(dir: &Path, args: &[&str]) -> Result<Output, GitError> {
    run_cmd(command(dir).args(args), args)
}

fn run_cmd(cmd: &mut Command, args: &[&str]) -> Result<Output, GitError> {
    let out = cmd.output().map_err(|source| {
        if source.kind() == io::ErrorKind::NotFound {
            GitError::NotFound
        } else {
            GitError::Spawn {
                args: args.join(" "),
                source,
            }
        }
    })?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(GitError::Failed {
            args: args.join(" "),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

/// Where git finds the repository holding a folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Location {
    /// git says there is none (`not a git repository`).
    NoRepository,
    /// A repository without a working tree there (bare, or the folder is inside the git folder).
    NoWorkTree {
        /// `git rev-parse --absolute-git-dir`.
        git_dir: PathBuf,
    },
    /// A working tree.
    WorkTree {
        /// `git rev-parse --show-toplevel`.
        root: PathBuf,
        /// `git rev-parse --absolute-git-dir` (a linked worktree's own folder for those).
        git_dir: PathBuf,
    },
}

/// The repository holding `start` as git finds it (`git rev-parse --absolute-git-dir --show-toplevel`): its git folder
/// and working-tree root (`None` for a bare repository); `None` outside a repository or when git
/// fails. Reads every repository git reads (reftable, SHA-256), where libgit2 may not.
pub fn repository_at(start: &Path) -> Option<(PathBuf, Option<PathBuf>)> {
    match locate(start).ok()? {
        Location::WorkTree { root, git_dir } => Some((git_dir, Some(root))),
        Location::NoWorkTree { git_dir } => Some((git_dir, None)),
        Location::NoRepository => None,
    }
}

/// Locates the repository holding `start` (`git rev-parse --absolute-git-dir --show-toplevel`).
///
/// # Errors
/// [`GitError`] when git is missing or refuses the repository (unknown extension, dubious
/// ownership, corruption): anything but "not a git repository".
pub(super) fn locate(start: &Path) -> Result<Location, GitError> {
    // A working tree found once is the same for the rest of the process (the results folder's
    // anchor, the capture before the runs and the one after them ask about the same folder).
    static FOUND: std::sync::Mutex<Vec<(PathBuf, Location)>> = std::sync::Mutex::new(Vec::new());
    let key = std::path::absolute(start).unwrap_or_else(|_| start.to_path_buf());
    let known = FOUND
        .lock()
        .ok()
        .and_then(|k| k.iter().find(|(p, _)| *p == key).map(|(_, l)| l.clone()));
    if let Some(location) = known {
        return Ok(location);
    }
    let location = locate_now(start)?;
    if matches!(location, Location::WorkTree { .. })
        && let Ok(mut k) = FOUND.lock()
    {
        k.push((key, location.clone()));
    }
    Ok(location)
}

/// `locate` without the memory of earlier answers: in-process for a plain repository
/// ([`super::discover`]), else git's.
fn locate_now(start: &Path) -> Result<Location, GitError> {
    if let Some((root, git_dir)) = super::discover::plain_work_tree(start) {
        return Ok(Location::WorkTree { root, git_dir });
    }
    let args = ["rev-parse", "--absolute-git-dir", "--show-toplevel"];
    match run(start, &args) {
        // The paths as bytes: one may end in `\r` or not be UTF-8; one holding a line break
        // makes the answer ambiguous.
        Ok(out) => match path_lines(&out.stdout).as_slice() {
            [git_dir, root] if !root.as_os_str().is_empty() => Ok(Location::WorkTree {
                root: root.clone(),
                git_dir: git_dir.clone(),
            }),
            [git_dir] | [git_dir, _] => Ok(Location::NoWorkTree {
                git_dir: git_dir.clone(),
            }),
            _ => Err(GitError::Spawn {
                args: args.join(" "),
                source: io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the repository's path holds a line break: git's answer cannot be read",
                ),
            }),
        },
        Err(GitError::Failed { stderr, .. }) if stderr.contains("not a git repository") => {
            Ok(Location::NoRepository)
        }
        Err(GitError::Failed { stderr, .. }) if stderr.contains("must be run in a work tree") => {
            let out = run(start, &["rev-parse", "--absolute-git-dir"])?;
            let git_dir = out.stdout.strip_suffix(b"\n").unwrap_or(&out.stdout);
            Ok(Location::NoWorkTree {
                git_dir: PathBuf::from(std::ffi::OsStr::from_bytes(git_dir)),
            })
        }
        Err(e) => Err(e),
    }
}

/// The paths of `git rev-parse`'s output, one a line, as bytes (the last line break removed).
fn path_lines(stdout: &[u8]) -> Vec<PathBuf> {
    let text = stdout.strip_suffix(b"\n").unwrap_or(stdout);
    text.split(|&b| b == b'\n')
        .map(|line| PathBuf::from(std::ffi::OsStr::from_bytes(line)))
        .collect()
}

/// HEAD as git resolves it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Head {
    /// The commit id HEAD peels to.
    pub commit: Option<String>,
    /// Short branch name when HEAD is symbolic (also when unborn).
    pub branch: Option<String>,
    /// HEAD holds a commit id instead of a branch.
    pub detached: bool,
    /// Why there is no commit, when there is none.
    pub reason: Option<String>,
    /// No commits yet on the branch HEAD names.
    pub unborn: bool,
}

/// Resolves HEAD in `root`: one `git rev-parse HEAD^{commit} --symbolic-full-name HEAD` when HEAD
/// is a commit; otherwise `git symbolic-ref -q HEAD` and `git rev-parse -q --verify HEAD` tell an
/// unborn branch from a broken HEAD.
///
/// # Errors
/// [`GitError`] when git cannot be run.
pub(super) fn head(root: &Path) -> Result<Head, GitError> {
    // One git for the common case, HEAD a commit: its id, then its symbolic name (`HEAD` when
    // detached). An unborn or broken HEAD fails it and takes the slower path below.
    if let Ok(out) = run(
        root,
        &["rev-parse", "HEAD^{commit}", "--symbolic-full-name", "HEAD", "--"],
    ) {
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        if let (Some(commit), Some(name)) = (lines.next(), lines.next())
            && commit.len() >= 40
            && commit.bytes().all(|b| b.is_ascii_hexdigit())
            && !name.is_empty()
        {
            let mut head = Head {
                commit: Some(commit.to_owned()),
                ..Head::default()
            };
            match name.strip_prefix("refs/heads/") {
                Some(branch) => head.branch = Some(branch.to_owned()),
                None if name == "HEAD" => head.detached = true,
                // HEAD names a ref outside refs/heads: as `git symbolic-ref` would say it.
                None => head.branch = Some(name.to_owned()),
            }
            return Ok(head);
        }
    }
    head_not_commit(root)
}

/// HEAD in `root` when it does not resolve to a commit: `git symbolic-ref -q HEAD` and
/// `git rev-parse -q --verify HEAD` tell an unborn branch from a broken HEAD.
///
/// # Errors
/// [`GitError`] when git cannot be run.
fn head_not_commit(root: &Path) -> Result<Head, GitError> {
    let mut head = Head::default();
    match run(root, &["symbolic-ref", "-q", "HEAD"]) {
        Ok(out) => {
            let full = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            head.branch = Some(full.strip_prefix("refs/heads/").unwrap_or(&full).to_owned());
        }
        Err(GitError::Failed { .. }) => head.detached = true,
        Err(e) => return Err(e),
    }
    // HEAD^{commit} did not resolve (the one-git path above): unborn, or not a commit.
    let exists = match run(root, &["rev-parse", "-q", "--verify", "HEAD"]) {
        Ok(_) => true,
        Err(GitError::Failed { .. }) => false,
        Err(e) => return Err(e),
    };
    if exists {
        head.reason = Some("HEAD does not resolve to a commit".to_owned());
    } else if let Some(branch) = &head.branch {
        head.unborn = true;
        head.reason = Some(format!("unborn HEAD: no commits yet on {branch}"));
    } else {
        head.reason = Some("cannot resolve HEAD".to_owned());
    }
    Ok(head)
}

/// One entry of `git status`, lettered as `git status --short` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    /// The two letters `XY` (`??` for untracked).
    pub code: String,
    /// Path relative to the root, readable (see [`crate::names`]); a nested repository ends in
    /// `/`.
    pub path: String,
    /// The exact bytes of `path` when they are not UTF-8.
    pub raw: Option<NameBytes>,
    /// The source path of a rename or copy.
    pub orig_path: Option<String>,
    /// The exact bytes of `orig_path` when they are not UTF-8.
    pub orig_raw: Option<NameBytes>,
    /// HEAD's object id of the path (of the source, for a rename), `hH`; all zeros when HEAD has
    /// none; `None` for unmerged and untracked entries.
    pub head_oid: Option<String>,
    /// A submodule (a gitlink on some side) or an unmerged path: its letters do not say what
    /// `git diff HEAD` shows of it.
    pub special: bool,
}

impl Entry {
    /// The path's exact bytes as a relative path.
    pub fn fs_path(&self) -> PathBuf {
        crate::names::path_of(&self.path, self.raw.as_ref())
    }
}

/// `git status --porcelain=v2 -z --branch --untracked-files=all` in `root`: HEAD and the entries
/// in git's order (tracked changes by path, then untracked files by path), as `git status --short`
/// would letter them. Does not write the index (`--no-optional-locks`). One git process gives
/// HEAD's commit and branch (`# branch.oid`, `# branch.head`; no ahead/behind count); only when
/// HEAD is no commit (unborn, or a name status does not print) are [`head`]'s processes run.
/// Rename detection and submodule handling follow the user's configuration, as `git status` in
/// the user's shell would. With `ignored`, `--ignored=matching` also lists the ignored paths that
/// match a pattern (entries `!!`; an ignored folder once, as `path/`, its contents not looked at).
///
/// # Errors
/// [`GitError`] when git fails; `InvalidData` inside [`GitError::Spawn`] for unparsable output.
pub(super) fn status(root: &Path, ignored: bool) -> Result<(Head, Vec<Entry>), GitError> {
    let args = [
        "--no-optional-locks",
        "-c",
        "status.showStash=false",
        "-c",
        "color.status=false",
        "status",
        "--porcelain=v2",
        "-z",
        "--branch",
        "--no-ahead-behind",
        "--untracked-files=all",
        if ignored {
            "--ignored=matching"
        } else {
            "--ignored=no"
        },
    ];
    let out = run(root, &args)?;
    let (head, entries) = parse_status(&out.stdout).map_err(|message| GitError::Spawn {
        args: args.join(" "),
        source: io::Error::new(io::ErrorKind::InvalidData, message),
    })?;
    let head = match head {
        Some(head) => head,
        // No commit yet (or HEAD names none): status diffed against the empty tree.
        None if out.stdout.starts_with(b"# branch.oid (initial)\0") => head_not_commit(root)?,
        None => self::head(root)?,
    };
    Ok((head, entries))
}

/// Parses `git status --porcelain=v2 -z --branch`: the `# branch.oid` and `# branch.head`
/// headers (a [`Head`] when HEAD is a commit on a branch or detached; `None` otherwise), then per
/// entry `1 XY SUB MODES OIDS PATH`, `2 XY SUB MODES OIDS SCORE PATH\0ORIG`, `u XY SUB ... PATH`
/// or `? PATH`. The letters are those of `git status --short`: `.` is a blank, and a submodule's
/// working-tree letter is `M` for new commits, `m` for modified content, `?` for untracked content.
fn parse_status(bytes: &[u8]) -> Result<(Option<Head>, Vec<Entry>), String> {
    let mut fields = bytes.split(|&b| b == 0).filter(|f| !f.is_empty());
    let mut entries = Vec::new();
    let (mut oid, mut branch) = (None, None);
    let bad = |field: &[u8]| format!("unexpected git status entry {:?}", String::from_utf8_lossy(field));
    while let Some(field) = fields.next() {
        if let Some(header) = field.strip_prefix(b"# ") {
            let header = String::from_utf8_lossy(header);
            if let Some(v) = header.strip_prefix("branch.oid ") {
                oid = Some(v.to_owned());
            } else if let Some(v) = header.strip_prefix("branch.head ") {
                branch = Some(v.to_owned());
            }
            continue;
        }
        // Words before the path: `1` 8, `2` 9, `u` 10, `?` 1.
        let words = match field.first() {
            Some(b'1') => 8,
            Some(b'2') => 9,
            Some(b'u') => 10,
            Some(b'?' | b'!') => 1,
            _ => return Err(bad(field)),
        };
        let parts: Vec<&[u8]> = field.splitn(words + 1, |&b| b == b' ').collect();
        if parts.len() != words + 1 || parts[words].is_empty() {
            return Err(bad(field));
        }
        let (path, raw) = crate::names::split(parts[words]);
        if words == 1 {
            entries.push(Entry {
                code: if field[0] == b'!' { "!!" } else { "??" }.to_owned(),
                path,
                raw,
                orig_path: None,
                orig_raw: None,
                head_oid: None,
                special: false,
            });
            continue;
        }
        let (xy, sub) = (parts[1], parts[2]);
        if xy.len() != 2 || sub.len() != 4 {
            return Err(bad(field));
        }
        let blank = |c: u8| if c == b'.' { ' ' } else { c as char };
        let mut y = blank(xy[1]);
        if sub[0] == b'S' && y != ' ' {
            y = match (sub[1], sub[2], sub[3]) {
                (b'C', _, _) => 'M',
                (_, b'M', _) => 'm',
                (_, _, b'U') => '?',
                _ => y,
            };
        }
        let (orig_path, orig_raw) = if words == 9 {
            let orig = fields
                .next()
                .ok_or_else(|| format!("git status: rename of {path} without its source"))?;
            let (orig, orig_raw) = crate::names::split(orig);
            (Some(orig), orig_raw)
        } else {
            (None, None)
        };
        // `hH` is word 6 (counting from 0) of `1` and `2` entries.
        let head_oid = (words != 10).then(|| String::from_utf8_lossy(parts[6]).into_owned());
        entries.push(Entry {
            code: format!("{}{y}", blank(xy[0])),
            path,
            raw,
            orig_path,
            orig_raw,
            head_oid,
            special: sub[0] == b'S' || words == 10,
        });
    }
    // v2 prints the unmerged entries after the others; `--short` keeps all tracked entries in
    // one path order (git's byte order), ahead of the untracked ones.
    let tracked = entries.iter().take_while(|e| e.code != "??").count();
    entries[..tracked].sort_by(|a, b| {
        crate::names::bytes_of(&a.path, a.raw.as_ref()).cmp(crate::names::bytes_of(&b.path, b.raw.as_ref()))
    });
    let head = match (oid, branch) {
        (Some(oid), Some(branch))
            if oid.len() >= 40 && oid.bytes().all(|b| b.is_ascii_hexdigit()) && branch != "(null)" =>
        {
            Some(Head {
                commit: Some(oid),
                detached: branch == "(detached)",
                branch: (branch != "(detached)").then_some(branch),
                ..Head::default()
            })
        }
        _ => None,
    };
    Ok((head, entries))
}

/// Options of every `git diff` hwr-exp runs: a patch `git apply` takes whatever the user's
/// configuration says about prefixes, colour, external diff drivers, textconv, relative paths and
/// blank context lines. Renames are off (a rename is a deletion plus a new file) and submodules
/// are left out (DESIGN section 5: listed in provenance.json, not diffed into).
const DIFF_OPTIONS: &[&str] = &[
    "--no-optional-locks",
    "-c",
    "diff.noprefix=false",
    "-c",
    "diff.mnemonicPrefix=false",
    "-c",
    "diff.relative=false",
    "-c",
    "diff.suppressBlankEmpty=false",
    "-c",
    "core.quotePath=true",
    "diff",
    "--unified=3",
    "--inter-hunk-context=0",
    "--binary",
    "--full-index",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--no-renames",
    "--ignore-submodules=all",
    "--src-prefix=a/",
    "--dst-prefix=b/",
];

/// Most bytes of paths given to one `git diff` on its command line ([`diff_tracked`] and
/// [`diff_raw`] run several diffs when they are more; the kernel's limit is 2 MiB for all arguments).
const PATHS_PER_COMMAND_BYTES: usize = 256 * 1024;

/// `git diff <base> --binary` in `root`: the working tree against `base` (HEAD, or the empty
/// tree for an unborn HEAD) through the index, or with no `base` the working tree against the
/// index, as [`DIFF_OPTIONS`] fix it, written by git straight into `out` (appended at its
/// offset). With `paths`, only those (literal paths, relative to the root, in git's order: the
/// output is the same bytes as the whole diff restricted to them), in as many runs as the command
/// line needs; an empty list writes nothing.
///
/// # Errors
/// [`GitError`] when git fails or `out` cannot be handed to it.
pub(super) fn diff_tracked(
    root: &Path,
    base: Option<&str>,
    paths: Option<&[PathBuf]>,
    out: &File,
) -> Result<(), GitError> {
    let Some(paths) = paths else {
        let mut args: Vec<&str> = DIFF_OPTIONS.to_vec();
        args.extend(base);
        args.push("--");
        return run_into(command(root).args(&args), &args, out);
    };
    let mut args: Vec<&str> = vec!["--literal-pathspecs"];
    args.extend(DIFF_OPTIONS);
    args.extend(base);
    args.push("--");
    for chunk in chunks(paths) {
        run_into(command(root).args(few(chunk)).args(&args).args(chunk), &args, out)?;
    }
    Ok(())
}

/// For a command limited to `paths`: git's index preloading off when they are fewer than one of
/// its threads takes on (500 entries), as its threads would then cost more than the `lstat`s
/// they share (each thread is started whatever the pathspec). The output does not change.
fn few(paths: &[PathBuf]) -> &'static [&'static str] {
    if paths.len() < 500 {
        &["-c", "core.preloadIndex=false"]
    } else {
        &[]
    }
}

/// `paths` cut into runs of at most [`PATHS_PER_COMMAND_BYTES`] (at least one path each).
fn chunks(paths: &[PathBuf]) -> impl Iterator<Item = &[PathBuf]> {
    let mut rest = paths;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = 0;
        let take = rest
            .iter()
            .take_while(|p| {
                bytes += p.as_os_str().len() + 1;
                bytes <= PATHS_PER_COMMAND_BYTES
            })
            .count()
            .max(1);
        let (chunk, next) = rest.split_at(take);
        rest = next;
        Some(chunk)
    })
}

/// Runs `cmd` with its stdout written into `out` (at its offset); stderr kept for the error.
fn run_into(cmd: &mut Command, args: &[&str], out: &File) -> Result<(), GitError> {
    let stdout = out.try_clone().map_err(|source| GitError::Spawn {
        args: "(patch file)".to_owned(),
        source,
    })?;
    run_cmd(cmd.stdout(stdout), args).map(|_| ())
}

/// One entry of `git diff --raw -z`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RawChange {
    /// Path relative to the root, readable.
    pub path: String,
    /// The exact bytes of `path` when they are not UTF-8.
    pub raw: Option<NameBytes>,
    /// The status letter (`M`, `D`, `A`, `T`; renames are off).
    pub change: String,
    /// The blob id on the `base` side (all zeros when `base` has none).
    pub old_oid: String,
}

/// The changes `git diff <base> --raw -z` shows of the literal `paths` (relative to the root; no
/// content is diffed), in git's order, in as many runs as the command line needs; an empty list
/// runs no git.
///
/// # Errors
/// [`GitError`] when git fails; `InvalidData` inside [`GitError::Spawn`] for unparsable output.
pub(super) fn diff_raw(root: &Path, base: &str, paths: &[PathBuf]) -> Result<Vec<RawChange>, GitError> {
    let args = [
        "--literal-pathspecs",
        "--no-optional-locks",
        "-c",
        "core.quotePath=true",
        "diff",
        "--raw",
        "-z",
        "--no-abbrev",
        "--no-ext-diff",
        "--no-textconv",
        "--no-renames",
        "--ignore-submodules=all",
        base,
        "--",
    ];
    let mut changes = Vec::new();
    for chunk in chunks(paths) {
        let out = run_cmd(command(root).args(few(chunk)).args(args).args(chunk), &args)?;
        changes.extend(parse_raw(&out.stdout).map_err(|message| GitError::Spawn {
            args: args.join(" "),
            source: io::Error::new(io::ErrorKind::InvalidData, message),
        })?);
    }
    Ok(changes)
}

/// Parses `git diff --raw -z`: `:MODE MODE OID OID X\0PATH\0` per entry.
fn parse_raw(bytes: &[u8]) -> Result<Vec<RawChange>, String> {
    let mut fields = bytes.split(|&b| b == 0).filter(|f| !f.is_empty());
    let mut out = Vec::new();
    while let Some(meta) = fields.next() {
        let meta = String::from_utf8_lossy(meta);
        let words: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
        let [_, _, old_oid, _, status] = words[..] else {
            return Err(format!("unexpected git diff --raw entry {meta:?}"));
        };
        let path = fields
            .next()
            .ok_or_else(|| format!("git diff --raw: entry {meta:?} without a path"))?;
        let (path, raw) = crate::names::split(path);
        out.push(RawChange {
            path,
            raw,
            change: status.chars().take(1).collect(),
            old_oid: old_oid.to_owned(),
        });
    }
    Ok(out)
}

/// The sizes of the objects `oids` (`git cat-file --batch-check`; an id of zeros, or a missing
/// object, gives `None`), in the same order. Reads no object's content.
///
/// # Errors
/// [`GitError`] when git cannot be run or fails.
pub(super) fn blob_sizes<'a>(
    root: &Path,
    oids: impl Iterator<Item = &'a str>,
) -> Result<Vec<Option<u64>>, GitError> {
    let oids: Vec<&str> = oids.collect();
    let asked: Vec<&str> = oids
        .iter()
        .copied()
        .filter(|o| !o.bytes().all(|b| b == b'0'))
        .collect();
    let mut sizes = std::collections::HashMap::new();
    if !asked.is_empty() {
        let args = ["cat-file", "--batch-check=%(objectname) %(objectsize)"];
        let spawn_err = |source: io::Error| GitError::Spawn {
            args: args.join(" "),
            source,
        };
        let mut child = command(root)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_err)?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let input: Vec<u8> = asked
            .iter()
            .flat_map(|o| [o.as_bytes(), b"\n"])
            .flatten()
            .copied()
            .collect();
        // Fed from a thread: git answers line by line and would block on a full stdout pipe.
        let feeder = std::thread::spawn(move || stdin.write_all(&input));
        let out = child.wait_with_output().map_err(spawn_err)?;
        let _ = feeder.join();
        if !out.status.success() {
            return Err(GitError::Failed {
                args: args.join(" "),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some((oid, size)) = line.split_once(' ')
                && let Ok(n) = size.parse::<u64>()
            {
                sizes.insert(oid.to_owned(), n);
            }
        }
    }
    Ok(oids.iter().map(|o| sizes.get(*o).copied()).collect())
}

/// The empty tree's id in a SHA-1 repository.
const EMPTY_TREE_SHA1: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
/// The empty tree's id in a SHA-256 repository.
const EMPTY_TREE_SHA256: &str = "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321";

/// The empty tree's id in the repository's hash (`git hash-object -t tree /dev/null`), the base
/// of the patch for an unborn HEAD. Known from `head` (a commit id, when there is one: its length
/// names the object format), else asked once per repository and process.
///
/// # Errors
/// [`GitError`] when git fails.
pub(super) fn empty_tree(root: &Path, head: Option<&str>) -> Result<String, GitError> {
    // The id is a constant of the object format, which HEAD's id shows by its length.
    match head.map(str::len) {
        Some(40) => return Ok(EMPTY_TREE_SHA1.to_owned()),
        Some(64) => return Ok(EMPTY_TREE_SHA256.to_owned()),
        _ => {}
    }
    static KNOWN: std::sync::Mutex<Vec<(std::path::PathBuf, String)>> = std::sync::Mutex::new(Vec::new());
    let known =
        |k: &Vec<(std::path::PathBuf, String)>| k.iter().find(|(r, _)| r == root).map(|(_, id)| id.clone());
    if let Some(id) = KNOWN.lock().ok().as_deref().and_then(known) {
        return Ok(id);
    }
    let out = run(root, &["hash-object", "-t", "tree", "/dev/null"])?;
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if let Ok(mut k) = KNOWN.lock() {
        k.push((root.to_path_buf(), id.clone()));
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provenance::quiet::tests::git;

    /// Where git is asked (a linked worktree is no plain repository), its answer is read as
    /// bytes: a path ending in a carriage return or not UTF-8 is the path; one holding a line
    /// break cannot be read and says so (it was cut at the line break).
    #[test]
    fn git_s_location_is_read_as_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        std::fs::create_dir(&root).unwrap();
        git(&root, &["init", "-q", "-b", "main"]);
        git(&root, &["commit", "-q", "--allow-empty", "-m", "c"]);
        for (i, name) in [&b"cr\r"[..], b"not-utf8-\xff"].iter().enumerate() {
            let tree = tmp.path().join(std::ffi::OsStr::from_bytes(name));
            let out = command(&root)
                .args(["worktree", "add", "-q", "-b", &format!("b{i}")])
                .arg(&tree)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            match locate_now(&tree).unwrap() {
                Location::WorkTree { root, git_dir } => {
                    assert_eq!(root, tree);
                    let said = command(&tree)
                        .args(["rev-parse", "--absolute-git-dir"])
                        .output()
                        .unwrap();
                    let said = said.stdout.strip_suffix(b"\n").unwrap();
                    assert_eq!(git_dir.as_os_str().as_bytes(), said);
                }
                other => panic!("{other:?}"),
            }
        }
        let tree = tmp.path().join("line\nbreak");
        git(
            &root,
            &["worktree", "add", "-q", "-b", "b9", tree.to_str().unwrap()],
        );
        assert!(matches!(locate_now(&tree), Err(GitError::Spawn { .. })));
    }

    #[test]
    fn status_parsing_keeps_head_rename_sources_letters_and_order() {
        let oid = "a".repeat(40);
        let z = "0".repeat(40);
        let raw = format!(
            "# branch.oid {oid}\0# branch.head main\0# branch.upstream origin/main\0\
             2 R. N... 100644 100644 100644 {oid} {oid} R100 new.txt\0old.txt\0\
             1 .M N... 100644 100644 100644 {oid} {oid} a b.txt\0\
             1 A. N... 000000 100644 100644 {z} {oid} added\0\
             1 .M SC.. 160000 160000 160000 {oid} {oid} sub1\0\
             1 .M S.MU 160000 160000 160000 {oid} {oid} sub2\0\
             1 .M S..U 160000 160000 160000 {oid} {oid} sub3\0\
             u UU N... 100644 100644 100644 100644 {oid} {oid} {oid} both\0\
             ? z.txt\0? vendor/lib/\0"
        );
        let (head, e) = parse_status(raw.as_bytes()).unwrap();
        let head = head.unwrap();
        assert_eq!(head.commit.as_deref(), Some(oid.as_str()));
        assert_eq!((head.branch.as_deref(), head.detached), (Some("main"), false));
        let codes: Vec<(&str, &str)> = e.iter().map(|e| (e.code.as_str(), e.path.as_str())).collect();
        assert_eq!(
            codes,
            [
                (" M", "a b.txt"),
                ("A ", "added"),
                ("UU", "both"),
                ("R ", "new.txt"),
                (" M", "sub1"),
                (" m", "sub2"),
                (" ?", "sub3"),
                ("??", "z.txt"),
                ("??", "vendor/lib/")
            ]
        );
        assert_eq!(e[3].orig_path.as_deref(), Some("old.txt"));
        let detached = format!("# branch.oid {oid}\0# branch.head (detached)\0");
        let head = parse_status(detached.as_bytes()).unwrap().0.unwrap();
        assert_eq!((head.branch, head.detached), (None, true));
        let unborn = b"# branch.oid (initial)\0# branch.head main\0? f\0";
        assert_eq!(parse_status(unborn).unwrap().0, None);
        assert!(parse_status(b"garbage\0").is_err());
        assert!(
            parse_status(format!("2 R. N... 1 1 1 {oid} {oid} R100 new-without-old\0").as_bytes()).is_err()
        );
    }

    #[test]
    fn raw_diff_parsing_keeps_paths_letters_and_old_ids() {
        let old = "a".repeat(40);
        let zero = "0".repeat(40);
        let raw =
            format!(":100644 100644 {old} {zero} M\0big file.bin\0:000000 100644 {zero} {zero} A\0new\0");
        let e = parse_raw(raw.as_bytes()).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].path.as_str(), e[0].change.as_str(), e[0].old_oid.as_str()),
            ("big file.bin", "M", old.as_str())
        );
        assert_eq!((e[1].path.as_str(), e[1].change.as_str()), ("new", "A"));
        assert!(parse_raw(b":100644 M\0x\0").is_err());
        assert!(parse_raw(format!(":100644 100644 {old} {zero} M\0").as_bytes()).is_err());
    }
}
