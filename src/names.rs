//! File names as bytes: Linux names are byte strings, not text. Records keep a readable `path` /
//! `name` (the bytes decoded as UTF-8, invalid sequences shown as U+FFFD) and, only when the name
//! is not valid UTF-8, the exact bytes beside it as lowercase hex (`path-bytes` in provenance.json,
//! `name-bytes` in run.json `artifacts`). Readers take the bytes when present, so two names that
//! differ only in their invalid bytes stay two names. A leaf: imports no other module of the crate.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The exact bytes of a name that is not valid UTF-8; JSON: a string of lowercase hex digits, two
/// per byte (`"626164ff"` for `bad\xff`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NameBytes(Vec<u8>);

impl NameBytes {
    /// `Some` when `bytes` is not valid UTF-8 (the readable form then loses bytes), else `None`.
    pub fn if_needed(bytes: &[u8]) -> Option<NameBytes> {
        std::str::from_utf8(bytes)
            .is_err()
            .then(|| NameBytes(bytes.to_vec()))
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Lowercase hex, two digits a byte.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses [`NameBytes::to_hex`]'s form.
    ///
    /// # Errors
    /// What is wrong with `text` (odd length, not a hex digit).
    pub fn from_hex(text: &str) -> Result<NameBytes, String> {
        if !text.len().is_multiple_of(2) {
            return Err(format!("name bytes {text:?}: odd number of hex digits"));
        }
        (0..text.len())
            .step_by(2)
            .map(|i| {
                text.get(i..i + 2)
                    .and_then(|d| u8::from_str_radix(d, 16).ok())
                    .ok_or_else(|| format!("name bytes {text:?}: not hex digits"))
            })
            .collect::<Result<Vec<u8>, String>>()
            .map(NameBytes)
    }
}

impl Serialize for NameBytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for NameBytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NameBytes, D::Error> {
        let text = String::deserialize(d)?;
        NameBytes::from_hex(&text).map_err(serde::de::Error::custom)
    }
}

/// The readable form of `bytes` and, when it loses bytes, the exact bytes.
pub fn split(bytes: &[u8]) -> (String, Option<NameBytes>) {
    (
        String::from_utf8_lossy(bytes).into_owned(),
        NameBytes::if_needed(bytes),
    )
}

/// The exact bytes of a recorded name: `raw` when present, else `readable`'s.
pub fn bytes_of<'a>(readable: &'a str, raw: Option<&'a NameBytes>) -> &'a [u8] {
    raw.map_or(readable.as_bytes(), NameBytes::as_bytes)
}

/// The recorded name as a relative path (exact bytes, see [`bytes_of`]).
pub fn path_of(readable: &str, raw: Option<&NameBytes>) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(bytes_of(readable, raw)))
}

/// The bytes of `path`.
pub fn path_bytes(path: &Path) -> &[u8] {
    path.as_os_str().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_utf8_names_need_no_bytes() {
        assert_eq!(NameBytes::if_needed("plain é".as_bytes()), None);
        let raw = NameBytes::if_needed(b"bad\xff.txt").unwrap();
        assert_eq!(raw.to_hex(), "626164ff2e747874");
        assert_eq!(NameBytes::from_hex(&raw.to_hex()).unwrap(), raw);
        assert!(NameBytes::from_hex("6").is_err());
        assert!(NameBytes::from_hex("zz").is_err());
        let (readable, raw) = split(b"bad\xff.txt");
        assert_eq!(readable, "bad\u{fffd}.txt");
        assert_eq!(path_bytes(&path_of(&readable, raw.as_ref())), b"bad\xff.txt");
        let json = serde_json::to_string(&raw).unwrap();
        assert_eq!(json, "\"626164ff2e747874\"");
    }
}
