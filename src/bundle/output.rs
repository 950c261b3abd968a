//! The one reader of run outputs (DESIGN 5, 7): the output check the writer makes when a run ends
//! ([`check_output`]) and `hwr-exp report` ([`read_output`]) read a run's JSON output through the
//! same code with the same limits, so a document the check calls valid is one the report reads.
//!
//! A document smaller than the 1 MiB buffer is read whole and parsed from memory after the same
//! UTF-8 check; a larger one is streamed, never loaded whole: a [`Checked`] reader under a 1 MiB
//! [`BufReader`] checks that the bytes are UTF-8, and `serde_json` parses what it passes on. Only
//! the values an [`Interest`] asks for are kept ([`Scalar`]s at JSON Pointers, and the named fields
//! of each element of an array, handed to a callback one element at a time); everything else is
//! skipped with [`serde::de::IgnoredAny`]. Memory is therefore bounded by the buffer and the kept
//! values, not by the size of the output (a kept string longer than [`MAX_KEPT_STRING`] bytes is
//! kept as its length only, but is parsed whole before that).
//!
//! Any valid JSON document is valid output, however deep it nests (profilers' call trees are
//! hundreds of levels deep): `serde_json` skips an ignored value without recursion (one byte of
//! its scratch buffer per open array or object, no stack frame), and the parser only recurses
//! along the paths an [`Interest`] names, whose pointers have at most
//! [`crate::manifest::MAX_POINTER_TOKENS`] tokens: far inside `serde_json`'s recursion limit of
//! 128, whatever the document holds below or beside them.

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::contained::open_regular;
use super::format::OutputCheck;
use super::surrogates::{LoneSurrogates, surrogates_replaced};
use crate::manifest::OutputFormat;

/// Longest string value kept, bytes; a longer one is kept as [`Scalar::LongString`] (its length).
pub const MAX_KEPT_STRING: usize = 64 * 1024;

/// Size of the read buffer of a streamed document, bytes; a shorter document is read whole.
const BUFFER: usize = 1 << 20;

/// A value read out of an output, containers summarized.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number, as `serde_json` reads it (`as_i64`, `as_u64`, `as_f64` behave as on a `Value`).
    Number(serde_json::Number),
    /// A string of at most [`MAX_KEPT_STRING`] bytes.
    String(String),
    /// A longer string: its length in bytes.
    LongString(usize),
    /// An array: its number of elements.
    Array(usize),
    /// An object.
    Object,
}

impl Scalar {
    /// The value as `i64` when it is an integer number that fits (as `serde_json::Value::as_i64`).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Scalar::Number(n) => n.as_i64(),
            _ => None,
        }
    }

    /// The value as `u64` when it is a non-negative integer number (as `Value::as_u64`).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Scalar::Number(n) => n.as_u64(),
            _ => None,
        }
    }

    /// The string, when the value is a kept string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::String(s) => Some(s),
            _ => None,
        }
    }

    /// The boolean, when the value is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Scalar::Bool(b) => Some(*b),
            _ => None,
        }
    }
}

/// Where a kept value goes: a pointer's slot in [`Found::values`], or a field of the current list
/// element (index 0 is the element itself).
#[derive(Debug, Clone, Copy)]
enum Slot {
    Value(usize),
    Field(usize),
}

#[derive(Debug, Default)]
struct Node {
    slots: Vec<Slot>,
    /// This node is the array of list `n`.
    list: Option<usize>,
    children: Vec<(String, Node)>,
}

impl Node {
    fn child(&mut self, token: String) -> &mut Node {
        let at = match self.children.iter().position(|(k, _)| *k == token) {
            Some(i) => i,
            None => {
                self.children.push((token, Node::default()));
                self.children.len() - 1
            }
        };
        &mut self.children[at].1
    }

    fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.list.is_none() && self.children.is_empty()
    }
}

/// What to read out of an output: values at JSON Pointers ([`Interest::value`]) and, for arrays,
/// named fields of every element ([`Interest::each`]). The default asks for nothing: the document is
/// only checked.
#[derive(Debug, Default)]
pub struct Interest {
    root: Node,
    values: usize,
    /// Element template of each list: children are the fields (slot `Field(1..)`).
    lists: Vec<(Node, usize)>,
}

/// Splits an RFC 6901 JSON Pointer (`""` or `/a/b~1c`) into its unescaped tokens.
pub fn tokens(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(format!("JSON Pointer `{pointer}` does not start with `/`"));
    };
    let tokens: Vec<String> = rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    if tokens.len() > crate::manifest::MAX_POINTER_TOKENS {
        return Err(format!(
            "JSON Pointer `{pointer}` has {} tokens, more than {}",
            tokens.len(),
            crate::manifest::MAX_POINTER_TOKENS
        ));
    }
    Ok(tokens)
}

impl Interest {
    /// Asks for the value at `pointer` (RFC 6901, as `serde_json::Value::pointer`: array indexes
    /// are decimal without leading zeros); returns its index in [`Found::values`].
    ///
    /// # Errors
    /// When `pointer` is neither empty nor starts with `/`, or has more than
    /// [`crate::manifest::MAX_POINTER_TOKENS`] tokens.
    pub fn value(&mut self, pointer: &str) -> Result<usize, String> {
        let mut node = &mut self.root;
        for t in tokens(pointer)? {
            node = node.child(t);
        }
        let slot = self.values;
        node.slots.push(Slot::Value(slot));
        self.values += 1;
        Ok(slot)
    }

    /// Asks for the fields `fields` of every element of the array at `pointer`; returns the list's
    /// number, given back in each [`ListEvent`]. Lists do not nest: `pointer` must not lead through
    /// another list's elements.
    ///
    /// # Errors
    /// As [`Interest::value`].
    pub fn each(&mut self, pointer: &str, fields: &[&str]) -> Result<usize, String> {
        let mut node = &mut self.root;
        for t in tokens(pointer)? {
            node = node.child(t);
        }
        let list = self.lists.len();
        node.list = Some(list);
        let mut template = Node {
            slots: vec![Slot::Field(0)],
            ..Node::default()
        };
        for (i, f) in fields.iter().enumerate() {
            template.child((*f).to_string()).slots.push(Slot::Field(i + 1));
        }
        self.lists.push((template, fields.len() + 1));
        Ok(list)
    }
}

/// What [`read_output`] tells its callback about a list ([`Interest::each`]).
#[derive(Debug)]
pub enum ListEvent<'a> {
    /// The array of list `list` begins (again, when the key repeats: the later array wins, as in
    /// `serde_json::Value`).
    Start {
        /// The list's number.
        list: usize,
    },
    /// One element, in order.
    Element {
        /// The list's number.
        list: usize,
        /// 0-based index in the array.
        index: usize,
        /// The element itself (`fields[0]`: [`Scalar::Object`] for an object) and then the asked
        /// fields in the order given to [`Interest::each`], `None` where absent.
        fields: &'a [Option<Scalar>],
    },
}

/// What [`read_output`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Found {
    /// One entry per [`Interest::value`], `None` when the pointer matches nothing.
    pub values: Vec<Option<Scalar>>,
    /// One entry per [`Interest::each`]: `Some(true)` when the pointer is an array (its elements
    /// were given to the callback), `Some(false)` when it is another value, `None` when absent.
    pub lists: Vec<Option<bool>>,
}

/// Why an output could not be read.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The file could not be opened (missing, a symbolic link, a FIFO, ...).
    #[error("cannot read output: {0}")]
    Open(io::Error),
    /// Nothing at all.
    #[error("empty output")]
    Empty,
    /// Not one JSON document: the parser's message with line and column, or
    /// `not UTF-8 (byte N of the output)`.
    #[error("{0}")]
    Invalid(serde_json::Error),
}

/// A reader that fails with `InvalidData` at the first byte that is not UTF-8. It checks each
/// block it reads (placed under a [`BufReader`], blocks are the buffer's size), so the parser
/// above it sees only checked bytes. (`serde_json` skips the contents of strings it ignores
/// without checking them.)
pub struct Checked<R> {
    inner: R,
    /// Bytes of an incomplete character at the end of the previous block.
    carry: Vec<u8>,
    /// Bytes passed on so far.
    offset: u64,
}

impl<R: Read> Checked<R> {
    /// Wraps `inner`.
    pub fn new(inner: R) -> Self {
        Checked {
            inner,
            carry: Vec::new(),
            offset: 0,
        }
    }

    fn invalid(&self, at: usize, what: String) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{what} (byte {} of the output)", self.offset + at as u64),
        )
    }

    fn check_utf8(&mut self, block: &[u8]) -> io::Result<()> {
        let mut start = 0;
        while !self.carry.is_empty() {
            let Some(&b) = block.get(start) else {
                return Ok(());
            };
            self.carry.push(b);
            start += 1;
            match std::str::from_utf8(&self.carry) {
                Ok(_) => self.carry.clear(),
                Err(e) if e.error_len().is_none() => {}
                Err(_) => return Err(self.invalid(0, "not UTF-8".into())),
            }
        }
        match std::str::from_utf8(&block[start..]) {
            Ok(_) => Ok(()),
            Err(e) if e.error_len().is_none() => {
                self.carry = block[start + e.valid_up_to()..].to_vec();
                Ok(())
            }
            Err(e) => Err(self.invalid(start + e.valid_up_to(), "not UTF-8".into())),
        }
    }
}

impl Checked<io::Empty> {
    /// Checks `whole`, a whole document read at once, as reading it through a [`Checked`] reader
    /// would: the same errors at the same byte offsets.
    fn check_whole(whole: &[u8]) -> io::Result<()> {
        let mut c = Checked::new(io::empty());
        c.check_utf8(whole)?;
        if !c.carry.is_empty() {
            return Err(c.invalid(
                whole.len(),
                "not UTF-8: the output ends inside a character".into(),
            ));
        }
        Ok(())
    }
}

impl<R: Read> Read for Checked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 {
            if !self.carry.is_empty() {
                return Err(self.invalid(0, "not UTF-8: the output ends inside a character".into()));
            }
            return Ok(0);
        }
        self.check_utf8(&buf[..n])?;
        self.offset += n as u64;
        Ok(n)
    }
}

/// Where [`Walk`] writes what it keeps.
struct State<'c> {
    found: Found,
    fields: Vec<Option<Scalar>>,
    on_list: &'c mut dyn FnMut(ListEvent<'_>),
}

/// Walks one value with the interest nodes active at its position.
struct Walk<'i, 's, 'c> {
    interest: &'i Interest,
    active: Nodes<'i>,
    state: &'s mut State<'c>,
}

impl<'i> Walk<'i, '_, '_> {
    fn keep(&mut self, value: impl Fn() -> Scalar) {
        for node in &self.active {
            for slot in &node.slots {
                match *slot {
                    Slot::Value(i) => self.state.found.values[i] = Some(value()),
                    Slot::Field(i) => self.state.fields[i] = Some(value()),
                }
            }
        }
    }

    fn lists(&self) -> impl Iterator<Item = usize> + '_ {
        self.active.iter().filter_map(|n| n.list)
    }

    fn children(&self, matches: impl Fn(&str) -> bool) -> Nodes<'i> {
        children(&self.active, matches)
    }
}

/// Interest nodes active at one place of a document: nearly always none or one (two pointers
/// seldom overlap), so kept inline without an allocation per object key.
type Nodes<'i> = smallvec::SmallVec<[&'i Node; 2]>;

/// The children of the nodes `active` whose token `matches`.
fn children<'i>(active: &[&'i Node], matches: impl Fn(&str) -> bool) -> Nodes<'i> {
    let mut found = Nodes::new();
    for node in active {
        for (token, child) in &node.children {
            if matches(token) {
                found.push(child);
            }
        }
    }
    found
}

impl<'de> DeserializeSeed<'de> for Walk<'_, '_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.active.iter().all(|n| n.is_empty()) {
            <IgnoredAny as de::Deserialize>::deserialize(d)?;
            return Ok(());
        }
        d.deserialize_any(self)
    }
}

/// Reads an object key and returns the interest nodes it leads to (without keeping the key).
struct Key<'a, 'i> {
    active: &'a [&'i Node],
}

impl<'de, 'i> DeserializeSeed<'de> for Key<'_, 'i> {
    type Value = Nodes<'i>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        // As bytes: `serde_json` then skips its UTF-8 check of the key, which the whole
        // document's check (`Checked`) has already made.
        d.deserialize_bytes(self)
    }
}

impl<'de, 'i> Visitor<'de> for Key<'_, 'i> {
    type Value = Nodes<'i>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }
    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(children(self.active, |k| k == key))
    }
    fn visit_bytes<E: de::Error>(self, key: &[u8]) -> Result<Self::Value, E> {
        Ok(children(self.active, |k| k.as_bytes() == key))
    }
}

impl<'de> Visitor<'de> for Walk<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(mut self) -> Result<(), E> {
        self.not_a_list();
        self.keep(|| Scalar::Null);
        Ok(())
    }

    fn visit_bool<E: de::Error>(mut self, v: bool) -> Result<(), E> {
        self.not_a_list();
        self.keep(|| Scalar::Bool(v));
        Ok(())
    }

    fn visit_i64<E: de::Error>(mut self, v: i64) -> Result<(), E> {
        self.not_a_list();
        self.keep(|| Scalar::Number(v.into()));
        Ok(())
    }

    fn visit_u64<E: de::Error>(mut self, v: u64) -> Result<(), E> {
        self.not_a_list();
        self.keep(|| Scalar::Number(v.into()));
        Ok(())
    }

    fn visit_f64<E: de::Error>(mut self, v: f64) -> Result<(), E> {
        self.not_a_list();
        self.keep(|| serde_json::Number::from_f64(v).map_or(Scalar::Null, Scalar::Number));
        Ok(())
    }

    fn visit_str<E: de::Error>(mut self, v: &str) -> Result<(), E> {
        self.not_a_list();
        self.keep(|| {
            if v.len() <= MAX_KEPT_STRING {
                Scalar::String(v.to_string())
            } else {
                Scalar::LongString(v.len())
            }
        });
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.not_a_list();
        self.keep(|| Scalar::Object);
        loop {
            let next = map.next_key_seed(Key { active: &self.active })?;
            let Some(children) = next else { break };
            if children.is_empty() {
                map.next_value::<IgnoredAny>()?;
            } else {
                map.next_value_seed(Walk {
                    interest: self.interest,
                    active: children,
                    state: self.state,
                })?;
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let lists: Vec<usize> = self.lists().collect();
        for &list in &lists {
            self.state.found.lists[list] = Some(true);
            (self.state.on_list)(ListEvent::Start { list });
        }
        let indexed = self.active.iter().any(|n| !n.children.is_empty());
        let mut index = 0usize;
        loop {
            let mut active = if indexed {
                let token = index.to_string();
                self.children(|k| k == token)
            } else {
                Nodes::new()
            };
            for &list in &lists {
                let (template, width) = &self.interest.lists[list];
                self.state.fields.clear();
                self.state.fields.resize(*width, None);
                active.push(template);
            }
            let more = if active.is_empty() {
                seq.next_element::<IgnoredAny>()?.is_some()
            } else {
                seq.next_element_seed(Walk {
                    interest: self.interest,
                    active,
                    state: self.state,
                })?
                .is_some()
            };
            if !more {
                break;
            }
            for &list in &lists {
                (self.state.on_list)(ListEvent::Element {
                    list,
                    index,
                    fields: &self.state.fields,
                });
            }
            index += 1;
        }
        self.keep(|| Scalar::Array(index));
        Ok(())
    }
}

impl Walk<'_, '_, '_> {
    fn not_a_list(&mut self) {
        let lists: Vec<usize> = self.lists().collect();
        for list in lists {
            self.state.found.lists[list] = Some(false);
        }
    }
}

/// Reads one JSON output document from `file`, keeping what `interest` asks for and handing the
/// elements of its lists to `on_list` one at a time. The document must be exactly one JSON value
/// (whitespace around it allowed), UTF-8, nested to any depth.
///
/// # Errors
/// [`OutputError::Empty`] when the file holds nothing,
/// [`OutputError::Invalid`] otherwise (syntax, trailing data, UTF-8, read errors).
pub fn read_output(
    file: File,
    interest: &Interest,
    on_list: &mut dyn FnMut(ListEvent<'_>),
) -> Result<Found, OutputError> {
    let len = file.metadata().map_or(BUFFER as u64, |m| m.len());
    if len >= BUFFER as u64 {
        return walk(interest, on_list, |walk| stream(file, walk));
    }
    // A document that fits the buffer is read whole and parsed from memory (several times faster
    // than through a reader, and what a report of many small outputs spends its time on); the
    // same UTF-8 check runs over it first, so both ways accept and refuse the same documents.
    let mut file = file;
    let mut head = Vec::with_capacity(len as usize + 1);
    match (&mut file).take(BUFFER as u64).read_to_end(&mut head) {
        Err(e) => Err(OutputError::Invalid(serde_json::Error::io(e))),
        Ok(n) if n < BUFFER => read_output_bytes(&head, interest, on_list),
        // It grew while being read: the bytes read so far, then the rest, streamed.
        Ok(_) => walk(interest, on_list, |walk| {
            stream(io::Cursor::new(head).chain(file), walk)
        }),
    }
}

/// [`read_output`] of a document already read whole (shorter than the 1 MiB buffer: what
/// [`crate::bundle::read::RunFolder::read_small`] gives with [`OUTPUT_WHOLE_LIMIT`]), with the
/// same checks and errors.
///
/// # Errors
/// As [`read_output`].
pub fn read_output_bytes(
    bytes: &[u8],
    interest: &Interest,
    on_list: &mut dyn FnMut(ListEvent<'_>),
) -> Result<Found, OutputError> {
    walk(interest, on_list, |walk| {
        Checked::check_whole(bytes).map_err(serde_json::Error::io)?;
        // Only a kept string needs its lone surrogates replaced (the output check keeps none).
        let bytes = if interest.root.is_empty() {
            std::borrow::Cow::Borrowed(bytes)
        } else {
            surrogates_replaced(bytes)
        };
        let mut de = serde_json::Deserializer::from_slice(&bytes);
        walk.deserialize(&mut de).and_then(|()| de.end())
    })
}

fn walk(
    interest: &Interest,
    on_list: &mut dyn FnMut(ListEvent<'_>),
    parse: impl FnOnce(Walk<'_, '_, '_>) -> Result<(), serde_json::Error>,
) -> Result<Found, OutputError> {
    let mut state = State {
        found: Found {
            values: vec![None; interest.values],
            lists: vec![None; interest.lists.len()],
        },
        fields: Vec::new(),
        on_list,
    };
    let result = parse(Walk {
        interest,
        active: smallvec::smallvec![&interest.root],
        state: &mut state,
    });
    match result {
        Ok(()) => Ok(state.found),
        Err(e) if e.is_eof() && e.line() == 1 && e.column() == 0 => Err(OutputError::Empty),
        Err(e) => Err(OutputError::Invalid(e)),
    }
}

/// Parses one document streamed from `reader` through a [`Checked`] reader under a
/// [`BUFFER`]-byte buffer.
fn stream(reader: impl Read, walk: Walk<'_, '_, '_>) -> Result<(), serde_json::Error> {
    fn parse(reader: impl Read, walk: Walk<'_, '_, '_>) -> Result<(), serde_json::Error> {
        let mut de = serde_json::Deserializer::from_reader(BufReader::with_capacity(BUFFER, reader));
        walk.deserialize(&mut de).and_then(|()| de.end())
    }
    let checked = Checked::new(reader);
    // Only a kept string needs its lone surrogates replaced (the output check keeps none).
    if walk.interest.root.is_empty() {
        parse(checked, walk)
    } else {
        parse(LoneSurrogates::new(checked), walk)
    }
}

pub const OUTPUT_WHOLE_LIMIT: u64 = BUFFER as u64;

/// Checks a run's stdout file at `path` (its last part not followed when a symbolic link; only a
/// regular file is read): for JSON, exactly one document through [`read_output`] (one under 1 MiB
/// read whole, a larger one streamed); for text, anything non-empty is valid. Returns the check
/// and, when invalid, why.
pub fn check_output(path: &Path, format: OutputFormat) -> (OutputCheck, Option<String>) {
    let file = match open_regular(path) {
        Ok(f) => f,
        Err(e) => return (OutputCheck::Invalid, Some(format!("cannot read output: {e}"))),
    };
    let empty = file.metadata().map(|m| m.len() == 0).unwrap_or(false);
    if empty {
        return (OutputCheck::Empty, None);
    }
    if format == OutputFormat::Text {
        return (OutputCheck::Valid, None);
    }
    match read_output(file, &Interest::default(), &mut |_| {}) {
        Ok(_) => (OutputCheck::Valid, None),
        Err(OutputError::Empty) => (OutputCheck::Empty, None),
        Err(OutputError::Invalid(e)) => {
            let quoted = match e.classify() {
                serde_json::error::Category::Syntax | serde_json::error::Category::Data => {
                    bytes_at(path, e.line(), e.column())
                }
                _ => None,
            };
            // serde_json's "expected ident" is a literal it could not finish (`nul`, `nope`).
            let message = e
                .to_string()
                .replacen("expected ident", "expected null, true or false", 1);
            let text = match quoted {
                Some(q) => format!("{message}, at {q}"),
                None => message,
            };
            (OutputCheck::Invalid, Some(text))
        }
        Err(e) => (OutputCheck::Invalid, Some(e.to_string())),
    }
}

/// Bytes quoted from where a JSON parser stopped.
const QUOTED_BYTES: usize = 24;

/// Most bytes before that place quoted when it lies inside a word (`nope` for `null`).
const QUOTED_BACK: usize = 8;

/// The first [`QUOTED_BYTES`] bytes of the file at `path` from `line` (1-based) and `column`
/// (1-based, in bytes, as serde_json counts them), up to the end of that line, made printable and
/// quoted: `"Traceback (most recent c…"`. `None` when the file cannot be read again or the place
/// is past its end.
fn bytes_at(path: &Path, line: usize, column: usize) -> Option<String> {
    use std::io::BufRead;
    let mut reader = BufReader::new(open_regular(path).ok()?);
    for _ in 1..line {
        // A line is skipped in pieces so a huge one is never held whole.
        loop {
            let (done, used) = {
                let chunk = reader.fill_buf().ok()?;
                if chunk.is_empty() {
                    return None;
                }
                match chunk.iter().position(|b| *b == b'\n') {
                    Some(i) => (true, i + 1),
                    None => (false, chunk.len()),
                }
            };
            reader.consume(used);
            if done {
                break;
            }
        }
    }
    // A word the parser stopped inside or just after (`nope` or `nul`, where it expected
    // `null`) is quoted from its start: up to QUOTED_BACK bytes before the column are read too.
    let back = column.saturating_sub(1).min(QUOTED_BACK);
    let skip = (column.saturating_sub(1) - back) as u64;
    io::copy(&mut (&mut reader).take(skip), &mut io::sink()).ok()?;
    let mut window = Vec::with_capacity(back + QUOTED_BYTES + 4);
    (&mut reader)
        .take((back + QUOTED_BYTES) as u64 + 4)
        .read_to_end(&mut window)
        .ok()?;
    let alnum = |i: usize| window.get(i).is_some_and(u8::is_ascii_alphanumeric);
    let inside_word = alnum(back) || (back > 0 && alnum(back - 1));
    let start = if inside_word {
        back - window[..back.min(window.len())]
            .iter()
            .rev()
            .take_while(|b| b.is_ascii_alphanumeric())
            .count()
    } else {
        back
    };
    let window = &window[start.min(window.len())..];
    let end = window.iter().position(|b| *b == b'\n').unwrap_or(window.len());
    let window = &window[..end];
    if window.is_empty() {
        return None;
    }
    let more = window.len() > QUOTED_BYTES;
    let mut text = super::reason::printable(&window[..window.len().min(QUOTED_BYTES)]);
    if more {
        text.push('…');
    }
    Some(format!("\"{text}\""))
}

#[cfg(test)]
#[path = "output_surrogate_tests.rs"]
mod lone_surrogate_tests;

#[cfg(test)]
#[path = "output_tests.rs"]
mod tests;
