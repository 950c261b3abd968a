//! Located manifest errors: `file:line:col`, the source line and a caret under the offending span.

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

impl Diagnostics {
    /// 1-based (line, column) of a byte offset; columns count characters.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.source.len());
        let before = &self.source[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (line, before[line_start..].chars().count() + 1)
    }
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
            let text = self.source.lines().nth(line - 1).unwrap_or("");
            let width = line.to_string().len();
            writeln!(f, "{:width$} |", "")?;
            writeln!(f, "{line} | {text}")?;
            let span_len = self.source
                [d.span.start.min(self.source.len())..d.span.end.min(self.source.len())]
                .lines()
                .next()
                .map_or(1, |s| s.chars().count().max(1));
            writeln!(
                f,
                "{:width$} | {}{}",
                "",
                " ".repeat(col - 1),
                "^".repeat(span_len)
            )?;
            if let Some(help) = &d.help {
                writeln!(f, "{:width$} = help: {help}", "")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}
