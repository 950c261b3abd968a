//! One run of the plan, declared once: what [`super::Plan::run`] renders, what the runner executes,
//! and what plan.json records of it (DESIGN 5, `runs`), written and read through the same serde
//! derive (`bundle::plan_file` writes it, `bundle::read::Bundle::planned_runs` reads it).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Allocator;
use crate::manifest::{Cell, EnvPolicy};

/// Environment changes a run gets relative to its policy's base environment (only these are
/// recorded, never the whole environment): plan.json's and run.json's `env`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RunEnv {
    /// The base environment: the runner's whole one (`inherit`) or the clean policy's few
    /// variables (`clean`).
    pub policy: EnvPolicy,
    /// Variables set (manifest `env`, `CUDA_VISIBLE_DEVICES`, `HWR_*`), in the order applied.
    pub set: Vec<(String, String)>,
    /// Variables removed (`env-unset`).
    pub unset: Vec<String>,
}

impl Default for RunEnv {
    /// The runner's environment unchanged.
    fn default() -> RunEnv {
        RunEnv {
            policy: EnvPolicy::Inherit,
            set: Vec::new(),
            unset: Vec::new(),
        }
    }
}

/// One run of the plan, and one entry of plan.json's `runs` (the fields in this order, kebab-case).
///
/// What plan.json does not hold is not read back: an entry read from a bundle has
/// `environment: None` and an `allocator` with its name only (the library's path is in `env` as
/// `LD_PRELOAD`; its sha256 is run.json's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PlannedRun {
    /// Unique, file-name-safe id: zero-padded index, cell values, repetition.
    pub run_id: String,
    /// 0-based position in execution order.
    pub index: usize,
    /// Matrix values in manifest key order; a JSON object keyed by matrix key (a key twice is
    /// an error when read).
    #[serde(with = "cell_map")]
    pub cell: Cell,
    /// 1-based repetition.
    pub repetition: u32,
    /// argv to execute (`["/bin/sh", "-c", text]` for `shell`).
    pub argv: Vec<String>,
    /// Absolute working directory (written lossily as UTF-8 when it is not).
    #[serde(with = "lossy_path")]
    pub workdir: PathBuf,
    /// Output file name inside the run folder (no `/`, never `..`).
    pub output: String,
    /// Environment changes: policy, variables set (in order applied), variables removed.
    pub env: RunEnv,
    /// CPUs the run is pinned to.
    pub cpus: Vec<usize>,
    /// Whole-run timeout (`timeout-seconds`, seconds; `null` = none).
    #[serde(rename = "timeout-seconds", default, with = "seconds_opt")]
    pub timeout: Option<Duration>,
    /// SIGTERM-to-SIGKILL grace period (`grace-seconds`, seconds).
    #[serde(rename = "grace-seconds", with = "seconds")]
    pub grace: Duration,
    /// `[isolation] allocator` of this run, resolved to its library (its `sha256` is left to the
    /// runner); `None` when the manifest gives none. plan.json records its name.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "allocator_name")]
    pub allocator: Option<Allocator>,
    /// The Python environment of this run (matrix key `environment`), when the manifest has
    /// `[environments]`; not in plan.json (its name is the cell's `environment`).
    #[serde(skip)]
    pub environment: Option<RunEnvironment>,
}

/// A run's Python environment: its name and, once built, its lock's sha256 and venv folder (the
/// run gets `VIRTUAL_ENV` set to it, and its `bin/` first on PATH from the runner).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RunEnvironment {
    /// `[environments.<name>]`.
    pub name: String,
    /// sha256 (hex) of the environment's lock.txt.
    pub lock_sha256: Option<String>,
    /// The venv folder.
    pub venv: Option<PathBuf>,
}

/// A [`Cell`] as a JSON object in key order; reading refuses a key given twice.
mod cell_map {
    use std::fmt;

    use serde::de::{self, MapAccess, Visitor};
    use serde::ser::SerializeMap;
    use serde::{Deserializer, Serializer};

    use crate::manifest::{Cell, Value};

    pub fn serialize<S: Serializer>(cell: &Cell, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(cell.len()))?;
        for (k, v) in cell {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Cell, D::Error> {
        struct CellVisitor;
        impl<'de> Visitor<'de> for CellVisitor {
            type Value = Cell;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of matrix key to value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Cell, A::Error> {
                let mut cell: Cell = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    if cell.iter().any(|(have, _)| *have == k) {
                        return Err(de::Error::custom(format_args!("matrix key `{k}` given twice")));
                    }
                    cell.push((k, v));
                }
                Ok(cell)
            }
        }
        d.deserialize_map(CellVisitor)
    }
}

/// A path as a string (lossy when not UTF-8).
mod lossy_path {
    use std::path::{Path, PathBuf};

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&path.to_string_lossy())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        String::deserialize(d).map(PathBuf::from)
    }
}

/// A duration as seconds (f64); reading refuses a negative or non-finite number.
mod seconds {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs)
            .map_err(|_| de::Error::custom(format_args!("{secs} is not a number of seconds >= 0")))
    }
}

/// [`seconds`], or `null` for none.
mod seconds_opt {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::seconds::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        struct Secs(#[serde(with = "super::seconds")] Duration);
        Ok(Option::<Secs>::deserialize(d)?.map(|s| s.0))
    }
}

/// An allocator as its name; read back with neither path nor sha256.
mod allocator_name {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Allocator;

    pub fn serialize<S: Serializer>(a: &Option<Allocator>, s: S) -> Result<S::Ok, S::Error> {
        match a {
            Some(a) => s.serialize_str(&a.name),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Allocator>, D::Error> {
        Ok(Option::<String>::deserialize(d)?.map(|name| Allocator {
            name,
            path: None,
            sha256: None,
        }))
    }
}
