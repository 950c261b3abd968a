//! The files a bundle is set up with: present as regular files, their JSON readable, their
//! sha256 as bundle.json and provenance.json recorded them.

use std::path::Path;

use super::{Checker, sha256_of};
use crate::bundle::files;
use crate::bundle::read::ReadError;
use crate::bundle::write::SETUP_FILES;
use crate::provenance::ProvenanceDoc;

/// The top-level files exist as regular files (bundle.json itself was read to open the bundle).
pub(super) fn files_present(c: &mut Checker<'_>) {
    for name in [
        files::MANIFEST,
        files::PLAN,
        files::HOST,
        files::REVISION,
        files::WORKING_TREE,
        files::PATCH,
        files::PROVENANCE,
    ] {
        match c.bundle.open_file(Path::new(name)) {
            Ok(_) => {}
            Err(ReadError::Missing { path }) => c.problem(path, "missing".into()),
            Err(e) => c.problem(e.path().to_path_buf(), e.reason()),
        }
    }
}

/// manifest.toml's sha256 equals bundle.json `manifest-sha256`.
pub(super) fn manifest_sha256(c: &mut Checker<'_>) {
    let manifest = c.bundle.path(files::MANIFEST);
    if let Ok(sha) = sha256_of(c.bundle, Path::new(files::MANIFEST)) {
        c.hashed.insert(manifest.clone());
        if sha != c.bundle.info().manifest_sha256 {
            let message = format!(
                "sha256 {sha} differs from manifest-sha256 {} recorded in bundle.json",
                c.bundle.info().manifest_sha256
            );
            c.problem(manifest, message);
        }
    }
}

/// The setup files have the sha256 bundle.json `setup-sha256` recorded when the bundle was set
/// up. Only the known setup files: names in bundle.json are not trusted.
pub(super) fn setup_sha256(c: &mut Checker<'_>) {
    let bundle = c.bundle;
    for (name, recorded) in SETUP_FILES
        .iter()
        .filter_map(|name| Some((*name, bundle.info().setup_sha256.get(*name)?)))
    {
        let path = bundle.path(name);
        if let Ok(sha) = sha256_of(bundle, Path::new(name))
            && &sha != recorded
        {
            c.problem(
                path,
                format!(
                    "sha256 {sha} differs from setup-sha256 {recorded} recorded in bundle.json: changed after the bundle was set up"
                ),
            );
        }
    }
}

/// provenance.json reads (a missing one is [`files_present`]'s problem) and working-tree.patch's
/// sha256 equals its `patch-sha256`. Returns the document for the patch check.
pub(super) fn patch_sha256(c: &mut Checker<'_>) -> Option<ProvenanceDoc> {
    let provenance = match c.bundle.provenance_doc() {
        Ok(p) => Some(p),
        Err(e) => {
            if !matches!(e, ReadError::Missing { .. }) {
                c.problem(c.bundle.path(files::PROVENANCE), e.reason());
            }
            None
        }
    };
    let patch = c.bundle.path(files::PATCH);
    if let (Some(prov), Ok(sha)) = (&provenance, sha256_of(c.bundle, Path::new(files::PATCH))) {
        c.hashed.insert(patch.clone());
        let recorded = prov.before.patch_sha256();
        if recorded != sha {
            c.problem(
                patch,
                format!("sha256 {sha} differs from patch-sha256 {recorded} recorded in provenance.json"),
            );
        }
    }
    provenance
}

/// host.json reads (a missing one is [`files_present`]'s problem).
pub(super) fn host_facts(c: &mut Checker<'_>) {
    if let Err(e) = c.bundle.host_facts()
        && !matches!(e, ReadError::Missing { .. })
    {
        c.problem(c.bundle.path(files::HOST), e.reason());
    }
}
