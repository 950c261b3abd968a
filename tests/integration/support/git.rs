//! Temporary git repositories, and the `git` CLI run away from the user's and the system's git
//! configuration so that no `~/.gitconfig` (excludes, hooks, signing, default branch) changes what
//! a test sees.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Author and committer of every commit the tests make.
const NAME: &str = "hwr-exp test";
/// E-mail of [`NAME`].
const EMAIL: &str = "test@hwr-exp.invalid";
/// Date of every commit (2023-11-14T22:13:20Z): commit ids depend only on content and parents.
const DATE: &str = "@1700000000 +0000";

/// Variables that would point git elsewhere when the suite itself runs inside git (a hook) or
/// under `git -c`: removed from every isolated command.
const INHERITED_GIT_VARS: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CEILING_DIRECTORIES",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
];

/// The empty home folder every isolated command gets as `HOME` (and `HOME/.config` as
/// `XDG_CONFIG_HOME`): `$CARGO_TARGET_TMPDIR/home`, made on first use and shared by the tests,
/// which only read it.
pub fn sandbox_home() -> &'static Path {
    static HOME: OnceLock<PathBuf> = OnceLock::new();
    HOME.get_or_init(|| {
        let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("home");
        std::fs::create_dir_all(home.join(".config"))
            .unwrap_or_else(|e| panic!("creating {}: {e}", home.display()));
        home
    })
}

/// Isolates `cmd` (a `git`, or an `hwr-exp` that runs git and libgit2) from the user's and the
/// system's git configuration: `GIT_CONFIG_NOSYSTEM=1`, `GIT_CONFIG_GLOBAL=/dev/null`, `HOME` and
/// `XDG_CONFIG_HOME` in [`sandbox_home`], a fixed author and committer (name, e-mail, date), and
/// none of the inherited variables that redirect git ([`INHERITED_GIT_VARS`]).
pub fn isolate_git(cmd: &mut Command) -> &mut Command {
    let home = sandbox_home();
    for var in INHERITED_GIT_VARS {
        cmd.env_remove(var);
    }
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("GIT_AUTHOR_NAME", NAME)
        .env("GIT_AUTHOR_EMAIL", EMAIL)
        .env("GIT_AUTHOR_DATE", DATE)
        .env("GIT_COMMITTER_NAME", NAME)
        .env("GIT_COMMITTER_EMAIL", EMAIL)
        .env("GIT_COMMITTER_DATE", DATE)
}

/// Runs `git ARGS` in `dir`, isolated ([`isolate_git`]) and with `LC_ALL=C`; returns its stdout.
///
/// Panics with git's stderr when git cannot start or exits non-zero.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new("git");
    isolate_git(cmd.args(args).current_dir(dir).env("LC_ALL", "C"));
    let out = cmd.output().expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("git prints UTF-8")
}

/// Runs `git -c protocol.file.allow=always ARGS` in `dir` (as [`git`]): submodules from `file://`
/// URLs and local paths, which git refuses by default.
pub fn git_file_protocol(dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["-c", "protocol.file.allow=always"];
    all.extend_from_slice(args);
    git(dir, &all)
}

/// `git init` of an existing folder `dir`, branch `main`, no commit.
pub fn init_repo(dir: &Path) {
    git(dir, &["init", "-q", "-b", "main"]);
}

/// `git add -A` and `git commit -m MESSAGE` in `dir`; returns the new HEAD commit id.
pub fn commit_all(dir: &Path, message: &str) -> String {
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", message]);
    git(dir, &["rev-parse", "HEAD"]).trim().to_owned()
}

/// A git repository in its own temporary folder (the folder is the work tree), removed on drop.
pub struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    /// An empty repository on branch `main` without commits.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temporary folder");
        init_repo(dir.path());
        Self { dir }
    }

    /// The work tree (the temporary folder itself).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `git ARGS` in the work tree (see [`git`]).
    pub fn git(&self, args: &[&str]) -> String {
        git(self.path(), args)
    }

    /// Writes `bytes` to `rel` in the work tree, creating folders (see [`super::write_file`]).
    pub fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) -> &Self {
        super::write_file(self.path(), rel, bytes.as_ref());
        self
    }

    /// Commits everything in the work tree ([`commit_all`]); returns the commit id.
    pub fn commit(&self, message: &str) -> String {
        commit_all(self.path(), message)
    }

    /// HEAD's commit id.
    pub fn head(&self) -> String {
        self.git(&["rev-parse", "HEAD"]).trim().to_owned()
    }
}

/// A repository with one commit holding `README` ("hello\n").
pub fn repo() -> Repo {
    let repo = Repo::new();
    repo.write("README", "hello\n").commit("init");
    repo
}

/// An isolated git reads no configuration but the repository's own and commits as the fixed
/// identity, whatever the user's `~/.gitconfig` or `/etc/gitconfig` say.
#[test]
fn isolated_git_sees_only_the_repository_config() {
    let repo = repo();
    let scopes = repo.git(&["config", "--list", "--show-scope"]);
    assert!(!scopes.is_empty());
    for line in scopes.lines() {
        assert!(
            line.starts_with("local\t"),
            "config from outside the repository: {line}"
        );
    }
    assert_eq!(
        repo.git(&["log", "-1", "--format=%an <%ae> %at|%cn <%ce> %ct"])
            .trim(),
        format!("{NAME} <{EMAIL}> 1700000000|{NAME} <{EMAIL}> 1700000000")
    );
}
