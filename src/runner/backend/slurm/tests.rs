use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::arrays::script_binary;
use super::task::watch_pre_timeout;
use super::wait::{POLL_FLOW_MAX, POLL_MAX, POLL_MIN, Waited, next_pause};
use crate::exec::CancelFlag;

const MS: Duration = Duration::from_millis(1);

/// Runs [`watch_pre_timeout`] on a thread with the signal already heard (`heard`) or not,
/// sets `done` after `run_for` (the run ending by itself), and gives whether it stopped the run.
fn watched(heard: bool, run_for: Duration, left: Result<Option<Duration>, String>) -> bool {
    let requeue = AtomicBool::new(heard);
    let cancel: CancelFlag = std::sync::Arc::new(AtomicBool::new(false));
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let w = s.spawn(|| watch_pre_timeout(&requeue, &cancel, &done, Duration::from_secs(60), || left));
        // The run ends by itself after `run_for`, unless the watcher stopped it first.
        let until = Instant::now() + run_for;
        while Instant::now() < until && !cancel.load(Ordering::SeqCst) {
            std::thread::sleep(MS);
        }
        done.store(true, Ordering::SeqCst);
        w.thread().unpark();
        w.join().unwrap();
    });
    cancel.load(Ordering::SeqCst)
}

#[test]
fn an_early_pre_timeout_signal_lets_a_run_that_ends_in_time_finish() {
    // 80 s left, 60 s of lead: the stop is 20 s away; the run ends after 200 ms.
    let short = Duration::from_millis(200);
    assert!(!watched(true, short, Ok(Some(Duration::from_secs(80)))));
    // No signal at all: nothing is stopped.
    assert!(!watched(false, short, Ok(Some(Duration::ZERO))));
    // No time limit: Slurm will not end the job for time.
    assert!(!watched(true, short, Ok(None)));
}

#[test]
fn the_pre_timeout_signal_stops_the_run_when_only_the_lead_is_left() {
    // 60.1 s left, 60 s of lead: stopped about 100 ms after the signal, before the run's
    // own end 30 s later.
    let long = Duration::from_secs(30);
    assert!(watched(true, long, Ok(Some(Duration::from_millis(60_100)))));
    // Already past the lead (the signal was late, or the lead is longer than the limit).
    assert!(watched(true, long, Ok(Some(Duration::from_secs(5)))));
    // The time left cannot be read: stopped at once, as before.
    assert!(watched(true, long, Err("squeue failed".into())));
}

#[test]
fn a_replaced_binary_is_submitted_by_its_path_without_the_deleted_suffix() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("hwr-exp");
    let deleted = PathBuf::from(format!("{} (deleted)", bin.display()));
    assert_eq!(script_binary(deleted), bin);
    assert_eq!(script_binary(bin.clone()), bin);
    // A file really named so is kept.
    let odd = dir.path().join("odd (deleted)");
    std::fs::write(&odd, "").unwrap();
    assert_eq!(script_binary(odd.clone()), odd);
}

#[test]
fn the_pause_grows_by_half_while_nothing_changes_up_to_the_maximum() {
    assert_eq!(next_pause(POLL_MIN, POLL_MIN, 0, 1000), 375 * MS);
    assert_eq!(next_pause(4000 * MS, 4000 * MS, 0, 1000), POLL_MAX);
    assert_eq!(next_pause(POLL_MAX, POLL_MAX, 0, 0), POLL_MAX);
}

#[test]
fn a_steady_flow_with_much_ahead_is_polled_so_that_a_poll_sees_about_a_batch_of_changes() {
    // 80 changes a second (40 tasks start and 40 end): a batch of 256 is 3.2 s of them.
    assert_eq!(next_pause(POLL_MIN, 250 * MS, 20, 10_000), 3200 * MS);
    // At the new pause the same rate keeps it.
    assert_eq!(next_pause(3200 * MS, 3200 * MS, 256, 10_000), 3200 * MS);
    // 20 tasks a second, each seen to start and to end: 6.4 s.
    assert_eq!(next_pause(1600 * MS, 1600 * MS, 64, 10_000), 6400 * MS);
    // A slow flow: every POLL_FLOW_MAX, the longest lag the progress and the next piece
    // may have.
    assert_eq!(next_pause(POLL_MAX, POLL_MAX, 8, 10_000), POLL_FLOW_MAX);
}

#[test]
fn the_pause_shortens_as_the_tasks_ahead_run_out() {
    // 40 changes a second, 64 tasks before the next array is due (or the bundle's end):
    // the next look after 64 changes, 1.6 s, before the last of them can have gone.
    assert_eq!(next_pause(POLL_MAX, POLL_MAX, 200, 64), 1600 * MS);
    // 16 tasks left: 0.4 s.
    assert_eq!(next_pause(1600 * MS, 1600 * MS, 64, 16), 400 * MS);
    // Nothing ahead (a held array is due): POLL_MIN.
    assert_eq!(next_pause(POLL_MAX, POLL_MAX, 200, 0), POLL_MIN);
}

#[test]
fn a_burst_of_changes_is_looked_at_again_soon() {
    // 2,000 tasks ended at once: look again soon (the next tasks start now).
    assert_eq!(next_pause(POLL_MAX, POLL_MAX, 2000, 10_000), 640 * MS);
    assert_eq!(next_pause(POLL_MAX, POLL_MAX, 10_000, 10_000), POLL_MIN);
    // One task of the last one ended after 5 s of nothing: 5 s again.
    assert_eq!(next_pause(POLL_MAX, POLL_MAX, 1, 1), POLL_MAX);
    // One of the last 4 ended after 2 s: 2 s x 4 = 8 s.
    assert_eq!(next_pause(2000 * MS, 2000 * MS, 1, 4), 8000 * MS);
    // One of the last 8 after 5 s: capped.
    assert_eq!(next_pause(POLL_MAX, POLL_MAX, 1, 8), POLL_FLOW_MAX);
}

#[test]
fn a_finished_run_is_forgotten_entirely_whichever_way_it_finished() {
    // The failed-but-trusted path used to keep `gone_since`: a run whose task was gone
    // without run.json at one poll and whose failed run.json was trusted at the next.
    let mut waited = Waited::new(&[3, 4, 5]);
    waited.gone_since.insert(4, Instant::now());
    waited.started.insert(4);
    waited.seen_on.insert(4, "n1".into());
    waited.started.insert(5);
    waited.finished(4);
    assert_eq!(waited.pending.iter().copied().collect::<Vec<_>>(), vec![3, 5]);
    assert!(waited.gone_since.is_empty());
    assert!(waited.seen_on.is_empty());
    assert_eq!(waited.started.iter().copied().collect::<Vec<_>>(), vec![5]);
}
