//! The quick read of a retention-schema output read whole (DESIGN 7): what a report of a large
//! bundle spends most of its time on, one output per run.
//!
//! [`read`] parses the document straight into what the report keeps of it (the `arguments` and
//! top-level fields of [`DocFields`], each sample's [`SampleField`]s handed to an
//! [`Accumulator`], the values of `[report] metrics` pointers to top-level keys), with fixed
//! field names instead of the general reader's pointer tree
//! ([`crate::bundle::output::Interest`]). It takes only documents of the plain shape: an object
//! whose `samples` (when there) is an array of objects whose `phase` (when there) is a string,
//! `arguments` and `mappings` objects or `null`, no key read twice in one object, no key that a longer metric pointer goes into.
//! Anything else gives `None`, and the caller reads the document again with the general reader,
//! which says what is unusable in its own words: the two agree on every document this one
//! takes (tested against each other in `report::collection`'s tests). [`Pointers::new`] says
//! which metric pointers it can take at all.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::retention::{Accumulator, DocFields, Phase, SampleField, SampleFields};
use crate::bundle::output::{Scalar, checked_whole};

/// The `[report] metrics` pointers as [`read`] takes them: each a top-level key (`/name`), or a
/// longer pointer whose first key the document must not have (else the general reader reads it).
#[derive(Debug, Clone)]
pub struct Pointers {
    /// The top-level keys read: [`DOC_KEYS`], then those of the metric pointers.
    names: Vec<String>,
    /// Per metric pointer, in order: the index in `names` of its key, and whether it goes
    /// deeper (the document then must not have that key).
    metrics: Vec<(usize, bool)>,
}

impl Pointers {
    /// The quick reading of `pointers` (`[report] metrics`, name and pointer); `None` when one
    /// of them is one it does not take: the document itself (`""`), one into a key of the
    /// retention schema (`arguments`, `completed`, ...), or one into a key also taken whole.
    pub fn new(pointers: &[(String, String)]) -> Option<Pointers> {
        let mut names: Vec<String> = DOC_KEYS.iter().map(|k| k.to_string()).collect();
        let mut metrics = Vec::new();
        let mut whole = Vec::new();
        let mut deep = Vec::new();
        for (_, pointer) in pointers {
            let tokens = crate::bundle::output::tokens(pointer).ok()?;
            let first = tokens.first()?;
            if ["arguments", "mappings", "samples"].contains(&first.as_str()) {
                return None;
            }
            let at = match names.iter().position(|n| n == first) {
                Some(at) => at,
                None => {
                    names.push(first.clone());
                    names.len() - 1
                }
            };
            let deeper = tokens.len() > 1;
            if deeper && at < DOC_KEYS.len() {
                // Into `completed` or `last_tensor_alive`, which are also read whole.
                return None;
            }
            if deeper { &mut deep } else { &mut whole }.push(at);
            metrics.push((at, deeper));
        }
        if whole.iter().any(|at| deep.contains(at)) {
            return None;
        }
        Some(Pointers { names, metrics })
    }
}

/// What [`read`] found besides the samples it handed to the accumulator.
#[derive(Debug, Default)]
pub struct Quick {
    /// The document-level fields.
    pub doc: DocFields,
    /// `samples` is there (an array: every element was handed to the accumulator).
    pub samples: bool,
    /// `mappings.source` is a string: the built-in probe's breakdown by mapping is there.
    pub probe_mappings: bool,
    /// The value at each metric pointer, in the order of [`Pointers`] (`None`: not there).
    pub metrics: Vec<Option<Scalar>>,
}

/// Reads `bytes`, one whole output (after the same UTF-8 check and lone-surrogate reading as the
/// general reader, [`checked_whole`]), handing each sample to `acc` in order and keeping the
/// values at `pointers`. `None` when the document is not of the plain shape this reader takes
/// (see the module), or not valid: `acc` may then hold some of its samples and is to be thrown
/// away.
pub fn read(bytes: &[u8], acc: &mut Accumulator, pointers: &Pointers) -> Option<Quick> {
    let text = checked_whole(bytes)?;
    let mut de = serde_json::Deserializer::from_str(&text);
    let quick = DocSeed { acc, pointers }.deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(quick)
}

/// A value as the general reader keeps it ([`Scalar`]): containers as their kind (an array with
/// its length), the rest as is.
struct Kept(Scalar);

impl<'de> de::Deserialize<'de> for Kept {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Kept, D::Error> {
        d.deserialize_any(KeptVisitor)
    }
}

struct KeptVisitor;

impl<'de> Visitor<'de> for KeptVisitor {
    type Value = Kept;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Kept, E> {
        Ok(Kept(Scalar::Null))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Kept, E> {
        Ok(Kept(Scalar::Bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Kept, E> {
        Ok(Kept(Scalar::Number(v.into())))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Kept, E> {
        Ok(Kept(Scalar::Number(v.into())))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Kept, E> {
        Ok(Kept(
            serde_json::Number::from_f64(v).map_or(Scalar::Null, Scalar::Number),
        ))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Kept, E> {
        Ok(Kept(if v.len() <= crate::bundle::output::MAX_KEPT_STRING {
            Scalar::String(v.to_string())
        } else {
            Scalar::LongString(v.len())
        }))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kept, A::Error> {
        let mut n = 0;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            n += 1;
        }
        Ok(Kept(Scalar::Array(n)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kept, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Kept(Scalar::Object))
    }
}

/// Reads an object key as the index of `names` it is (`names.len()` for any other key). The key
/// is read as bytes (its escapes read), not checked as UTF-8 again: [`read`] has checked the whole
/// document, and a key equals a name exactly when its bytes do.
struct KeyIn<'n, N: AsRef<str>>(&'n [N]);

impl<'de, N: AsRef<str>> DeserializeSeed<'de> for KeyIn<'_, N> {
    type Value = usize;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_bytes(self)
    }
}

impl<'de, N: AsRef<str>> Visitor<'de> for KeyIn<'_, N> {
    type Value = usize;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }
    fn visit_bytes<E: de::Error>(self, key: &[u8]) -> Result<usize, E> {
        Ok(self
            .0
            .iter()
            .position(|n| n.as_ref().as_bytes() == key)
            .unwrap_or(self.0.len()))
    }
    fn visit_str<E: de::Error>(self, key: &str) -> Result<usize, E> {
        self.visit_bytes(key.as_bytes())
    }
}

/// Reads an object of the keys `names` (others skipped) into `values` (one per name), each value
/// kept ([`Kept`]) unless `on_key` reads it (and says so); a key twice is an error (the general
/// reader keeps the last: left to it).
fn fields<'de, A: MapAccess<'de>, N: AsRef<str>>(
    mut map: A,
    names: &[N],
    values: &mut [Option<Scalar>],
    mut on_key: impl FnMut(usize, &mut A) -> Result<bool, A::Error>,
) -> Result<(), A::Error> {
    let mut seen = smallvec::SmallVec::<[bool; 16]>::from_elem(false, names.len());
    while let Some(i) = map.next_key_seed(KeyIn(names))? {
        if i == names.len() {
            map.next_value::<IgnoredAny>()?;
            continue;
        }
        if std::mem::replace(&mut seen[i], true) {
            return Err(de::Error::custom("a key twice"));
        }
        if !on_key(i, &mut map)? {
            values[i] = Some(map.next_value::<Kept>()?.0);
        }
    }
    Ok(())
}

/// An object of the keys `names` or `null` (no value); anything else is left to the general
/// reader.
struct Object<const N: usize>(&'static [&'static str; N]);

impl<'de, const N: usize> DeserializeSeed<'de> for Object<N> {
    type Value = [Option<Scalar>; N];
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, const N: usize> Visitor<'de> for Object<N> {
    type Value = [Option<Scalar>; N];
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object or null")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(std::array::from_fn(|_| None))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let mut values = std::array::from_fn(|_| None);
        fields(map, self.0, &mut values, |_, _| Ok(false))?;
        Ok(values)
    }
}

/// The top-level keys read, in [`DocSeed`]'s order.
const DOC_KEYS: [&str; 5] = [
    "arguments",
    "last_tensor_alive",
    "completed",
    "mappings",
    "samples",
];
const ARGUMENT_KEYS: [&str; 2] = ["mode", "tensor_elements"];
const MAPPINGS_KEYS: [&str; 1] = ["source"];
const SAMPLE_KEYS: [&str; SampleField::ALL.len()] = {
    let mut names = [""; SampleField::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = SampleField::ALL[i].name();
        i += 1;
    }
    names
};

struct DocSeed<'a> {
    acc: &'a mut Accumulator,
    pointers: &'a Pointers,
}

impl<'de> DeserializeSeed<'de> for DocSeed<'_> {
    type Value = Quick;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Quick, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for DocSeed<'_> {
    type Value = Quick;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Quick, A::Error> {
        let DocSeed { acc, pointers } = self;
        let mut arguments: [Option<Scalar>; 2] = [None, None];
        let mut source = None;
        let mut samples = false;
        let mut top = vec![None; pointers.names.len()];
        fields(map, &pointers.names, &mut top, |i, map| {
            match DOC_KEYS.get(i).copied() {
                Some("arguments") => arguments = map.next_value_seed(Object(&ARGUMENT_KEYS))?,
                Some("mappings") => [source] = map.next_value_seed(Object(&MAPPINGS_KEYS))?,
                Some("samples") => {
                    map.next_value_seed(SamplesSeed { acc: &mut *acc })?;
                    samples = true;
                }
                Some(_) => return Ok(false),
                // A key a longer metric pointer goes into: left to the general reader.
                None if pointers.metrics.iter().any(|&(at, deeper)| at == i && deeper) => {
                    return Err(de::Error::custom("a key a pointer goes into"));
                }
                None => return Ok(false),
            }
            Ok(true)
        })?;
        let [mode, tensor_elements] = arguments;
        let value = |key: &str| top[DOC_KEYS.iter().position(|k| *k == key).expect("a doc key")].as_ref();
        Ok(Quick {
            doc: DocFields {
                mode: mode.as_ref().and_then(Scalar::as_str).map(str::to_string),
                tensor_elements: tensor_elements.as_ref().and_then(Scalar::as_u64),
                last_tensor_alive: value("last_tensor_alive").and_then(Scalar::as_bool),
                completed: value("completed").and_then(Scalar::as_bool),
            },
            samples,
            probe_mappings: source.as_ref().and_then(Scalar::as_str).is_some(),
            metrics: pointers
                .metrics
                .iter()
                .map(|&(at, deeper)| if deeper { None } else { top[at].clone() })
                .collect(),
        })
    }
}

/// `samples`, an array of objects: each handed to the accumulator as it is read.
struct SamplesSeed<'a> {
    acc: &'a mut Accumulator,
}

impl<'de> DeserializeSeed<'de> for SamplesSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for SamplesSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of objects")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        while let Some((phase, mut values)) = seq.next_element_seed(SampleSeed)? {
            let mut sample = SampleFields {
                phase,
                ..SampleFields::default()
            };
            for (field, value) in SampleField::ALL.iter().zip(&mut values) {
                if *field != SampleField::Phase {
                    sample.set(*field, value.take().as_ref());
                }
            }
            self.acc.push(index, Some(sample));
            index += 1;
        }
        Ok(())
    }
}

/// One sample: an object (anything else is left to the general reader), its phase read apart
/// ([`PhaseSeed`]) and its other fields kept, in [`SampleField::ALL`]'s order.
struct SampleSeed;

impl<'de> DeserializeSeed<'de> for SampleSeed {
    type Value = (Option<Phase>, [Option<Scalar>; SampleField::ALL.len()]);
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for SampleSeed {
    type Value = (Option<Phase>, [Option<Scalar>; SampleField::ALL.len()]);
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sample object")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let mut values = std::array::from_fn(|_| None);
        let mut phase = None;
        fields(map, &SAMPLE_KEYS, &mut values, |i, map| {
            if SampleField::ALL[i] != SampleField::Phase {
                return Ok(false);
            }
            phase = map.next_value_seed(PhaseSeed)?;
            Ok(true)
        })?;
        Ok((phase, values))
    }
}

/// A sample's `phase` as [`SampleFields::set`] reads the string the general reader keeps of it,
/// without keeping it: a string of at most [`crate::bundle::output::MAX_KEPT_STRING`] bytes is a
/// phase, a longer one none. Anything but a string is an error here: such a document is left to
/// the general reader.
struct PhaseSeed;

impl<'de> DeserializeSeed<'de> for PhaseSeed {
    type Value = Option<Phase>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<Phase>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for PhaseSeed {
    type Value = Option<Phase>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a phase string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<Phase>, E> {
        Ok((v.len() <= crate::bundle::output::MAX_KEPT_STRING).then(|| Phase::of(v)))
    }
}
