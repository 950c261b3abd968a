//! Text that reaches a terminal: the one escaping of every terminal writer (tables of `report`,
//! `compare`, `list`, the lines of `plan`, stderr reasons) and the cut of long values in terminal
//! tables. A value from a manifest, a run's output or its stderr may hold control characters, ANSI
//! escape sequences or bidirectional overrides (U+202E) that would move the cursor, recolour or
//! reorder what the user reads: they are shown escaped (`\u{1b}`, `\u{202e}`), never sent raw.
//! csv and json outputs keep the values whole and unescaped. A leaf: imports no other module.

use std::borrow::Cow;

use unicode_width::UnicodeWidthChar;

/// The widest a value is shown in a terminal table, in terminal columns; longer values end in
/// `…` (the full value stays in csv and json). Room for a whole one-line reason (500 columns,
/// `bundle::reason::LINE_WIDTH`); key columns of a table fitted to the terminal are cut
/// narrower (`table::render_fit`). A 70,000-character matrix value made the terminal report of
/// 4 runs take 14-90 s and print 20-75 MB while comfy-table wrapped it.
pub const MAX_CELL_COLUMNS: usize = 600;

/// The widest one word of running text (a title, a note) is shown, in terminal columns.
pub const MAX_WORD_COLUMNS: usize = 120;

/// Whether `c` is a bidirectional formatting control (U+061C, U+200E/F, U+202A-U+202E,
/// U+2066-U+2069): shown escaped, since it reorders the text around it.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Whether `c` is shown escaped: a control character (C0, DEL, C1: ESC starts every ANSI
/// sequence) or a bidirectional control.
pub fn needs_escape(c: char) -> bool {
    c.is_control() || is_bidi_control(c)
}

/// Appends `c` to `out` as shown on a terminal: escaped (`\u{1b}`, `\n`) when [`needs_escape`].
pub fn push_shown(out: &mut String, c: char) {
    if needs_escape(c) {
        out.extend(c.escape_default());
    } else {
        out.push(c);
    }
}

/// The terminal columns `text` takes (display width: 2 for wide characters, 0 for combining ones).
pub fn width(text: &str) -> usize {
    text.chars().map(|c| c.width().unwrap_or(0)).sum()
}

/// `text` with every character [`needs_escape`] says escaped; borrowed when nothing changes.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        push_shown(&mut out, c);
    }
    Cow::Owned(out)
}

/// One value as a terminal table cell: escaped ([`escape`]) and cut to at most `max_columns`
/// terminal columns, ending in `…` when cut.
pub fn cell(text: &str, max_columns: usize) -> Cow<'_, str> {
    let shown = escape(text);
    let width = |c: char| c.width().unwrap_or(0);
    if shown.chars().map(width).sum::<usize>() <= max_columns {
        return shown;
    }
    let mut out = String::with_capacity(max_columns + 3);
    let mut used = 0;
    for c in shown.chars() {
        if used + width(c) > max_columns.saturating_sub(1) {
            break;
        }
        used += width(c);
        out.push(c);
    }
    out.push('…');
    Cow::Owned(out)
}

/// A multi-line table cell (a header broken over lines): each line as [`cell`], the line breaks
/// kept.
pub fn cell_lines(text: &str, max_columns: usize) -> Cow<'_, str> {
    if !text.contains('\n') {
        return cell(text, max_columns);
    }
    Cow::Owned(
        text.split('\n')
            .map(|line| cell(line, max_columns))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// Running text for the terminal (a title, a note): every line escaped ([`escape`]), line breaks
/// kept, and each word wider than [`MAX_WORD_COLUMNS`] cut with `…` (a 70,000-character matrix
/// value in a title is one word that no wrapping can break).
pub fn text(text: &str) -> Cow<'_, str> {
    let plain =
        |line: &str| !line.chars().any(needs_escape) && line.split(' ').all(|w| w.len() <= MAX_WORD_COLUMNS);
    if text.split('\n').all(plain) {
        return Cow::Borrowed(text);
    }
    let lines: Vec<String> = text
        .split('\n')
        .map(|line| {
            line.split(' ')
                .map(|word| cell(word, MAX_WORD_COLUMNS))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    Cow::Owned(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_ansi_and_bidi_are_escaped() {
        assert_eq!(escape("a\u{1b}[31mred\u{7}"), "a\\u{1b}[31mred\\u{7}");
        assert_eq!(escape("x\u{202e}y\nz\r"), "x\\u{202e}y\\nz\\r");
        assert!(matches!(escape("plain ü 漢"), Cow::Borrowed(_)));
    }

    #[test]
    fn long_values_are_cut_to_the_width() {
        let long = "x".repeat(70_000);
        let shown = cell(&long, 10);
        assert_eq!(shown, "xxxxxxxxx…");
        assert_eq!(cell("short", 10), "short");
        assert_eq!(cell("exactly10!", 10), "exactly10!");
        assert_eq!(cell("\u{1b}[2J", 40), "\\u{1b}[2J");
        assert_eq!(cell("漢字漢字漢字", 5), "漢字…");
        assert_eq!(cell_lines("a\u{1b}\nb", 10), "a\\u{1b}\nb");
        let title = format!("cell mode=a\u{202e}b v={long}");
        let shown = text(&title);
        assert!(
            shown.starts_with("cell mode=a\\u{202e}b v=yy")
                || shown.starts_with("cell mode=a\\u{202e}b v=xx")
        );
        assert!(shown.chars().count() < 200, "{shown}");
        assert!(matches!(text("plain words\nsecond line"), Cow::Borrowed(_)));
    }
}
