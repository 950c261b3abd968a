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

/// `bytes`, one whole document, as [`read_output_bytes`] parses it when it keeps strings: `None`
/// when it is not UTF-8 (the same check), else with the escapes of lone UTF-16 surrogates read
/// as U+FFFD (as the general reader reads them). For a reader of its own
/// (`crate::report::quick`) that is to agree with this one. The text is a `str`, so that its
/// reader need not check each string's UTF-8 again.
pub fn checked_whole(bytes: &[u8]) -> Option<std::borrow::Cow<'_, str>> {
    // What [`Checked::check_whole`] checks, without the error it would say.
    let text = std::str::from_utf8(bytes).ok()?;
    Some(match surrogates_replaced(bytes) {
        std::borrow::Cow::Borrowed(_) => std::borrow::Cow::Borrowed(text),
        // Escapes replaced by escapes: ASCII for ASCII, still UTF-8.
        std::borrow::Cow::Owned(copy) => {
            std::borrow::Cow::Owned(String::from_utf8(copy).expect("ASCII escapes replaced by ASCII"))
        }
    })
}

/// `bytes` with the escapes of lone surrogates replaced ([`replace_escapes`]), copied only when
/// there is one.
fn surrogates_replaced(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let (lone, _) = lone_surrogates(bytes, true);
    if lone.is_empty() {
        return std::borrow::Cow::Borrowed(bytes);
    }
    let mut copy = bytes.to_vec();
    replace_escapes(&mut copy, &lone);
    std::borrow::Cow::Owned(copy)
}

/// Walks one document with `parse` from the root of `interest`, and says what it gave.
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
fn lone_surrogates(bytes: &[u8], at_end: bool) -> (Vec<usize>, usize) {
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
fn replace_escapes(bytes: &mut [u8], at: &[usize]) {
    for &a in at {
        bytes[a..a + 6].copy_from_slice(REPLACEMENT_ESCAPE);
    }
}

/// A reader that passes on what `inner` reads with the escapes of lone surrogates replaced by
/// that of U+FFFD ([`lone_surrogates`]), for a streamed document; it holds back at most the
/// 11 bytes of an escape pair cut by the end of a read until the next one decides it.
struct LoneSurrogates<R> {
    inner: R,
    /// Bytes read and not yet passed on; the first `ready` are final.
    held: Vec<u8>,
    ready: usize,
    eof: bool,
}

impl<R: Read> LoneSurrogates<R> {
    fn new(inner: R) -> Self {
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

/// Outputs shorter than this many bytes may be read whole ([`read_output_bytes`]).
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
mod lone_surrogate_tests {
    use super::*;
    use proptest::prelude::*;

    /// `text` with its lone-surrogate escapes replaced, the whole read at once.
    fn whole(text: &str) -> String {
        let mut b = text.as_bytes().to_vec();
        let (lone, len) = lone_surrogates(&b, true);
        assert_eq!(len, b.len());
        replace_escapes(&mut b, &lone);
        String::from_utf8(b).unwrap()
    }

    /// The same through [`LoneSurrogates`] fed `chunk` bytes per read and read `out` at a time.
    fn streamed(text: &str, chunk: usize, out: usize) -> String {
        struct Chunks<'a>(&'a [u8], usize);
        impl Read for Chunks<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self.1.min(buf.len()).min(self.0.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut r = LoneSurrogates::new(Chunks(text.as_bytes(), chunk));
        let mut got = Vec::new();
        let mut buf = vec![0; out];
        loop {
            let n = r.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8(got).unwrap()
    }

    #[test]
    fn lone_surrogates_become_u_fffd_and_pairs_and_other_escapes_stay() {
        let cases = [
            (r#"{"a":"x\ud800y"}"#, r#"{"a":"x\uFFFDy"}"#),
            (r#"{"a":"\udc80"}"#, r#"{"a":"\uFFFD"}"#),
            (r#"["\ud83d\ude00"]"#, r#"["\ud83d\ude00"]"#),
            (r#"["\ud83d\u0041"]"#, r#"["\uFFFD\u0041"]"#),
            (r#"["\ud83d\ud83d\ude00"]"#, r#"["\uFFFD\ud83d\ude00"]"#),
            (r#"["\ude00\ud83d"]"#, r#"["\uFFFD\uFFFD"]"#),
            (r#"["\\ud800"]"#, r#"["\\ud800"]"#),
            (r#"["\\\ud800"]"#, r#"["\\\uFFFD"]"#),
            (r#"["\u00e9\n\"\ud800"]"#, r#"["\u00e9\n\"\uFFFD"]"#),
            (r#"["\uzzzz"]"#, r#"["\uzzzz"]"#),
            (r#""\ud800"#, r#""\uFFFD"#),
        ];
        for (text, want) in cases {
            assert_eq!(whole(text), want, "{text}");
            for chunk in 1..14 {
                assert_eq!(streamed(text, chunk, 3), want, "{text} in pieces of {chunk}");
            }
        }
        // serde_json reads what the replacement gives.
        let v: serde_json::Value = serde_json::from_str(&whole(r#"{"a":"x\ud800y"}"#)).unwrap();
        assert_eq!(v["a"], "x\u{fffd}y");
    }

    #[test]
    fn a_report_reads_a_kept_string_with_a_lone_surrogate_whole_and_streamed() {
        let mut interest = Interest::default();
        let at = interest.value("/mode").unwrap();
        let small = br#"{"mode":"a\ud800b","n":1}"#.to_vec();
        let found = read_output_bytes(&small, &interest, &mut |_| {}).unwrap();
        assert_eq!(found.values[at], Some(Scalar::String("a\u{fffd}b".into())));
        // Past the 1 MiB buffer: streamed.
        let mut big = br#"{"pad":""#.to_vec();
        big.extend(std::iter::repeat_n(b'x', BUFFER + 10));
        big.extend_from_slice(br#"","mode":"a\udc00b"}"#);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("o");
        std::fs::write(&p, &big).unwrap();
        let found = read_output(File::open(&p).unwrap(), &interest, &mut |_| {}).unwrap();
        assert_eq!(found.values[at], Some(Scalar::String("a\u{fffd}b".into())));
        assert_eq!(check_output(&p, OutputFormat::Json).0, OutputCheck::Valid);
    }

    proptest! {
        #[test]
        fn streaming_replaces_what_the_whole_read_does(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just("\\ud800".to_string()),
                    Just("\\udc00".to_string()),
                    Just("\\ud83d\\ude00".to_string()),
                    Just("\\\\".to_string()),
                    Just("\\u0041".to_string()),
                    Just("\\n".to_string()),
                    Just("\\".to_string()),
                    Just("u".to_string()),
                    "[a-f0-9]{1,4}",
                ],
                0..24,
            ),
            chunk in 1usize..16,
            out in 1usize..16,
        ) {
            let text = parts.concat();
            prop_assert_eq!(streamed(&text, chunk, out), whole(&text));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn invalid_output_quotes_the_bytes_the_parser_stopped_at() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("o");
        let why = |bytes: &[u8]| {
            fs::write(&p, bytes).unwrap();
            let (check, why) = check_output(&p, OutputFormat::Json);
            assert_eq!(check, OutputCheck::Invalid);
            why.unwrap()
        };
        assert_eq!(
            why(b"Traceback (most recent call last):\n  File x\n"),
            "expected value at line 1 column 1, at \"Traceback (most recent c\u{2026}\""
        );
        assert_eq!(
            why(b"{\"a\": 1} and more"),
            "trailing characters at line 1 column 10, at \"and more\""
        );
        assert_eq!(
            why(b"{\n  \"a\": nope\n}"),
            "expected null, true or false at line 2 column 9, at \"nope\""
        );
        // A word is quoted from its start, not from where the parser stopped inside it.
        assert_eq!(
            why(b"not json"),
            "expected null, true or false at line 1 column 2, at \"not json\""
        );
        assert_eq!(
            why(b"[1, nul]"),
            "expected null, true or false at line 1 column 8, at \"nul]\""
        );
        let escaped = why(b"\x1b[31mred\x1b[0m");
        assert!(escaped.ends_with("at \"\\u{1b}[31mred\\u{1b}[0m\""), "{escaped}");
        // Where the document just ends there is nothing to quote.
        assert_eq!(why(b"{\"a\": "), "EOF while parsing a value at line 1 column 6");
    }

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn output_checks() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("o");
        let check = |bytes: &[u8], f| {
            fs::write(&p, bytes).unwrap();
            check_output(&p, f)
        };
        assert_eq!(check(b"{\"a\": 1}\n", OutputFormat::Json).0, OutputCheck::Valid);
        assert_eq!(check(b"", OutputFormat::Json).0, OutputCheck::Empty);
        assert_eq!(
            check(b"warning: x\n{\"a\": 1}", OutputFormat::Json).0,
            OutputCheck::Invalid
        );
        assert_eq!(
            check(b"{\"a\": 1} {}", OutputFormat::Json).0,
            OutputCheck::Invalid
        );
        assert_eq!(check(b"{\"a\": ", OutputFormat::Json).0, OutputCheck::Invalid);
        assert_eq!(check(b"anything", OutputFormat::Text).0, OutputCheck::Valid);
        assert_eq!(check(b"", OutputFormat::Text).0, OutputCheck::Empty);
        let (c, why) = check(b"{\"a\": \"\xff\"}", OutputFormat::Json);
        assert_eq!(c, OutputCheck::Invalid);
        assert!(why.unwrap().contains("not UTF-8 (byte 7"), "invalid UTF-8");
        let (c, why) = check(b"{\"a\": \"\xe2\x82\"}", OutputFormat::Json);
        assert_eq!(
            (c, why.is_some()),
            (OutputCheck::Invalid, true),
            "truncated character"
        );
        assert_eq!(
            check("{\"a\": \"\u{e9}\u{1f600}\"}".as_bytes(), OutputFormat::Json).0,
            OutputCheck::Valid,
            "multi-byte characters"
        );
        // Any depth is valid JSON: 130 levels (past serde_json's recursion limit) and 100,000.
        for depth in [127, 128, 130, 100_000] {
            assert_eq!(
                check(nested(depth).as_bytes(), OutputFormat::Json),
                (OutputCheck::Valid, None),
                "{depth} levels"
            );
        }
        let (c, why) = check(
            format!("{}1{}", "[".repeat(100_000), "]".repeat(99_999)).as_bytes(),
            OutputFormat::Json,
        );
        assert_eq!(c, OutputCheck::Invalid, "one bracket short");
        assert!(why.unwrap().contains("EOF"));
        // Brackets inside strings do not count.
        let s = format!("[\"{}\\\"\"]", "[".repeat(500));
        assert_eq!(check(s.as_bytes(), OutputFormat::Json).0, OutputCheck::Valid);
    }

    #[test]
    fn utf8_split_across_blocks_is_accepted() {
        let text = "\"\u{1f600}\u{e9}\"".repeat(3);
        let mut r = Checked::new(text.as_bytes());
        let mut out = Vec::new();
        let mut buf = [0u8; 1];
        loop {
            let n = r.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        assert_eq!(out, text.as_bytes());
    }

    #[test]
    fn pointers_and_lists_are_read_as_serde_json_values_would() {
        let doc = serde_json::json!({
            "a": {"b": [10, {"c": "x"}], "n": null, "t": true, "f": 1.5, "neg": -3},
            "samples": [{"phase": "baseline", "it": 1}, 7, {"phase": "loop", "it": 2, "deep": [[1]]}],
            "k/ey": 5, "t~x": 6, "dup": 1, "dup": 2
        });
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("o.json");
        fs::write(&p, r#"{"dup": 1, "x": 0, "dup": 2}"#).unwrap();
        let mut i = Interest::default();
        let dup = i.value("/dup").unwrap();
        let found = read_output(File::open(&p).unwrap(), &i, &mut |_| {}).unwrap();
        assert_eq!(found.values[dup], Some(Scalar::Number(2.into())), "last key wins");

        fs::write(&p, doc.to_string()).unwrap();
        let pointers = [
            "",
            "/a",
            "/a/b",
            "/a/b/0",
            "/a/b/1/c",
            "/a/b/01",
            "/a/n",
            "/a/t",
            "/a/f",
            "/a/neg",
            "/k~1ey",
            "/t~0x",
            "/samples/2/it",
            "/missing",
            "/a/b/x",
        ];
        let mut i = Interest::default();
        let slots: Vec<usize> = pointers.iter().map(|p| i.value(p).unwrap()).collect();
        let list = i.each("/samples", &["phase", "it"]).unwrap();
        let mut events = Vec::new();
        let found = read_output(File::open(&p).unwrap(), &i, &mut |e| {
            events.push(match e {
                ListEvent::Start { .. } => "start".to_string(),
                ListEvent::Element { index, fields, .. } => format!("{index}:{fields:?}"),
            })
        })
        .unwrap();
        for (ptr, slot) in pointers.iter().zip(slots) {
            let want = doc.pointer(ptr).map(|v| match v {
                serde_json::Value::Null => Scalar::Null,
                serde_json::Value::Bool(b) => Scalar::Bool(*b),
                serde_json::Value::Number(n) => Scalar::Number(n.clone()),
                serde_json::Value::String(s) => Scalar::String(s.clone()),
                serde_json::Value::Array(a) => Scalar::Array(a.len()),
                serde_json::Value::Object(_) => Scalar::Object,
            });
            assert_eq!(found.values[slot], want, "{ptr}");
        }
        assert_eq!(found.lists[list], Some(true));
        assert_eq!(events.len(), 4, "{events:?}");
        assert_eq!(events[0], "start");
        assert!(
            events[1].starts_with("0:[Some(Object), Some(String(\"baseline\"))"),
            "{events:?}"
        );
        assert_eq!(events[2], "1:[Some(Number(Number(7))), None, None]");
    }

    #[test]
    fn deep_documents_are_read_whatever_the_depth() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("o.json");
        for depth in [64, 100, 127, 130, 100_000] {
            // The value asked for sits beside the deep part and after it.
            let deep = format!("{}1{}", "{\"a\": ".repeat(depth), "}".repeat(depth));
            let text = format!(
                "{{\"tree\": {deep}, \"samples\": [{{\"phase\": \"loop\", \"deep\": {deep}}}], \"m\": 7}}"
            );
            fs::write(&p, &text).unwrap();
            assert_eq!(
                check_output(&p, OutputFormat::Json).0,
                OutputCheck::Valid,
                "{depth}"
            );
            let mut i = Interest::default();
            let m = i.value("/m").unwrap();
            let tree = i.value("/tree/a").unwrap();
            let near = i
                .value(&"/a".repeat(crate::manifest::MAX_POINTER_TOKENS.min(depth)))
                .unwrap();
            let list = i.each("/samples", &["phase", "deep"]).unwrap();
            let mut phases = Vec::new();
            let found = read_output(File::open(&p).unwrap(), &i, &mut |e| {
                if let ListEvent::Element { fields, .. } = e {
                    phases.push((fields[1].clone(), fields[2].clone()));
                }
            })
            .unwrap();
            assert_eq!(found.values[m], Some(Scalar::Number(7.into())), "{depth}");
            let inner = if depth == 1 {
                Scalar::Number(1.into())
            } else {
                Scalar::Object
            };
            assert_eq!(found.values[tree], Some(inner), "{depth}");
            assert_eq!(found.values[near], None, "{depth}: not under the root");
            assert_eq!(found.lists[list], Some(true));
            assert_eq!(
                phases,
                vec![(Some(Scalar::String("loop".into())), Some(Scalar::Object))]
            );
        }
        // A pointer as deep as allowed finds its value in a document deeper still.
        let depth = 1000;
        fs::write(&p, format!("{}1{}", "{\"a\": ".repeat(depth), "}".repeat(depth))).unwrap();
        let mut i = Interest::default();
        let at = i
            .value(&"/a".repeat(crate::manifest::MAX_POINTER_TOKENS))
            .unwrap();
        let found = read_output(File::open(&p).unwrap(), &i, &mut |_| {}).unwrap();
        assert_eq!(found.values[at], Some(Scalar::Object));
        let too_deep = "/a".repeat(crate::manifest::MAX_POINTER_TOKENS + 1);
        assert!(i.value(&too_deep).unwrap_err().contains("more than"));
    }
}
