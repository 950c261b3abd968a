//! Located manifest errors: `file:line:col`, the source line and a caret under the offending span.
//!
//! Rendering (one block per problem, blocks separated by a blank line):
//!
//! ```text
//! error: unknown key `repetiton` in [schedule]
//!   --> exp.toml:12:1
//!    |
//! 12 | repetiton = 2
//!    | ^^^^^^^^^
//!    = help: did you mean `repetitions`? valid keys: repetitions, order, seed, jobs
//! ```
//!
//! A warning ([`Level::Warning`]: a key that is read but has no effect, like `seed` without
//! `order = "shuffled"`) renders the same way with `warning:`. A problem caused by a command-line
//! value that replaces a manifest value ([`Diagnostic::option`], like `run --repetitions N`) names
//! the option and its value instead of a manifest position:
//!
//! ```text
//! error: --repetitions 4294967295: the matrix times the repetitions makes 17179869180 runs; ...
//!   --> command line: --repetitions 4294967295 (in place of exp.toml:35:15)
//! ```

use std::fmt;
use std::ops::Range;

/// Whether a diagnostic fails the manifest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// The manifest is refused (exit 2).
    #[default]
    Error,
    /// Printed, but the manifest is accepted: a key that is read and has no effect.
    Warning,
}

impl Level {
    /// `error` or `warning`, as the rendering starts.
    pub const fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warning => "warning",
        }
    }
}

/// One located problem in a manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostic {
    /// Byte range in the manifest source the problem points at (with [`Diagnostic::option`]: the
    /// manifest value the option replaces).
    pub span: Range<usize>,
    /// What is wrong.
    pub message: String,
    /// An optional hint (did-you-mean, accepted values).
    pub help: Option<String>,
    /// Error or warning.
    pub level: Level,
    /// The command-line option and value the problem comes from (`--repetitions 4294967295`),
    /// when a command-line value replaced the manifest's: the rendering names it instead of
    /// showing a manifest line.
    pub option: Option<String>,
}

/// Every problem found in one manifest, rendered all at once by `Display`.
#[derive(Debug, Clone)]
pub struct Diagnostics {
    /// File name as shown to the user.
    pub file: String,
    /// The manifest text the spans refer to.
    pub source: String,
    /// The problems, in source order.
    pub items: Vec<Diagnostic>,
}

/// Largest char boundary of `s` at or below `offset` (clamped to `s.len()`).
fn floor_boundary(s: &str, offset: usize) -> usize {
    let mut i = offset.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl Diagnostics {
    /// A set with exactly one problem at `span` of `source`.
    pub fn single(
        file: impl Into<String>,
        source: impl Into<String>,
        span: Range<usize>,
        message: impl Into<String>,
        help: Option<String>,
    ) -> Self {
        Diagnostics {
            file: file.into(),
            source: source.into(),
            items: vec![Diagnostic {
                span,
                message: message.into(),
                help,
                ..Diagnostic::default()
            }],
        }
    }

    /// Whether any item is an error (not only warnings).
    pub fn has_errors(&self) -> bool {
        self.items.iter().any(|d| d.level == Level::Error)
    }

    /// The same file with only the items of `level`.
    pub fn only(&self, level: Level) -> Diagnostics {
        Diagnostics {
            file: self.file.clone(),
            source: self.source.clone(),
            items: self.items.iter().filter(|d| d.level == level).cloned().collect(),
        }
    }

    /// 1-based (line, column) of a byte offset; columns count characters. Offsets past the end
    /// or inside a multi-byte character are clamped to the previous character boundary.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = floor_boundary(&self.source, offset);
        let before = &self.source[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (line, before[line_start..].chars().count() + 1)
    }

    /// The `file:line:col` location of problem `index` (as printed after `-->`).
    pub fn location(&self, index: usize) -> Option<String> {
        let d = self.items.get(index)?;
        let (line, col) = self.line_col(d.span.start);
        Some(format!("{}:{line}:{col}", self.file))
    }
}

/// Display width of a source prefix, a tab counting as 4 columns (tabs are shown as 4 spaces).
fn width(text: &str) -> usize {
    text.chars().map(|c| if c == '\t' { 4 } else { 1 }).sum()
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, d) in self.items.iter().enumerate() {
            if n > 0 {
                writeln!(f)?;
            }
            let (line, col) = self.line_col(d.span.start);
            writeln!(f, "{}: {}", d.level.as_str(), d.message)?;
            if let Some(option) = &d.option {
                // The value came from the command line: no manifest line to point at.
                if d.span.end > d.span.start {
                    writeln!(
                        f,
                        "  --> command line: {option} (in place of {}:{line}:{col})",
                        self.file
                    )?;
                } else {
                    writeln!(f, "  --> command line: {option} (for {})", self.file)?;
                }
                if let Some(help) = &d.help {
                    writeln!(f, "   = help: {help}")?;
                }
                continue;
            }
            writeln!(f, "  --> {}:{}:{}", self.file, line, col)?;
            if !self.source.is_empty() {
                let start = floor_boundary(&self.source, d.span.start);
                let end = floor_boundary(&self.source, d.span.end.max(start));
                let line_start = self.source[..start].rfind('\n').map_or(0, |i| i + 1);
                let line_end = self.source[start..]
                    .find('\n')
                    .map_or(self.source.len(), |i| start + i);
                let text = self.source[line_start..line_end].trim_end_matches('\r');
                let gutter = line.to_string().len();
                writeln!(f, "{:gutter$} |", "")?;
                writeln!(f, "{line} | {}", text.replace('\t', "    "))?;
                let pad = width(&self.source[line_start..start]);
                let under = &self.source[start..end.min(line_end).max(start)];
                let carets = width(under.trim_end_matches('\r')).max(1);
                writeln!(f, "{:gutter$} | {}{}", "", " ".repeat(pad), "^".repeat(carets))?;
                if let Some(help) = &d.help {
                    writeln!(f, "{:gutter$} = help: {help}", "")?;
                }
            } else if let Some(help) = &d.help {
                writeln!(f, "   = help: {help}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_location_line_and_caret() {
        let d = Diagnostics::single(
            "m.toml",
            "a = 1\n\tbad = \"x\"\n",
            7..10,
            "unknown key `bad`",
            Some("did you mean `bat`?".into()),
        );
        let text = d.to_string();
        assert!(text.contains("error: unknown key `bad`"), "{text}");
        assert!(text.contains("  --> m.toml:2:2"), "{text}");
        assert!(text.contains("2 |     bad = \"x\""), "{text}");
        assert!(text.contains("  |     ^^^\n"), "{text}");
        assert!(text.contains("  = help: did you mean `bat`?"), "{text}");
    }

    #[test]
    fn clamps_odd_offsets() {
        let d = Diagnostics::single("m.toml", "é = 1", 1..99, "x", None);
        assert_eq!(d.line_col(1), (1, 1));
        assert!(d.to_string().contains("^"));
        let empty = Diagnostics::single("gone.toml", "", 0..0, "cannot read gone.toml", None);
        assert_eq!(
            empty.to_string(),
            "error: cannot read gone.toml\n  --> gone.toml:1:1\n"
        );
    }
}
