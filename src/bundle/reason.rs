//! Why a run is not ok, in one line (docs/DESIGN.md 9): made here, once, from a run's run.json and
//! the tail of its stderr.log, for the progress line and closing list of `run`, and for every
//! format of `report`.
//!
//! A reason reads `<how it ended>[, <output check>][: <last stderr line>]`, for example
//! `exit 1: ModuleNotFoundError: No module named 'numpy'`, `killed by SIGSEGV`,
//! `timeout, ended by SIGKILL: step 3 of 10`, `timeout, exit 0 after SIGTERM`, `output invalid (trailing characters at line 1 column
//! 9)` or `spawn failed: No such file or directory (os error 2)`.
//!
//! stderr.log is read from its end only ([`TAIL_BYTES`] at most), whatever its size. Bytes that are
//! not UTF-8 become U+FFFD; control characters (and the Unicode bidirectional controls) are escaped
//! as `\u{1b}`, so a line never moves the cursor or recolours a terminal; a carriage return keeps what
//! a terminal would show last (progress bars). A line made only of escape sequences and blanks (a
//! colour reset, a cursor show) is not a line. Long text keeps its useful end: [`shorten`] keeps
//! the first clause (`exit 1: `) and the end (`No such file or directory`), cutting in the middle,
//! after the last `/` of a path it cuts into; the progress line fits the terminal's width.

use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use serde::Serialize;
use unicode_width::UnicodeWidthChar;

use super::Outcome;
use super::format::{OutputCheck, RunRecord, files};
use crate::exec::Termination;

/// Most bytes read from the end of a stderr.log.
pub const TAIL_BYTES: u64 = 64 * 1024;

/// Widest reason kept, in terminal columns (the ellipsis included): longer ones are [`shorten`]ed.
/// Where a reason is shown, it is fitted to the width there (the progress line, a table cell).
pub const REASON_WIDTH: usize = 500;

/// Widest stderr line kept, in terminal columns (the ellipsis included), [`shorten`]ed.
pub const LINE_WIDTH: usize = 500;

/// Why one run is not ok, with the last lines of its stderr.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct RunFailure {
    /// `run-id`.
    pub run_id: String,
    /// 0-based plan index.
    pub index: usize,
    /// How the run counts (never `ok`).
    pub outcome: Outcome,
    /// The one-line reason ([`reason`]), at most [`REASON_WIDTH`] columns.
    pub reason: String,
    /// The last non-blank lines of stderr.log, oldest first, each made safe by [`printable`] and cut
    /// to [`LINE_WIDTH`] columns; empty when stderr.log is empty, missing or unreadable.
    pub stderr_tail: Vec<String>,
}

impl RunFailure {
    /// The failure of the run recorded in `record`, whose folder is `run_dir`: its reason and the
    /// last `lines` non-blank lines of `run_dir/stderr.log`. `None` when the run is ok.
    ///
    /// An unreadable stderr.log is not an error here: the reason then says so instead of quoting it.
    pub fn read(record: &RunRecord, run_dir: &Path, lines: usize) -> Option<RunFailure> {
        if record.outcome == Outcome::Ok {
            return None;
        }
        let (tail, unreadable) = match read_tail(&run_dir.join(files::STDERR), lines.max(1)) {
            Ok(tail) => (tail, None),
            Err(e) => (Vec::new(), Some(format!("(stderr.log unreadable: {e})"))),
        };
        let last = unreadable.as_deref().or(tail.last().map(String::as_str));
        let reason = reason(record, last)?;
        let skip = tail.len().saturating_sub(lines);
        Some(RunFailure {
            run_id: record.run_id.clone(),
            index: record.index,
            outcome: record.outcome,
            reason,
            stderr_tail: tail.into_iter().skip(skip).collect(),
        })
    }
}

/// The one-line reason of a run that is not ok, given the last non-blank line of its stderr (already
/// made [`printable`]); `None` for an ok run. At most [`REASON_WIDTH`] columns ([`shorten`]).
pub fn reason(record: &RunRecord, last_stderr_line: Option<&str>) -> Option<String> {
    if record.outcome == Outcome::Ok {
        return None;
    }
    let mut parts = Vec::new();
    let ended = |word: &str| match (record.signal, record.exit_code) {
        (Some(s), _) => format!("{word}, ended by {}", signal_name(s)),
        (None, Some(c)) => format!("{word}, exit {c} after SIGTERM"),
        (None, None) => word.to_owned(),
    };
    match record.termination {
        Termination::Exited => match record.exit_code {
            Some(0) | None => {}
            Some(c) => parts.push(format!("exit {c}")),
        },
        Termination::Signaled => parts.push(match record.signal {
            Some(s) => format!("killed by {}", signal_name(s)),
            None => "killed by a signal".to_owned(),
        }),
        Termination::Timeout => parts.push(ended("timeout")),
        Termination::Interrupted => parts.push(ended("interrupted")),
        Termination::Lost => parts.push(match &record.lost_reason {
            Some(r) => format!("lost ({})", printable(r.as_bytes())),
            None => "lost".to_owned(),
        }),
        Termination::SpawnFailed => parts.push(match &record.error {
            Some(e) => format!("spawn failed: {}", printable(e.as_bytes())),
            None => "spawn failed".to_owned(),
        }),
    }
    match record.output_check {
        OutputCheck::Invalid => parts.push(match &record.output_check_reason {
            Some(r) => format!("output invalid ({})", printable(r.as_bytes())),
            None => "output invalid".to_owned(),
        }),
        // An empty output is the cause only when the run exited 0; after a failure it is noise.
        OutputCheck::Empty if record.outcome == Outcome::InvalidOutput => parts.push("output empty".into()),
        OutputCheck::Empty | OutputCheck::Valid => {}
    }
    let mut text = parts.join(", ");
    if let Some(line) = last_stderr_line.filter(|l| !only_escapes_and_blanks(l)) {
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(line);
    }
    if text.is_empty() {
        text = "not ok".to_owned();
    }
    Some(shorten(&text, REASON_WIDTH))
}

/// `SIGKILL` for 9; `signal 77` for a number without a name.
pub fn signal_name(signal: i32) -> String {
    signal_hook::low_level::signal_name(signal).map_or_else(|| format!("signal {signal}"), str::to_owned)
}

/// The last `lines` non-blank lines of the file at `path`, oldest first, each made [`printable`]
/// and cut to [`LINE_WIDTH`] columns. Reads at most [`TAIL_BYTES`] from the end of the file; when
/// the file is longer, the first (partial) line of that window is dropped unless it is the only one.
///
/// The file is opened as every bundle file is ([`super::contained::open_in`]): no link followed
/// (`path` itself or its folder a symbolic link), nothing but a regular file read (a FIFO, which
/// would block, or a device is refused), the access time left as it is.
///
/// # Errors
/// Opening, seeking or reading the file, or what it is when it is no regular file (`a FIFO,
/// not a regular file: not read`); a missing file is an empty tail, not an error.
pub fn read_tail(path: &Path, lines: usize) -> io::Result<Vec<String>> {
    let (Some(folder), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        ));
    };
    let folder = if folder.as_os_str().is_empty() {
        Path::new(".")
    } else {
        folder
    };
    let mut file = match super::contained::open_in(folder, Path::new(name)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    let start = len.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(start))?;
    let mut window = Vec::new();
    file.take(TAIL_BYTES).read_to_end(&mut window)?;
    let mut raw: Vec<&[u8]> = window.split(|b| *b == b'\n').collect();
    if start > 0 && raw.len() > 1 {
        raw.remove(0);
    }
    let mut tail: Vec<String> = raw
        .iter()
        .rev()
        .map(|l| printable(l))
        .filter(|l| !only_escapes_and_blanks(l))
        .take(lines)
        .map(|l| shorten(&l, LINE_WIDTH))
        .collect();
    tail.reverse();
    Ok(tail)
}

/// One line of output as safe, printable text: invalid UTF-8 replaced (U+FFFD), only the text after
/// the last carriage return that has any (what a terminal shows), tabs as spaces, other control
/// characters and bidirectional controls escaped (`\u{1b}`), trailing whitespace removed.
pub fn printable(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    let shown = text
        .rsplit('\r')
        .find(|s| !s.trim().is_empty())
        .unwrap_or_default();
    let mut out = String::with_capacity(shown.len());
    for c in shown.chars() {
        match c {
            '\t' => out.push(' '),
            c => crate::terminal::push_shown(&mut out, c),
        }
    }
    out.truncate(out.trim_end().len());
    out
}

/// Whether a [`printable`] line holds nothing but blanks and terminal escape sequences (as
/// `printable` writes them: `\u{1b}[0m`, `\u{1b}[?25h`, `\u{1b}]0;title\u{7}`, `\u{1b}(B`):
/// what a terminal would show of it is empty, so it explains nothing.
pub fn only_escapes_and_blanks(line: &str) -> bool {
    const ESC: &str = "\\u{1b}";
    const BEL: &str = "\\u{7}";
    let mut rest = line.trim_start();
    while !rest.is_empty() {
        let Some(after) = rest.strip_prefix(ESC) else {
            return false;
        };
        rest = if let Some(csi) = after.strip_prefix('[') {
            // CSI: parameter and intermediate bytes, then one final byte in @..~.
            let end = csi
                .find(|c: char| ('@'..='~').contains(&c))
                .map_or(csi.len(), |i| i + 1);
            &csi[end..]
        } else if let Some(osc) = after.strip_prefix(']') {
            // OSC: up to BEL or ST (ESC and a backslash).
            let bel = osc.find(BEL).map(|i| i + BEL.len());
            let st = osc.find(&format!("{ESC}\\")).map(|i| i + ESC.len() + 1);
            match (bel, st) {
                (Some(a), Some(b)) => &osc[a.min(b)..],
                (Some(a), None) | (None, Some(a)) => &osc[a..],
                (None, None) => "",
            }
        } else if let Some(c) = after.chars().next() {
            // A two-character escape, or a character-set choice (`ESC ( B`).
            let skip = c.len_utf8();
            if matches!(c, '(' | ')' | '*' | '+') {
                let tail = &after[skip..];
                &tail[tail.chars().next().map_or(0, char::len_utf8)..]
            } else {
                &after[skip..]
            }
        } else {
            ""
        };
        rest = rest.trim_start();
    }
    true
}

/// `text` within `width` terminal columns, keeping what explains the most: its first clause (up
/// to the first `: `, when that is short) and its end, joined by `…`. When the cut falls inside a
/// path, the kept end starts after that path's last `/`:
/// `exit 2: …missing.py': [Errno 2] No such file or directory`. Text that fits is unchanged;
/// a width under 16 columns keeps the start alone ([`truncate`]).
pub fn shorten(text: &str, width: usize) -> String {
    let columns = |s: &str| s.chars().map(|c| c.width().unwrap_or(0)).sum::<usize>();
    if columns(text) <= width {
        return text.to_owned();
    }
    if width < 16 {
        return truncate(text, width);
    }
    let (head, rest) = match text.find(": ") {
        Some(i) if columns(&text[..i + 2]) <= width / 3 => text.split_at(i + 2),
        _ => ("", text),
    };
    let room = width - columns(head) - 1;
    // The last `room` columns of `rest`.
    let mut start = rest.len();
    let mut used = 0;
    for (i, c) in rest.char_indices().rev() {
        let w = c.width().unwrap_or(0);
        if used + w > room {
            break;
        }
        used += w;
        start = i;
    }
    let mut tail = &rest[start..];
    let cut_mid_word = rest[..start]
        .chars()
        .next_back()
        .is_some_and(|c| !c.is_whitespace());
    if cut_mid_word {
        let word_end = tail.find(char::is_whitespace).unwrap_or(tail.len());
        if let Some(slash) = tail[..word_end].rfind('/')
            && slash + 1 < tail.len()
        {
            tail = &tail[slash + 1..];
        }
    }
    format!("{head}…{}", tail.trim_start())
}

/// `text` cut to at most `width` terminal columns, ending in `…` when cut.
pub fn truncate(text: &str, width: usize) -> String {
    let columns = |c: char| c.width().unwrap_or(0);
    if text.chars().map(columns).sum::<usize>() <= width {
        return text.to_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        if used + columns(c) + 1 > width {
            break;
        }
        used += columns(c);
        out.push(c);
    }
    out.truncate(out.trim_end().len());
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::plan::RunEnv;

    fn record(termination: Termination, exit_code: Option<i32>, signal: Option<i32>) -> RunRecord {
        RunRecord {
            format: 1,
            run_id: "000-a-r1".into(),
            index: 0,
            cell: BTreeMap::new(),
            repetition: 1,
            argv: vec!["x".into()],
            workdir: "/".into(),
            env: RunEnv::default(),
            cpus_requested: vec![0],
            cpus_effective: None,
            pid: None,
            start: String::new(),
            end: String::new(),
            wall_seconds: 0.1,
            user_seconds: None,
            sys_seconds: None,
            peak_rss_bytes: None,
            exit_code,
            signal,
            termination,
            error: None,
            output: "out.json".into(),
            output_check: OutputCheck::Empty,
            output_check_reason: None,
            outcome: Outcome::Failed,
            stray_processes_killed: 0,
            escaped_processes: Vec::new(),
            memory_samples: 0,
            sha256: BTreeMap::new(),
            hostname: None,
            node: None,
            slurm: None,
            lost_reason: None,
            summary: None,
            containment: None,
            runner_cpus: None,
            cgroup_memory_peak_bytes: None,
            cgroup_memory_source: None,
            sampling: None,
            shared_memory_left: Vec::new(),
            allocator: None,
            environment: None,
            artifacts: Vec::new(),
            attempt: 1,
            earlier_attempts: Vec::new(),
        }
    }

    #[test]
    fn reasons_name_how_the_run_ended_and_the_last_stderr_line() {
        let failed = record(Termination::Exited, Some(1), None);
        assert_eq!(
            reason(&failed, Some("ModuleNotFoundError: No module named 'numpy'")).as_deref(),
            Some("exit 1: ModuleNotFoundError: No module named 'numpy'")
        );
        assert_eq!(reason(&failed, None).as_deref(), Some("exit 1"));
        let segv = record(Termination::Signaled, None, Some(11));
        assert_eq!(reason(&segv, None).as_deref(), Some("killed by SIGSEGV"));
        let mut timeout = record(Termination::Timeout, None, Some(9));
        timeout.outcome = Outcome::Timeout;
        assert_eq!(
            reason(&timeout, Some("step 3")).as_deref(),
            Some("timeout, ended by SIGKILL: step 3")
        );
        (timeout.signal, timeout.exit_code) = (None, Some(0));
        assert_eq!(
            reason(&timeout, None).as_deref(),
            Some("timeout, exit 0 after SIGTERM")
        );
        let mut invalid = record(Termination::Exited, Some(0), None);
        invalid.outcome = Outcome::InvalidOutput;
        assert_eq!(reason(&invalid, None).as_deref(), Some("output empty"));
        invalid.output_check = OutputCheck::Invalid;
        invalid.output_check_reason = Some("EOF while parsing".into());
        assert_eq!(
            reason(&invalid, Some("warn")).as_deref(),
            Some("output invalid (EOF while parsing): warn")
        );
        let mut spawn = record(Termination::SpawnFailed, None, None);
        spawn.outcome = Outcome::SpawnFailed;
        spawn.error = Some("No such file or directory (os error 2)".into());
        assert_eq!(
            reason(&spawn, None).as_deref(),
            Some("spawn failed: No such file or directory (os error 2)")
        );
        let mut ok = record(Termination::Exited, Some(0), None);
        ok.outcome = Outcome::Ok;
        assert_eq!(reason(&ok, Some("x")), None);
        assert_eq!(signal_name(77), "signal 77");
    }

    #[test]
    fn long_reasons_keep_their_first_clause_and_their_end() {
        let failed = record(Termination::Exited, Some(1), None);
        let long = format!("{}end", "x".repeat(REASON_WIDTH * 2));
        let r = reason(&failed, Some(&long)).unwrap();
        assert_eq!(r.chars().count(), REASON_WIDTH);
        assert!(r.starts_with("exit 1: …xxx") && r.ends_with("xxend"), "{r}");
        let python = "python3: can't open file '/home/someone/projects/a-long-folder-name/experiments/missing_script.py': [Errno 2] No such file or directory";
        assert_eq!(
            shorten(&format!("exit 2: {python}"), 80),
            "exit 2: …missing_script.py': [Errno 2] No such file or directory"
        );
        assert_eq!(shorten("spawn failed: short", 80), "spawn failed: short");
        // No short first clause: the end alone.
        let r = shorten("word ".repeat(40).trim_end(), 30);
        assert!(
            r.starts_with('…') && r.ends_with("word") && r.chars().count() <= 30,
            "{r}"
        );
        assert!(
            shorten("日本語です日本語です日本語です日本語です", 20)
                .chars()
                .map(|c| c.width().unwrap_or(0))
                .sum::<usize>()
                <= 20
        );
        // Wide characters count two columns.
        assert_eq!(truncate("日本語です", 6), "日本…");
        assert_eq!(truncate("short", 6), "short");
    }

    #[test]
    fn printable_escapes_control_characters_and_replaces_bad_utf8() {
        assert_eq!(printable(b"\x1b[31mred\x1b[0m\tx"), "\\u{1b}[31mred\\u{1b}[0m x");
        assert_eq!(printable(b"bad \xff\xfe end"), "bad \u{fffd}\u{fffd} end");
        assert_eq!(printable(b" 10%\r 50%\r100%\r"), "100%");
        assert_eq!(printable("a\u{202e}b".as_bytes()), "a\\u{202e}b");
        assert_eq!(printable(b"trailing   "), "trailing");
    }

    #[test]
    fn a_line_of_escape_sequences_and_blanks_is_no_line() {
        for line in [
            &b"\x1b[0m"[..],
            b"  \x1b[?25h \x1b[2K\x1b[1G",
            b"\x1b]0;title\x07\x1b(B",
            b"\x1b]8;;\x1b\\",
            b"\t ",
        ] {
            assert!(only_escapes_and_blanks(&printable(line)), "{:?}", printable(line));
        }
        for line in [&b"\x1b[31mError\x1b[0m"[..], b"x", b"\x1b[0m done"] {
            assert!(
                !only_escapes_and_blanks(&printable(line)),
                "{:?}",
                printable(line)
            );
        }
        let failed = record(Termination::Exited, Some(1), None);
        assert_eq!(
            reason(&failed, Some(&printable(b"\x1b[0m"))).as_deref(),
            Some("exit 1")
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stderr.log");
        std::fs::write(&path, b"Error: disk full\n\x1b[0m\n\x1b[?25h  \n").unwrap();
        assert_eq!(read_tail(&path, 3).unwrap(), ["Error: disk full"]);
    }

    /// stderr.log is read as every bundle file: a link (to a file outside, or to a device) or a
    /// FIFO is refused, not followed or waited on (the breaking pass of 2026-12-04 had a failed
    /// run's reason quote a file outside the bundle, and a FIFO hang the report).
    #[test]
    fn a_stderr_log_that_is_no_regular_file_is_refused_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("secret.txt");
        std::fs::write(&outside, "SECRET-LINE\n").unwrap();
        let run_dir = dir.path().join("run");
        std::fs::create_dir(&run_dir).unwrap();
        let path = run_dir.join("stderr.log");
        for target in [outside.as_path(), Path::new("/dev/zero")] {
            std::os::unix::fs::symlink(target, &path).unwrap();
            let err = read_tail(&path, 3).unwrap_err().to_string();
            assert!(
                err.contains("a symbolic link, not a regular file: not read"),
                "{err}"
            );
            std::fs::remove_file(&path).unwrap();
        }
        crate::bundle::contained::testing::fifo(&path);
        let fifo = path.clone();
        let err = crate::bundle::contained::testing::returns("reading a FIFO stderr.log", move || {
            read_tail(&fifo, 3).map_err(|e| e.to_string())
        })
        .unwrap_err();
        assert!(err.contains("FIFO") && err.contains("not read"), "{err}");
        // Through RunFailure: the reason says it, and quotes nothing.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&outside, &path).unwrap();
        let failed = record(Termination::Exited, Some(3), None);
        let f = RunFailure::read(&failed, &run_dir, 3).unwrap();
        assert!(!f.reason.contains("SECRET"), "{}", f.reason);
        assert!(f.reason.contains("stderr.log unreadable"), "{}", f.reason);
        assert!(f.stderr_tail.is_empty());
    }

    #[test]
    fn the_tail_is_read_from_the_end_of_a_large_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stderr.log");
        let mut text = String::new();
        for i in 0..100_000 {
            text.push_str(&format!("line {i}\n"));
        }
        text.push_str("\n\nlast words\n\n");
        std::fs::write(&path, &text).unwrap();
        assert!(text.len() as u64 > 10 * TAIL_BYTES);
        let tail = read_tail(&path, 3).unwrap();
        assert_eq!(tail, ["line 99998", "line 99999", "last words"]);
        // A single line longer than the window: its end, cut to the line width.
        std::fs::write(&path, "y".repeat(200_000)).unwrap();
        let tail = read_tail(&path, 5).unwrap();
        assert_eq!(tail.len(), 1);
        assert_eq!(tail[0].chars().count(), LINE_WIDTH);
        assert_eq!(
            read_tail(&dir.path().join("missing"), 5).unwrap(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_failure_reads_its_reason_and_tail_from_the_run_folder() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(files::STDERR),
            b"Traceback (most recent call last):\n  File \"x.py\", line 1\nModuleNotFoundError: No module named 'numpy'\n",
        )
        .unwrap();
        let failed = record(Termination::Exited, Some(1), None);
        let f = RunFailure::read(&failed, dir.path(), 2).unwrap();
        assert_eq!(f.reason, "exit 1: ModuleNotFoundError: No module named 'numpy'");
        assert_eq!(
            f.stderr_tail,
            [
                "  File \"x.py\", line 1",
                "ModuleNotFoundError: No module named 'numpy'"
            ]
        );
        let mut ok = failed.clone();
        ok.outcome = Outcome::Ok;
        assert!(RunFailure::read(&ok, dir.path(), 2).is_none());
    }
}
