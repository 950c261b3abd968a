//! The plan's cells: the cartesian product of the matrix axes minus `exclude`, plus `include`
//! ([`cells`]), held without one `Vec` per cell ([`Cells`], [`CellRef`]), and how a cell is
//! spelt in messages ([`describe_cell`]) and file names ([`sanitize`]).

use std::collections::{BTreeMap, HashMap};

use super::error::PlanError;
use crate::manifest::{Cell, Manifest, Value};

/// The plan's cells without one `Vec` per cell: the axes (values and their file-name spellings),
/// which product cells survive `exclude` (all of them, or a list of mixed-radix product indices,
/// last key fastest), then the `include` cells, which are few.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Cells {
    /// Values of each axis, manifest order.
    pub(super) axes: Vec<(String, Vec<Value>)>,
    /// [`sanitize`]d text of each axis value (for run ids and output names).
    pub(super) sanitized: Vec<Vec<String>>,
    /// Product cells one step of each axis spans: `strides[k]` = product of the later axes' lengths.
    pub(super) strides: Vec<usize>,
    /// Product cells kept: `None` = every one of them, in product order.
    pub(super) kept: Option<Vec<u32>>,
    /// Number of product cells kept.
    pub(super) kept_len: usize,
    /// `include` cells, after the product cells.
    pub(super) include: Vec<Cell>,
}

/// One cell of a plan, borrowed: a product cell by index or an include cell.
#[derive(Debug, Clone, Copy)]
pub(super) enum CellRef<'p> {
    Product(&'p Cells, u32),
    Include(&'p Cell),
}

impl<'p> CellRef<'p> {
    /// The value of axis `k` (manifest order) and its [`sanitize`]d text when precomputed.
    pub(super) fn get(&self, k: usize) -> (&'p Value, Option<&'p str>) {
        match *self {
            CellRef::Product(cells, p) => {
                let j = cells.digit(p, k);
                (&cells.axes[k].1[j], Some(cells.sanitized[k][j].as_str()))
            }
            CellRef::Include(cell) => (&cell[k].1, None),
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            CellRef::Product(cells, _) => cells.axes.len(),
            CellRef::Include(cell) => cell.len(),
        }
    }

    pub(super) fn key(&self, k: usize) -> &'p str {
        match *self {
            CellRef::Product(cells, _) => &cells.axes[k].0,
            CellRef::Include(cell) => &cell[k].0,
        }
    }

    pub(super) fn value_of(&self, name: &str) -> Option<(&'p Value, Option<&'p str>)> {
        (0..self.len())
            .find(|&k| self.key(k) == name)
            .map(|k| self.get(k))
    }

    pub(super) fn to_cell(self) -> Cell {
        (0..self.len())
            .map(|k| (self.key(k).to_string(), self.get(k).0.clone()))
            .collect()
    }
}

impl Cells {
    pub(super) fn len(&self) -> usize {
        self.kept_len + self.include.len()
    }

    /// Index into axis `k`'s values of product cell `p` (mixed radix, last key fastest).
    pub(super) fn digit(&self, p: u32, k: usize) -> usize {
        (p as usize / self.strides[k]) % self.axes[k].1.len()
    }

    pub(super) fn get(&self, c: usize) -> CellRef<'_> {
        if c < self.kept_len {
            let p = self.kept.as_ref().map_or(c as u32, |k| k[c]);
            CellRef::Product(self, p)
        } else {
            CellRef::Include(&self.include[c - self.kept_len])
        }
    }
}

/// A matrix value as a hashable key: equal values (by `PartialEq`) give equal keys (floats by
/// their bits, with `-0.0` as `0.0`); a NaN equals nothing, so lookups confirm with `==`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum ValueKey<'a> {
    Bool(bool),
    Int(i64),
    Float(u64),
    Str(&'a str),
}

fn value_key(v: &Value) -> ValueKey<'_> {
    match v {
        Value::Bool(b) => ValueKey::Bool(*b),
        Value::Int(i) => ValueKey::Int(*i),
        Value::Float(f) => ValueKey::Float(if f.value == 0.0 { 0 } else { f.value.to_bits() }),
        Value::Str(s) => ValueKey::Str(s),
    }
}

/// The cells: the cartesian product of the axes in manifest order (last key varies fastest), minus
/// `exclude` matches, plus `include` entries.
///
/// Matching is indexed: each axis value gets a canonical index (the first equal value on its axis);
/// `exclude` entries are grouped by the set of keys they name, each group a hash set of canonical
/// index tuples, so each product cell costs one lookup per group, not one comparison per entry.
pub(super) fn cells(manifest: &Manifest, errors: &mut Vec<PlanError>) -> Cells {
    let axes = &manifest.matrix.axes;
    let mut strides = vec![1usize; axes.len()];
    for k in (0..axes.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * axes[k + 1].1.len();
    }
    let product: usize = axes.iter().map(|(_, v)| v.len()).product();
    // value key -> canonical index, per axis.
    let index: Vec<HashMap<ValueKey<'_>, u32>> = axes
        .iter()
        .map(|(_, values)| {
            let mut m = HashMap::new();
            for (j, v) in values.iter().enumerate() {
                m.entry(value_key(v)).or_insert(j as u32);
            }
            m
        })
        .collect();
    // An exclude entry names an axis value by [`Value::same_cell`] (`16.0` names `16`), as
    // `[report] control` and `--where` do: the exact value by its hash, else a scan of the axis.
    let canonical = |k: usize, v: &Value| -> Option<u32> {
        index[k]
            .get(&value_key(v))
            .copied()
            .filter(|&j| axes[k].1[j as usize] == *v)
            .or_else(|| {
                let j = axes[k].1.iter().position(|a| a.same_cell(v))?;
                index[k].get(&value_key(&axes[k].1[j])).copied()
            })
    };
    let canon_digit: Vec<Vec<u32>> = axes
        .iter()
        .enumerate()
        .map(|(k, (_, values))| values.iter().map(|v| canonical(k, v).unwrap_or(0)).collect())
        .collect();
    // Exclude entries by the axes they name; entries naming a value no axis has never match.
    let mut groups: BTreeMap<Vec<usize>, std::collections::HashSet<Vec<u32>>> = BTreeMap::new();
    for entry in &manifest.matrix.exclude {
        let mut keys = Vec::with_capacity(entry.len());
        let mut digits = Vec::with_capacity(entry.len());
        let mut possible = true;
        for (k, (key, _)) in axes.iter().enumerate() {
            if let Some(v) = entry.get(key) {
                match canonical(k, v) {
                    Some(j) => {
                        keys.push(k);
                        digits.push(j);
                    }
                    None => possible = false,
                }
            }
        }
        if possible && keys.len() == entry.len() {
            groups.entry(keys).or_default().insert(digits);
        }
    }
    let excluded = |p: usize, buf: &mut Vec<u32>| {
        groups.iter().any(|(keys, set)| {
            buf.clear();
            buf.extend(
                keys.iter()
                    .map(|&k| canon_digit[k][(p / strides[k]) % axes[k].1.len()]),
            );
            set.contains(buf.as_slice())
        })
    };
    let mut buf = Vec::new();
    let kept: Option<Vec<u32>> = (!groups.is_empty()).then(|| {
        (0..product)
            .filter(|&p| !excluded(p, &mut buf))
            .map(|p| p as u32)
            .collect()
    });
    let kept_len = kept.as_ref().map_or(product, Vec::len);

    let mut include: Vec<Cell> = Vec::new();
    let mut included: HashMap<Vec<ValueKey<'_>>, Vec<usize>> = HashMap::new();
    for entry in &manifest.matrix.include {
        let mut cell = Vec::with_capacity(axes.len());
        for (key, _) in axes {
            match entry.get(key) {
                Some(v) => cell.push((key.clone(), v.clone())),
                None => {
                    errors.push(PlanError::new(
                        "matrix.include",
                        format!("an include entry gives no value for `{key}`"),
                        None,
                    ));
                    return Cells {
                        axes: axes.clone(),
                        sanitized: Vec::new(),
                        strides,
                        kept,
                        kept_len,
                        include,
                    };
                }
            }
        }
        // In the product and not excluded?
        let digits: Option<Vec<u32>> = cell
            .iter()
            .enumerate()
            .map(|(k, (_, v))| canonical(k, v))
            .collect();
        let in_product = digits.is_some_and(|d| {
            let p: usize = d.iter().zip(&strides).map(|(&j, &s)| j as usize * s).sum();
            !excluded(p, &mut buf)
        });
        let key: Vec<ValueKey<'_>> = entry.values().map(value_key).collect();
        let earlier = included
            .get(&key)
            .is_some_and(|c| c.iter().any(|&i| include[i] == cell));
        if in_product || earlier {
            errors.push(PlanError::new(
                "matrix.include",
                format!(
                    "include entry {} duplicates a cell already in the matrix",
                    describe_cell(&cell)
                ),
                Some("remove it, or exclude the cell first".into()),
            ));
        } else {
            included.entry(key).or_default().push(include.len());
            include.push(cell);
        }
    }
    if kept_len + include.len() == 0 {
        errors.push(PlanError::new(
            "matrix.exclude",
            "every cell is excluded: the matrix is empty".into(),
            Some("loosen `exclude` or add `include` entries".into()),
        ));
    }
    let sanitized = axes
        .iter()
        .map(|(_, values)| values.iter().map(|v| sanitize(&v.to_string())).collect())
        .collect();
    Cells {
        axes: axes.clone(),
        sanitized,
        strides,
        kept,
        kept_len,
        include,
    }
}

/// `a=1, b=x` for messages.
pub fn describe_cell(cell: &Cell) -> String {
    if cell.is_empty() {
        return "(no matrix)".into();
    }
    cell.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Makes text safe as one file-name component: keeps `[A-Za-z0-9._+=-]`, maps everything else
/// (including `/`) to `_`, and breaks up `..`.
pub fn sanitize(text: &str) -> String {
    let mut s: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._+=-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    while s.contains("..") {
        s = s.replace("..", "_.");
    }
    s
}
