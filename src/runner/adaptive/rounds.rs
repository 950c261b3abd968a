//! The loop of adaptive rounds over a session ([`super`]'s rule decides, this file runs): after
//! each round the cells are judged ([`super::decide`]), bundle.json `adaptive` is written, and
//! the runs of the next round are added to the plan and executed, here or on a batch engine.

use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::runner::SessionEnd;
use crate::runner::progress;
use crate::runner::session::Session;

use crate::bundle::StoppingReason;

use super::{decide, design_of, initial_record, reasons_text, rounds_to_next_look};

/// After the session's runs (`end`, which took since `started`): judges the cells, records the
/// rule's state, and runs further rounds on this host while the rule asks for them (see the
/// module docs). Stops at once when the runs were interrupted or the bundle cannot be written.
pub(crate) fn continue_rounds(
    session: &mut Session<'_>,
    end: io::Result<SessionEnd>,
    started: Instant,
) -> io::Result<SessionEnd> {
    continue_rounds_with(session, end, started, &mut |session, new| {
        crate::runner::execute(session.runs(), new, &session.writer)
    })
}

/// [`continue_rounds`] with the runs of each further round (plan indices, already added to the
/// session's plan and written to plan.json) done by `execute`: locally [`crate::runner::execute`], on
/// Slurm one submission of the round's runs as job arrays and the wait for them
/// ([`crate::runner::backend::slurm::wait::wait_and_finish`]). The decision from look to look is this function's
/// alone, whichever executor runs the rounds.
pub(crate) fn continue_rounds_with(
    session: &mut Session<'_>,
    mut end: io::Result<SessionEnd>,
    started: Instant,
    execute: &mut dyn FnMut(&mut Session<'_>, &[usize]) -> io::Result<SessionEnd>,
) -> io::Result<SessionEnd> {
    let Some(rule) = session.plan.adaptive else {
        return end;
    };
    let before = session
        .writer_mut()
        .info()
        .adaptive
        .as_ref()
        .map_or(0.0, |a| a.elapsed_seconds);
    let elapsed = |started: Instant| Duration::from_secs_f64(before) + started.elapsed();
    loop {
        let finished = matches!(end, Ok(SessionEnd::Complete)) && !session.cancel.load(Ordering::SeqCst);
        let dir = session.dir();
        if !finished {
            // Interrupted (or failed): keep the time spent, leave the rest of the rule to resume.
            let mut record = session
                .writer_mut()
                .info()
                .adaptive
                .clone()
                .unwrap_or_else(|| initial_record(&session.plan, rule, before));
            record.elapsed_seconds = elapsed(started).as_secs_f64();
            record.stopping_reason = None;
            session.writer_mut().set_adaptive(record)?;
            return end;
        }
        let decision = decide(&dir, &session.plan, rule, elapsed(started)).map_err(io::Error::other)?;
        let stop = decision.next.is_empty();
        let record = decision.record.clone();
        session.writer_mut().set_adaptive(decision.record)?;
        if stop {
            if !session.finish.quiet {
                progress::say(format_args!(
                    "adaptive repetitions: stopped after {} round{} ({}): {}",
                    record.rounds,
                    if record.rounds == 1 { "" } else { "s" },
                    record.stopping_reason.map_or("", StoppingReason::as_str),
                    reasons_text(&record)
                ));
            }
            return end;
        }
        let open: Vec<(usize, u32)> = decision
            .next
            .iter()
            .map(|&c| (c, session.plan.runs_of_cell(c)))
            .collect();
        let mut new = Vec::new();
        for round in rounds_to_next_look(&design_of(rule), rule.max, &open) {
            new.extend(session.plan.to_mut().add_round(&round));
        }
        let plan = session.plan.clone();
        session.writer_mut().rewrite_plan(plan.len(), |out| {
            crate::bundle::plan_file::write_plan_json(&plan, out)
        })?;
        if !session.finish.quiet {
            progress::say(format_args!(
                "adaptive repetitions: to the look at {} runs for {} undecided cell{} ({})",
                session.plan.runs_of_cell(decision.next[0]),
                decision.next.len(),
                if decision.next.len() == 1 { "" } else { "s" },
                progress::runs(new.len())
            ));
        }
        end = execute(session, &new);
    }
}
