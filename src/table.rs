//! Aligned text tables drawn by comfy-table: the one renderer for every column-aligned table hwr-exp
//! prints (the sections of `report` and `compare`, `list`). Every header and cell goes through
//! [`crate::terminal::cell`]: control characters, ANSI sequences and bidirectional controls are
//! shown escaped and a value wider than [`crate::terminal::MAX_CELL_COLUMNS`] is cut with `…`
//! (csv and json keep it whole). Imports only `terminal`.
//!
//! Widths count terminal columns (display width, as comfy-table and unicode-width measure it).
//! [`render`] never wraps: a table is as wide as its widest row. [`render_fit`] keeps every line
//! within a width ([`Fit`]): first by breaking headers at spaces (`private after-close` over two
//! lines), then by splitting the columns into several tables one under the other, each repeating
//! the key columns that name a row (run-id, cell); a part still too wide (one very long text column)
//! has its text columns wrapped by comfy-table while numbers and key columns keep their width.

use comfy_table::{CellAlignment, ColumnConstraint, ContentArrangement, Table, presets};
use textwrap::core::display_width;

/// How a table is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Box-drawing borders and a header rule (UTF-8, condensed: no rule between rows).
    Boxed,
    /// No borders: columns separated by two spaces, no trailing spaces, the header as the first
    /// line. For output that scripts cut into columns as much as people read it (`list`).
    Plain,
}

/// The width a table must fit in, and the columns every part of a split table repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fit {
    /// Widest line, in terminal columns.
    pub max_width: usize,
    /// How many leading columns name a row (for example run-id): repeated in every part when the
    /// table is split. At most all columns but one are repeated.
    pub key_columns: usize,
}

/// Renders `rows` under `header` in `style`; a column is right-aligned where `right_aligned` says
/// so (missing entries: left). Returns the lines joined by `\n`, without a final newline. Never
/// wraps: one line per row (cells without newlines), whatever the width.
pub fn render(style: Style, header: Vec<String>, rows: Vec<Vec<String>>, right_aligned: &[bool]) -> String {
    let (header, rows) = shown(header, rows);
    draw(style, header, rows, right_aligned, None)
}

/// Every header and cell as the terminal shows it ([`crate::terminal::cell`]).
fn shown(header: Vec<String>, rows: Vec<Vec<String>>) -> (Vec<String>, Vec<Vec<String>>) {
    let one = |text: String| match crate::terminal::cell_lines(&text, crate::terminal::MAX_CELL_COLUMNS) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(changed) => changed,
    };
    let header = header.into_iter().map(one).collect();
    let rows = rows
        .into_iter()
        .map(|row| row.into_iter().map(one).collect())
        .collect();
    (header, rows)
}

/// Renders like [`render`], but within `fit.max_width` columns when `fit` is given (see the module
/// documentation): headers broken at spaces, then the columns split over several tables (joined by
/// an empty line) that each start with the `fit.key_columns` key columns. `None` is [`render`].
pub fn render_fit(
    style: Style,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    right_aligned: &[bool],
    fit: Option<Fit>,
) -> String {
    let Some(fit) = fit else {
        return render(style, header, rows, right_aligned);
    };
    let (header, mut rows) = shown(header, rows);
    // Key columns are repeated in every part and never wrapped: a long one (a run-id or cell
    // label of a long matrix value) is cut to leave room for the other columns.
    let key_cap = (fit.max_width / (fit.key_columns + 2)).max(12);
    for row in &mut rows {
        for cell in row.iter_mut().take(fit.key_columns) {
            if let std::borrow::Cow::Owned(cut) = crate::terminal::cell_lines(cell, key_cap) {
                *cell = cut;
            }
        }
    }
    let n = header.len();
    let cell_widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| text_width(c)))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let widths = |header: &[String]| -> Vec<usize> {
        header
            .iter()
            .zip(&cell_widths)
            .map(|(h, c)| text_width(h).max(*c))
            .collect::<Vec<_>>()
    };
    let all: Vec<usize> = (0..n).collect();
    if line_width(style, &widths(&header), &all) <= fit.max_width {
        return render(style, header, rows, right_aligned);
    }
    let header: Vec<String> = header
        .iter()
        .zip(&cell_widths)
        .map(|(h, c)| break_header(h, *c))
        .collect();
    let widths = widths(&header);
    let keys = fit.key_columns.min(n.saturating_sub(1));
    let split = |max_width: usize| split_columns(style, &widths, keys, max_width);
    // As few parts as the width allows, made as even as possible: the narrowest width that still
    // needs no more parts (the number of parts only falls as the width grows).
    let parts = split(fit.max_width).len();
    let (mut low, mut high) = (0, fit.max_width);
    while low < high {
        let mid = (low + high) / 2;
        if split(mid).len() <= parts {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    let groups = split(high);
    // Each cell moves into the one part that shows it; only the key columns are copied.
    let mut tables = Vec::with_capacity(groups.len());
    for cols in &groups {
        let mut pick = |row: &mut Vec<String>| -> Vec<String> {
            cols.iter()
                .map(|&i| match row.get_mut(i) {
                    Some(cell) if i < keys => cell.clone(),
                    Some(cell) => std::mem::take(cell),
                    None => String::new(),
                })
                .collect()
        };
        let part_header = pick(&mut header.clone());
        let part_rows: Vec<Vec<String>> = rows.iter_mut().map(&mut pick).collect();
        let align: Vec<bool> = cols
            .iter()
            .map(|&i| right_aligned.get(i).copied().unwrap_or(false))
            .collect();
        let too_wide = line_width(style, &widths, cols) > fit.max_width;
        tables.push(draw(
            style,
            part_header,
            part_rows,
            &align,
            too_wide.then_some((fit.max_width, keys)),
        ));
    }
    tables.join("\n\n")
}

/// Columns `0..n` in parts that each start with the key columns `0..keys` and hold as many of the
/// following columns, in order, as fit in `max_width` (at least one each).
fn split_columns(style: Style, widths: &[usize], keys: usize, max_width: usize) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = (0..keys).collect();
    for i in keys..widths.len() {
        current.push(i);
        if current.len() > keys + 1 && line_width(style, widths, &current) > max_width {
            current.pop();
            groups.push(std::mem::replace(&mut current, (0..keys).chain([i]).collect()));
        }
    }
    groups.push(current);
    groups
}

/// Draws one table; with `wrap = Some((width, keys))` comfy-table wraps its text columns to fit
/// `width`, leaving the first `keys` columns and the right-aligned (numeric) ones whole.
fn draw(
    style: Style,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    right_aligned: &[bool],
    wrap: Option<(usize, usize)>,
) -> String {
    let mut t = Table::new();
    t.force_no_tty();
    match style {
        Style::Boxed => {
            t.load_style(presets::UTF8_FULL_CONDENSED);
        }
        Style::Plain => {
            t.load_style(presets::NOTHING);
        }
    }
    if let Some((width, _)) = wrap {
        t.set_content_arrangement(ContentArrangement::Dynamic);
        t.set_width(u16::try_from(width).unwrap_or(u16::MAX));
    }
    let columns = header.len();
    t.set_header(header);
    for row in rows {
        t.add_row(row);
    }
    for (i, column) in t.column_iter_mut().enumerate() {
        let numeric = right_aligned.get(i).copied().unwrap_or(false);
        if numeric {
            column.set_cell_alignment(CellAlignment::Right);
        }
        if style == Style::Plain {
            column.set_padding((0, if i + 1 == columns { 0 } else { 2 }));
            column.set_constraint(ColumnConstraint::ContentWidth);
        } else if let Some((_, keys)) = wrap
            && (numeric || i < keys)
        {
            column.set_constraint(ColumnConstraint::ContentWidth);
        }
    }
    let text = t.to_string();
    match style {
        Style::Boxed => text,
        Style::Plain => text.lines().map(str::trim_end).collect::<Vec<_>>().join("\n"),
    }
}

/// Display width of a cell: its widest line.
fn text_width(text: &str) -> usize {
    text.lines().map(display_width).max().unwrap_or(0)
}

/// Width of a table's lines made of the columns `cols` of `widths` (content widths), with the
/// borders and padding of `style`: `│ a ┆ b │` adds 3 per column plus 1; plain columns are two
/// spaces apart.
fn line_width(style: Style, widths: &[usize], cols: &[usize]) -> usize {
    let content: usize = cols.iter().map(|&i| widths[i]).sum();
    match style {
        Style::Boxed => content + 3 * cols.len() + 1,
        Style::Plain => content + 2 * cols.len().saturating_sub(1),
    }
}

/// A header broken at spaces into at most two lines, each no wider than needed: as wide as its
/// column's cells when two lines allow it, else as wide as two balanced lines (a word is never
/// split): `private after-close` over `-4096` becomes `private\nafter-close`.
fn break_header(header: &str, cells: usize) -> String {
    let longest_word = header.split(' ').map(display_width).max().unwrap_or(0);
    let wrap = |width: usize| {
        let options = textwrap::Options::new(width.max(1))
            .break_words(false)
            .word_splitter(textwrap::WordSplitter::NoHyphenation);
        textwrap::wrap(header, options)
    };
    let mut width = cells.max(longest_word);
    let mut lines = wrap(width);
    while lines.len() > 2 {
        width += 1;
        lines = wrap(width);
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(cells: &[&str]) -> Vec<String> {
        cells.iter().map(|c| (*c).to_owned()).collect()
    }

    #[test]
    fn plain_columns_are_two_spaces_apart_and_lines_have_no_trailing_spaces() {
        let text = render(
            Style::Plain,
            strings(&["NAME", "N", "NOTE"]),
            vec![strings(&["a", "10", ""]), strings(&["bbbbbb", "7", "last"])],
            &[false, true],
        );
        assert_eq!(text, "NAME     N  NOTE\na       10\nbbbbbb   7  last");
    }

    #[test]
    fn boxed_tables_have_borders_and_right_aligned_numbers() {
        let text = render(
            Style::Boxed,
            strings(&["cell", "n"]),
            vec![strings(&["x", "1"]), strings(&["y", "100"])],
            &[false, true],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "┌──────┬─────┐");
        assert_eq!(lines[3], "│ x    ┆   1 │");
        assert_eq!(lines.last(), Some(&"└──────┴─────┘"));
    }

    fn width(line: &str) -> usize {
        display_width(line)
    }

    fn wide_table() -> (Vec<String>, Vec<Vec<String>>, Vec<bool>) {
        let header: Vec<String> = std::iter::once("run-id".to_owned())
            .chain((1..=12).map(|i| format!("metric number {i}")))
            .collect();
        let rows = (0..3)
            .map(|r| {
                std::iter::once(format!("00{r}-run"))
                    .chain((1..=12).map(|i| format!("{}", r * 1000 + i)))
                    .collect()
            })
            .collect();
        let numeric = std::iter::once(false).chain([true; 12]).collect();
        (header, rows, numeric)
    }

    #[test]
    fn a_wide_table_splits_into_parts_that_fit_and_repeat_the_key_column() {
        let (header, rows, numeric) = wide_table();
        let fit = Fit {
            max_width: 60,
            key_columns: 1,
        };
        let text = render_fit(Style::Boxed, header, rows, &numeric, Some(fit));
        assert!(text.lines().all(|l| width(l) <= 60), "{text}");
        let parts = text.split("\n\n").count();
        assert!(parts >= 3, "{text}");
        // The key column in every part, each value exactly once overall.
        assert_eq!(text.matches("001-run").count(), parts);
        for i in 1..=12 {
            assert_eq!(text.matches(&format!(" {} ", 1000 + i)).count(), 1, "{i}: {text}");
        }
        // Headers broken at spaces, never inside a word.
        assert!(
            text.contains("metric") && !text.contains("metric number 1 "),
            "{text}"
        );
    }

    #[test]
    fn without_a_width_or_when_it_fits_a_table_is_one_line_per_row() {
        let (header, rows, numeric) = wide_table();
        let full = render_fit(Style::Boxed, header.clone(), rows.clone(), &numeric, None);
        assert_eq!(full.lines().count(), 3 + 3 + 1, "{full}");
        assert!(full.lines().nth(1).unwrap().contains("metric number 12"));
        let roomy = Fit {
            max_width: 1000,
            key_columns: 1,
        };
        assert_eq!(
            render_fit(Style::Boxed, header, rows, &numeric, Some(roomy)),
            full
        );
    }

    #[test]
    fn a_part_with_one_long_text_column_wraps_that_column() {
        let header = strings(&["run-id", "reason"]);
        let rows = vec![strings(&["000-a-r1", &"word ".repeat(40)])];
        let fit = Fit {
            max_width: 50,
            key_columns: 1,
        };
        let text = render_fit(Style::Boxed, header, rows, &[], Some(fit));
        assert!(text.lines().all(|l| width(l) <= 50), "{text}");
        assert_eq!(text.matches("word").count(), 40, "nothing cut: {text}");
        assert_eq!(text.matches("000-a-r1").count(), 1);
    }

    #[test]
    fn headers_break_into_at_most_two_lines() {
        assert_eq!(break_header("private after-close", 5), "private\nafter-close");
        assert_eq!(break_header("a b c d e f", 1), "a b c\nd e f");
        assert_eq!(break_header("run-id", 20), "run-id");
    }
}
