//! working-tree.patch's limits (issue 20 item 5): a 300 MB untracked file is recorded by size and
//! sha256 only, untracked files past the 64 MiB total likewise; the run, `verify` and
//! `rerun --at-recorded-revision` name them, and the patch stays under the limit.

use crate::support::{code, hwr, repo, stderr, stdout, the_bundle, write_manifest};

const MIB: u64 = 1024 * 1024;

/// A sparse file of `len` bytes at `rel` in `dir` (zeros, instant to write, no disk used).
fn sparse(dir: &std::path::Path, rel: &str, len: u64) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::File::create(&path).unwrap().set_len(len).unwrap();
}

#[test]
fn a_300_mb_untracked_file_and_files_past_the_total_are_recorded_by_size_and_sha256() {
    let repo = repo();
    let dir = repo.path();
    sparse(dir, "data/huge.bin", 300 * MIB);
    // Five files under the per-file limit (16 MiB) whose sum is past the total (64 MiB).
    for i in 0..5 {
        sparse(dir, &format!("shards/{i}.bin"), 15 * MIB);
    }
    std::fs::write(dir.join("small.txt"), "small\n").unwrap();
    write_manifest(
        dir,
        "format = 1\n[experiment]\nname = \"big\"\n[command]\nargv = [\"true\"]\noutput-format = \"text\"\n[measure]\nsample-interval = \"off\"\n",
    );
    let out = hwr(
        dir,
        &["run", "experiment.toml", "--results-dir", "results", "--quiet"],
    );
    let err = stderr(&out);
    assert!([0, 1].contains(&code(&out)), "{err}");
    assert!(
        err.contains("data/huge.bin") && err.contains("limit for one file"),
        "{err}"
    );
    assert!(
        err.contains("shards/4.bin") && err.contains("all untracked files together"),
        "{err}"
    );
    let bundle = the_bundle(&dir.join("results"), "big");
    let prov = crate::support::json(&bundle.join("provenance.json"));
    let untracked = prov["untracked"].as_array().unwrap();
    let entry = |p: &str| untracked.iter().find(|u| u["path"] == p).unwrap().clone();
    let huge = entry("data/huge.bin");
    assert_eq!(huge["size-bytes"], 300 * MIB);
    assert_eq!(huge["in-patch"], false);
    // sha256 of 300 MiB of zeros.
    let zeros = {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        let block = vec![0u8; MIB as usize];
        for _ in 0..300 {
            h.update(&block);
        }
        h.finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    assert_eq!(huge["sha256"], zeros);
    assert_eq!(entry("small.txt")["in-patch"], true);
    let in_patch = (0..5)
        .filter(|i| entry(&format!("shards/{i}.bin"))["in-patch"] == true)
        .count();
    assert_eq!(in_patch, 4, "4 x 15 MiB fit in 64 MiB, the fifth does not");
    let patch = std::fs::metadata(bundle.join("working-tree.patch"))
        .unwrap()
        .len();
    assert!(patch < 64 * MIB, "patch of {patch} bytes");
    let patch_text = std::fs::read(bundle.join("working-tree.patch")).unwrap();
    assert!(
        !patch_text.windows(13).any(|w| w == b"data/huge.bin"),
        "the large file is not in the patch"
    );

    let verify = hwr(dir, &["verify", bundle.to_str().unwrap()]);
    let said = format!("{}{}", stdout(&verify), stderr(&verify));
    assert_eq!(code(&verify), 0, "{said}");
    assert!(
        said.contains("data/huge.bin") && said.contains("shards/4.bin"),
        "verify notes them: {said}"
    );

    let rerun = hwr(
        dir,
        &[
            "rerun",
            bundle.to_str().unwrap(),
            "--at-recorded-revision",
            "--quiet",
        ],
    );
    let said = stderr(&rerun);
    assert!([0, 1].contains(&code(&rerun)), "{said}");
    assert!(
        said.contains("cannot be rebuilt whole") && said.contains("data/huge.bin"),
        "{said}"
    );
    assert!(said.contains("shards/4.bin"), "{said}");
}
