//! Text layout of a report's tables: a [`Section`] (title, columns, rows, notes) written as a
//! terminal table fitted to a width ([`crate::table`]) or as Markdown ([`TextStyle`]). What
//! `render`, `verdicts`, `html` and `compare` lay their tables out with.

use super::model::fmt_num;

/// How [`render_sections`] writes text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextStyle {
    /// Terminal tables. `Some(width)`: every line within `width` columns where the words allow
    /// (tables split and headers broken, text wrapped); `None`: one line per row (`--wide`).
    Terminal(Option<usize>),
    /// Markdown tables, every column, one line per row.
    Markdown,
}

impl TextStyle {
    /// Whether this is Markdown.
    pub fn is_md(self) -> bool {
        self == TextStyle::Markdown
    }

    /// The line break after a preamble line or note.
    pub fn line_end(self) -> &'static str {
        if self.is_md() { "  \n" } else { "\n" }
    }

    /// `text` as lines within the terminal width (continuation lines indented by two spaces);
    /// words longer than the width are kept whole. Unchanged for Markdown and `--wide`.
    pub fn wrap(self, text: &str) -> String {
        // Terminal text escaped and long words cut, in one place (`crate::terminal::text`).
        let shown = match self {
            TextStyle::Terminal(_) => crate::terminal::text(text),
            TextStyle::Markdown => std::borrow::Cow::Borrowed(text),
        };
        let text = shown.as_ref();
        match self {
            TextStyle::Terminal(Some(width)) => {
                let options = textwrap::Options::new(width.max(10))
                    .subsequent_indent("  ")
                    .break_words(false)
                    .word_splitter(textwrap::WordSplitter::NoHyphenation);
                textwrap::fill(text, options)
            }
            _ => text.to_owned(),
        }
    }
}

/// A titled table: header, rows, and which columns are numeric (right-aligned).
#[derive(Debug, Clone, Default)]
pub struct Section {
    /// Title printed above the table.
    pub title: String,
    /// Column names.
    pub header: Vec<String>,
    /// Right-align these columns.
    pub numeric: Vec<bool>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
    /// Lines printed under the table.
    pub notes: Vec<String>,
    /// Leading columns that name a row (run-id, cell), repeated in each part of a terminal table
    /// split to fit the width. [`Section::new`] makes it 1.
    pub key_columns: usize,
}

impl Section {
    /// A section with columns given as (name, numeric).
    pub fn new(title: impl Into<String>, columns: &[(&str, bool)]) -> Section {
        Section {
            title: title.into(),
            header: columns.iter().map(|c| c.0.to_string()).collect(),
            numeric: columns.iter().map(|c| c.1).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
            key_columns: 1,
        }
    }
}

/// Renders sections in `style` after `preamble` lines.
pub fn render_sections(preamble: &[String], sections: Vec<Section>, style: TextStyle) -> String {
    let mut out = String::new();
    for line in preamble {
        out.push_str(&style.wrap(line));
        out.push_str(style.line_end());
    }
    for s in sections {
        render_section(&mut out, s, style);
    }
    out
}

/// Appends one section to `out`; the section's rows are moved into the table, not copied.
pub fn render_section(out: &mut String, s: Section, style: TextStyle) {
    out.push('\n');
    let notes = s.notes.clone();
    match style {
        TextStyle::Markdown => {
            out.push_str(&format!("### {}\n\n", s.title));
            out.push_str(&markdown_table(&s));
        }
        TextStyle::Terminal(width) => {
            out.push_str(&format!("{}\n", style.wrap(&s.title)));
            if !s.rows.is_empty() {
                out.push_str(&terminal_table(s, width));
                out.push('\n');
            }
        }
    }
    for n in &notes {
        out.push_str(&style.wrap(n));
        out.push_str(style.line_end());
    }
}

fn terminal_table(s: Section, width: Option<usize>) -> String {
    let fit = width.map(|max_width| crate::table::Fit {
        max_width,
        key_columns: s.key_columns,
    });
    crate::table::render_fit(crate::table::Style::Boxed, s.header, s.rows, &s.numeric, fit)
}

/// `s` with its `|` escaped, for a Markdown table cell or line.
pub fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

fn markdown_table(s: &Section) -> String {
    if s.rows.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    let head: Vec<String> = s.header.iter().map(|h| md_escape(h)).collect();
    out.push_str(&format!("| {} |\n", head.join(" | ")));
    let align: Vec<&str> = s
        .numeric
        .iter()
        .map(|n| if *n { "---:" } else { "---" })
        .collect();
    out.push_str(&format!("|{}|\n", align.join("|")));
    for row in &s.rows {
        let cells: Vec<String> = row.iter().map(|c| md_escape(c).replace('\n', "<br>")).collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out.push('\n');
    out
}

/// `+x` for a positive number, `x` otherwise ([`fmt_num`]), `-` for none.
pub fn signed_f(v: Option<f64>) -> String {
    match v {
        Some(x) if x > 0.0 => format!("+{}", fmt_num(x)),
        Some(x) => fmt_num(x),
        None => "-".into(),
    }
}
