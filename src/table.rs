//! Aligned text tables drawn by comfy-table: the one renderer for every column-aligned table hwr-exp
//! prints (the sections of `report` and `compare`, `list`). Imports no other module of the crate.
//!
//! Widths count characters (comfy-table measures display width); cells are never wrapped, so a table
//! is as wide as its widest row, whatever the terminal.

use comfy_table::{CellAlignment, ColumnConstraint, Table, presets};

/// How a table is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Box-drawing borders and a header rule (UTF-8, condensed: no rule between rows).
    Boxed,
    /// No borders: columns separated by two spaces, no trailing spaces, the header as the first
    /// line. For output that scripts cut into columns as much as people read it (`list`).
    Plain,
}

/// Renders `rows` under `header` in `style`; a column is right-aligned where `right_aligned` says
/// so (missing entries: left). Returns the lines joined by `\n`, without a final newline.
pub fn render(style: Style, header: Vec<String>, rows: Vec<Vec<String>>, right_aligned: &[bool]) -> String {
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
    let columns = header.len();
    t.set_header(header);
    for row in rows {
        t.add_row(row);
    }
    for (i, column) in t.column_iter_mut().enumerate() {
        if right_aligned.get(i).copied().unwrap_or(false) {
            column.set_cell_alignment(CellAlignment::Right);
        }
        if style == Style::Plain {
            column.set_padding((0, if i + 1 == columns { 0 } else { 2 }));
            column.set_constraint(ColumnConstraint::ContentWidth);
        }
    }
    let text = t.to_string();
    match style {
        Style::Boxed => text,
        Style::Plain => text.lines().map(str::trim_end).collect::<Vec<_>>().join("\n"),
    }
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
}
