//! Placeholder templates (DESIGN 3): `{name}` is replaced, `{{` and `}}` are literal braces.

use std::ops::Range;

/// Built-in placeholder names, available in every template besides the matrix keys.
pub const BUILTINS: &[&str] = &["repetition", "run-id", "hwr-exp", "bundle", "run-dir"];

/// A piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment<'a> {
    /// Literal text (with `{{`/`}}` already unescaped).
    Text(String),
    /// `{name}`; `span` is the byte range of the whole `{name}` in the template text.
    Placeholder {
        /// The name between the braces.
        name: &'a str,
        /// Byte range of `{name}` within the template.
        span: Range<usize>,
    },
}

/// A malformed template: an unclosed `{`, a stray `}` or an empty `{}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TemplateError {
    /// What is wrong.
    pub message: String,
    /// Byte range within the template text.
    pub span: Range<usize>,
}

/// Splits a template into literal text and placeholders.
///
/// # Errors
/// [`TemplateError`] for an unclosed `{`, an unmatched `}` or an empty or invalid name.
pub fn parse(template: &str) -> Result<Vec<Segment<'_>>, TemplateError> {
    let mut out = Vec::new();
    let mut text = String::new();
    let bytes = template.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' if bytes.get(i + 1) == Some(&b'{') => {
                text.push('{');
                i += 2;
            }
            b'}' if bytes.get(i + 1) == Some(&b'}') => {
                text.push('}');
                i += 2;
            }
            b'{' => {
                let Some(len) = template[i + 1..].find('}') else {
                    return Err(TemplateError {
                        message: "unclosed `{` (write `{{` for a literal brace)".into(),
                        span: i..template.len(),
                    });
                };
                let name = &template[i + 1..i + 1 + len];
                let span = i..i + len + 2;
                if name.is_empty()
                    || !name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    return Err(TemplateError {
                        message: format!(
                            "`{{{name}}}` is not a placeholder name (letters, digits, `-`, `_`; write `{{{{` for a literal brace)"
                        ),
                        span,
                    });
                }
                if !text.is_empty() {
                    out.push(Segment::Text(std::mem::take(&mut text)));
                }
                out.push(Segment::Placeholder {
                    name,
                    span: span.clone(),
                });
                i = span.end;
            }
            b'}' => {
                return Err(TemplateError {
                    message: "unmatched `}` (write `}}` for a literal brace)".into(),
                    span: i..i + 1,
                });
            }
            _ => {
                let ch = template[i..].chars().next().unwrap_or('\0');
                text.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    if !text.is_empty() {
        out.push(Segment::Text(text));
    }
    Ok(out)
}

/// Substitutes every placeholder using `lookup`.
///
/// # Errors
/// The template's own [`TemplateError`], or one naming the first placeholder `lookup` does not know.
pub fn render(template: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(template.len() + 16);
    for seg in parse(template)? {
        match seg {
            Segment::Text(t) => out.push_str(&t),
            Segment::Placeholder { name, span } => match lookup(name) {
                Some(v) => out.push_str(&v),
                None => {
                    return Err(TemplateError {
                        message: format!("unknown placeholder `{{{name}}}`"),
                        span,
                    });
                }
            },
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_and_escapes() {
        let r = render("a{x}b{{c}}{run-id}", |n| match n {
            "x" => Some("1".into()),
            "run-id" => Some("R".into()),
            _ => None,
        });
        assert_eq!(r.unwrap(), "a1b{c}R");
    }

    #[test]
    fn reports_errors_with_spans() {
        assert_eq!(parse("ab{c").unwrap_err().span, 2..4);
        assert_eq!(parse("a}b").unwrap_err().span, 1..2);
        assert!(parse("{}").is_err());
        assert_eq!(render("x{nope}", |_| None).unwrap_err().span, 1..7);
    }
}

/// A template parsed once, to render many times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Placeholder(String, Range<usize>),
}

impl Template {
    /// Parses `text` (see [`parse`]).
    ///
    /// # Errors
    /// As [`parse`].
    pub fn compile(text: &str) -> Result<Template, TemplateError> {
        let parts = parse(text)?
            .into_iter()
            .map(|s| match s {
                Segment::Text(t) => Part::Text(t),
                Segment::Placeholder { name, span } => Part::Placeholder(name.to_string(), span),
            })
            .collect();
        Ok(Template { parts })
    }

    /// Whether the template has no placeholders (renders to the same text every time).
    pub fn is_constant(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Text(_)))
    }

    /// The names of the template's placeholders, in order (repeats included).
    pub fn placeholders(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Placeholder(name, _) => Some(name.as_str()),
            Part::Text(_) => None,
        })
    }

    /// Substitutes every placeholder using `lookup`.
    ///
    /// # Errors
    /// A [`TemplateError`] naming the first placeholder `lookup` does not know.
    pub fn render(&self, lookup: impl Fn(&str) -> Option<String>) -> Result<String, TemplateError> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Placeholder(name, span) => match lookup(name) {
                    Some(v) => out.push_str(&v),
                    None => {
                        return Err(TemplateError {
                            message: format!("unknown placeholder `{{{name}}}`"),
                            span: span.clone(),
                        });
                    }
                },
            }
        }
        Ok(out)
    }
}
