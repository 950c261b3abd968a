//! The local backend: the runs execute on this host, in this process ([`crate::runner::execute`]:
//! one slot per job, each run pinned, contained and sampled), adaptive rounds included.

use crate::runner::progress;
use crate::runner::session::{Session, SessionError, SessionReport};

/// Executes the session's runs on this host into the bundle, runs further adaptive rounds while
/// the rule asks for them (`adaptive::rounds::continue_rounds`), then finishes
/// the session ([`Session::finish`]).
///
/// # Errors
/// [`SessionError::Bundle`] when the bundle cannot be written; it is then marked `failed` (or,
/// when that write fails too, left for `list` to show as abandoned).
pub fn execute_and_finish(mut session: Session<'_>) -> Result<SessionReport, SessionError> {
    if !session.finish.quiet {
        // Said at the start too, so the bundle can be found even if the runner is killed.
        progress::say(format_args!(
            "writing {} into {}",
            progress::runs(session.indices.len()),
            session.dir().display()
        ));
    }
    session.progress.start(session.indices.len());
    let started = std::time::Instant::now();
    let end = crate::runner::execute(session.runs(), &session.indices, &session.writer);
    let end = crate::runner::adaptive::rounds::continue_rounds(&mut session, end, started);
    session.finish(end, Vec::new())
}
