//! The bundle this process is writing, so that a forced exit (a second Ctrl-C or SIGTERM:
//! `signal::SecondSignal::Exit`) marks it `interrupted` instead of leaving it `running`
//! (DESIGN 4: an exit always marks the bundle).
//!
//! [`super::BundleWriter`] records its published folder here while its bundle.json says
//! `running`, and holds the `hold` guard while it writes bundle.json; [`interrupt_live_bundle`]
//! takes the same guard (and keeps it until the process exits), so no later write of the writer
//! can put `running` back.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::format::{BundleStatus, files};

/// The published bundle folder whose bundle.json says `running`, `None` when there is none.
static LIVE: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Locks the record (a poisoned lock is taken as it is: the record is a plain path).
pub(crate) fn hold() -> MutexGuard<'static, Option<PathBuf>> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Forgets `dir` when it is the recorded bundle (a writer dropped or finished).
pub(crate) fn forget(dir: &Path) {
    let mut live = hold();
    if live.as_deref() == Some(dir) {
        *live = None;
    }
}

/// What bundle.json `notes` says of a bundle marked by a forced exit.
pub const FORCED_EXIT_NOTE: &str = "the runner was stopped at once by a second stop signal: \
     the run in flight was stopped by its parent-death signal and has no run.json; `resume` runs it again";

/// Marks the bundle this process is writing `interrupted` (with `finished` and
/// [`FORCED_EXIT_NOTE`]) when its bundle.json still says `running`, and removes its lock file;
/// for the forced exit of `signal::before_forced_exit`, run just before the process exits.
/// Best effort: a bundle.json that cannot be read or written is left as it is (readers then show
/// the bundle as abandoned). Keeps the record locked, so the writer cannot write bundle.json
/// again before the exit.
pub fn interrupt_live_bundle() {
    let live = hold();
    let Some(dir) = live.as_deref() else {
        std::mem::forget(live);
        return;
    };
    let path = dir.join(files::BUNDLE);
    let marked = std::fs::read(&path)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .filter(|info| info["status"] == BundleStatus::Running.as_str())
        .map(|mut info| {
            info["status"] = BundleStatus::Interrupted.as_str().into();
            info["finished"] = crate::timestamp::now().into();
            if let Some(notes) = info.get_mut("notes").and_then(|n| n.as_array_mut()) {
                notes.push(FORCED_EXIT_NOTE.into());
            } else {
                info["notes"] = serde_json::json!([FORCED_EXIT_NOTE]);
            }
            info
        });
    if let Some(info) = marked
        && super::atomic::write_json_atomic(&path, &info).is_ok()
    {
        let _ = std::fs::remove_file(dir.join(files::LOCK));
    }
    // Never unlocked: the process exits next.
    std::mem::forget(live);
}
