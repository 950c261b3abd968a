//! Lone UTF-16 surrogates in a run's JSON output: their `\uXXXX` escapes found and replaced by
//! that of U+FFFD, in a document read whole ([`surrogates_replaced`]) or streamed
//! ([`LoneSurrogates`]), for the output reader ([`super::output`]).

use std::io::{self, Read};

/// `bytes` with the escapes of lone surrogates replaced ([`replace_escapes`]), copied only when
/// there is one.
pub(super) fn surrogates_replaced(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let (lone, _) = lone_surrogates(bytes, true);
    if lone.is_empty() {
        return std::borrow::Cow::Borrowed(bytes);
    }
    let mut copy = bytes.to_vec();
    replace_escapes(&mut copy, &lone);
    std::borrow::Cow::Owned(copy)
}

/// The text that replaces the escape of a lone UTF-16 surrogate: U+FFFD, six bytes like the
/// escape it replaces, so the parser's line and column figures stay those of the file.
const REPLACEMENT_ESCAPE: &[u8; 6] = b"\\uFFFD";

/// The value of the four hex digits `digits` (`None` when they are not four hex digits).
fn hex4(digits: Option<&[u8]>) -> Option<u16> {
    let digits = digits?;
    if digits.len() != 4 {
        return None;
    }
    u16::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

/// The offsets in `bytes` of the `\uXXXX` escapes of lone UTF-16 surrogates: a high one
/// (D800-DBFF) not followed by the escape of a low one (DC00-DFFF), or a low one not preceded by a
/// high one. JSON's grammar allows them (Python's `json.dumps("\udc80")` writes one) and the
/// output check, which skips strings, passes them, but `serde_json` refuses to build a string of
/// one; the report reads each as U+FFFD instead ([`replace_escapes`]), so a document the check
/// calls valid is one the report reads.
///
/// Also returns how far the answer is final: with `at_end` false, an escape cut off by the end of
/// `bytes` (or a high surrogate whose next escape is cut off) is left undecided and the returned
/// length stops before its backslash, so that more bytes can be appended and scanned from there.
/// `bytes` must begin outside an escape.
pub(super) fn lone_surrogates(bytes: &[u8], at_end: bool) -> (Vec<usize>, usize) {
    let mut lone = Vec::new();
    let mut i = 0;
    let undecided = |at: usize, lone: Vec<usize>| if at_end { (lone, bytes.len()) } else { (lone, at) };
    while let Some(off) = memchr::memchr(b'\\', &bytes[i..]) {
        let at = i + off;
        match bytes.get(at + 1) {
            None => return undecided(at, lone),
            Some(b'u') => {}
            Some(_) => {
                i = at + 2;
                continue;
            }
        }
        if bytes.len() < at + 6 {
            return undecided(at, lone);
        }
        let Some(unit) = hex4(bytes.get(at + 2..at + 6)) else {
            // Not an escape the parser takes: it says so itself.
            i = at + 2;
            continue;
        };
        i = at + 6;
        match unit {
            0xD800..=0xDBFF => {
                let next_is_escape = match (bytes.get(at + 6), bytes.get(at + 7)) {
                    (Some(b'\\'), Some(b'u')) => Some(true),
                    (Some(b'\\'), None) | (None, _) => None,
                    _ => Some(false),
                };
                let paired = match next_is_escape {
                    Some(false) => false,
                    Some(true) if bytes.len() >= at + 12 => {
                        hex4(bytes.get(at + 8..at + 12)).is_some_and(|n| (0xDC00..=0xDFFF).contains(&n))
                    }
                    _ if !at_end => return undecided(at, lone),
                    _ => false,
                };
                if paired {
                    i = at + 12;
                } else {
                    lone.push(at);
                }
            }
            0xDC00..=0xDFFF => lone.push(at),
            _ => {}
        }
    }
    (lone, bytes.len())
}

/// Writes [`REPLACEMENT_ESCAPE`] over the escapes at the offsets `at` of `bytes`.
pub(super) fn replace_escapes(bytes: &mut [u8], at: &[usize]) {
    for &a in at {
        bytes[a..a + 6].copy_from_slice(REPLACEMENT_ESCAPE);
    }
}

/// A reader that passes on what `inner` reads with the escapes of lone surrogates replaced by
/// that of U+FFFD ([`lone_surrogates`]), for a streamed document; it holds back at most the
/// 11 bytes of an escape pair cut by the end of a read until the next one decides it.
pub(super) struct LoneSurrogates<R> {
    inner: R,
    /// Bytes read and not yet passed on; the first `ready` are final.
    held: Vec<u8>,
    ready: usize,
    eof: bool,
}

impl<R: Read> LoneSurrogates<R> {
    pub(super) fn new(inner: R) -> Self {
        LoneSurrogates {
            inner,
            held: Vec::new(),
            ready: 0,
            eof: false,
        }
    }
}

impl<R: Read> Read for LoneSurrogates<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.ready > 0 || (self.eof && self.held.is_empty()) || out.is_empty() {
                let n = self.ready.min(out.len());
                out[..n].copy_from_slice(&self.held[..n]);
                self.held.drain(..n);
                self.ready -= n;
                return Ok(n);
            }
            if !self.eof {
                let start = self.held.len();
                self.held.resize(start + (64 << 10), 0);
                let n = self.inner.read(&mut self.held[start..]);
                self.held.truncate(start + *n.as_ref().unwrap_or(&0));
                self.eof = n? == 0;
            }
            let (lone, ready) = lone_surrogates(&self.held, self.eof);
            replace_escapes(&mut self.held, &lone);
            self.ready = ready;
        }
    }
}
