//! Drift: what changed in the repository between the capture before the first run and the one
//! after the last run, and the `provenance.json` document that records it.

use std::collections::BTreeMap;

use super::doc::{AfterCheck, PROVENANCE_FORMAT, ProvenanceDoc, Snapshot};

/// Compares two captures and lists what differs: `HEAD`, paths whose status entry or content
/// changed, and submodule paths whose checkout or dirtiness changed. Empty means no drift.
pub fn differences(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut changed = Vec::new();
    if before.head != after.head || before.reason != after.reason {
        changed.push("HEAD".to_owned());
    }
    let index = |s: &Snapshot| -> BTreeMap<String, Vec<(String, Option<String>)>> {
        let mut map: BTreeMap<String, Vec<_>> = BTreeMap::new();
        for l in &s.status {
            map.entry(l.path.clone())
                .or_default()
                .push((l.code.clone(), l.sha256.clone()));
        }
        map
    };
    let (b, a) = (index(before), index(after));
    let mut paths: Vec<&String> = b.keys().chain(a.keys()).collect();
    paths.sort();
    paths.dedup();
    for path in paths {
        if b.get(path) != a.get(path) {
            changed.push(path.clone());
        }
    }
    let subs = |s: &Snapshot| -> BTreeMap<String, (Option<String>, bool)> {
        s.submodules
            .iter()
            .map(|m| (m.path.clone(), (m.checked_out_commit.clone(), m.dirty)))
            .collect()
    };
    let (b, a) = (subs(before), subs(after));
    let mut paths: Vec<&String> = b.keys().chain(a.keys()).collect();
    paths.sort();
    paths.dedup();
    for path in paths {
        if b.get(path) != a.get(path) && !changed.contains(path) {
            changed.push(path.clone());
        }
    }
    if changed.is_empty() && before.patch_sha256 != after.patch_sha256 {
        // Same status and contents but a different patch (e.g. a staged-vs-unstaged move that
        // kept the status letters): still a change of recorded state.
        changed.push("working-tree.patch".to_owned());
    }
    changed
}

impl ProvenanceDoc {
    /// The document after the last run: `before`, the after-run check from `after`, and `drift`
    /// (true when HEAD, the status entries, the content of any changed or untracked file, or a
    /// submodule checkout differs between the captures; see [`differences`]).
    pub fn after_run(before: &Snapshot, after: &Snapshot) -> ProvenanceDoc {
        let changed = differences(before, after);
        let drift = !changed.is_empty();
        ProvenanceDoc {
            format: PROVENANCE_FORMAT,
            before: before.clone(),
            after: Some(AfterCheck {
                head: after.head.clone(),
                dirty: after.dirty,
                patch_sha256: after.patch_sha256.clone(),
                captured_at: after.captured_at.clone(),
                changed,
            }),
            drift: Some(drift),
        }
    }
}
