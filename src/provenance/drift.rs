//! Drift: what changed in the repository between the capture before the first run and the one
//! after the last run, and the `provenance.json` document that records it.

use std::collections::BTreeMap;

use super::doc::{AfterCheck, NestedRepository, PROVENANCE_FORMAT, ProvenanceDoc, Snapshot};

/// Compares two captures and lists what differs: `HEAD`, paths whose status entry, content or
/// mode changed, submodule paths whose checkout or dirtiness changed, nested repository paths
/// whose HEAD, dirtiness or status entries changed, paths hidden by an index bit whose content
/// changed, and paths libgit2 could not decide. Empty means no drift.
pub fn differences(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut changed = Vec::new();
    if before.head != after.head || before.reason != after.reason {
        changed.push("HEAD".to_owned());
    }
    type Entry = (String, Option<String>, Option<String>, Option<String>);
    let index = |s: &Snapshot| -> BTreeMap<String, Vec<Entry>> {
        let mut map: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
        for l in &s.status {
            map.entry(l.path.trim_end_matches('/').to_owned())
                .or_default()
                .push((
                    l.code.clone(),
                    l.orig_path.clone(),
                    l.sha256.clone(),
                    l.mode.clone(),
                ));
        }
        map
    };
    push_changed(&mut changed, &index(before), &index(after));
    let subs = |s: &Snapshot| -> BTreeMap<String, (Option<String>, bool)> {
        s.submodules
            .iter()
            .map(|m| (m.path.clone(), (m.checked_out_commit.clone(), m.dirty)))
            .collect()
    };
    push_changed(&mut changed, &subs(before), &subs(after));
    let nested = |s: &Snapshot| -> BTreeMap<String, NestedRepository> {
        s.nested_repositories
            .iter()
            .map(|n| (n.path.clone(), n.clone()))
            .collect()
    };
    push_changed(&mut changed, &nested(before), &nested(after));
    let unchecked = |s: &Snapshot| -> BTreeMap<String, (String, Option<String>)> {
        s.unchecked
            .iter()
            .map(|u| (u.path.clone(), (u.bit.clone(), u.sha256.clone())))
            .collect()
    };
    push_changed(&mut changed, &unchecked(before), &unchecked(after));
    let unknown = |s: &Snapshot| -> BTreeMap<String, String> {
        s.unknown_paths
            .iter()
            .map(|u| (u.path.clone(), u.reason.clone()))
            .collect()
    };
    push_changed(&mut changed, &unknown(before), &unknown(after));
    if changed.is_empty() && before.patch_sha256 != after.patch_sha256 {
        // Same status and contents but a different patch (e.g. a staged-vs-unstaged move that
        // kept the status letters): still a change of recorded state.
        changed.push("working-tree.patch".to_owned());
    }
    changed
}

/// Appends the keys whose values differ between `before` and `after` (present in one only, or
/// different), in key order, skipping keys already listed.
fn push_changed<V: PartialEq>(
    changed: &mut Vec<String>,
    before: &BTreeMap<String, V>,
    after: &BTreeMap<String, V>,
) {
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        if before.get(key) != after.get(key) && !changed.contains(key) {
            changed.push(key.clone());
        }
    }
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
