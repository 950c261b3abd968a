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

use std::fmt;
use std::ops::Range;

/// One located problem in a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Byte range in the manifest source the problem points at.
    pub span: Range<usize>,
    /// What is wrong.
    pub message: String,
    /// An optional hint (did-you-mean, accepted values).
    pub help: Option<String>,
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
            }],
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
            writeln!(f, "error: {}", d.message)?;
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
