//! Mutation corpus: a fixed seed, thousands of byte, line and token mutants of the checked-in
//! manifests (experiments/ and tests/manifests/good/). In process, each goes through validation and
//! plan expansion: nothing panics and every error carries `file:line:col`. A few hundred go through
//! the real binary's `check`: exit 0 or 2, never a panic (101).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use hwr_exp::manifest;
use hwr_exp::runner::session;

const SEED: u64 = 0x5eed_2026;
/// Mutants checked in process.
const IN_PROCESS: usize = 3000;
/// Mutants checked through the binary.
const THROUGH_BINARY: usize = 250;
/// Mutants planning more runs than this are validated but not expanded (time, not correctness:
/// the plan's size limit has its own tests).
const EXPAND_LIMIT: u64 = 20_000;

/// Tokens a mutation may put in place of a word: edge values and syntax that tends to break things.
const TOKENS: &[&str] = &[
    "\"300000000000y\"",
    "\"1y\"",
    "\"0s\"",
    "\"{bundle}\"",
    "\"{run-dir}\"",
    "\"{hwr-exp}\"",
    "\"{run-id}\"",
    "\"a\\u0000b\"",
    "\"\"",
    "\"..\"",
    "\"/\"",
    "1e400",
    "-1",
    "0",
    "9223372036854775807",
    "99999999999999999999",
    "nan",
    "inf",
    "1.0",
    "3e20",
    "true",
    "[]",
    "{}",
    "[[",
    "]]",
    "=",
    "\"",
    "'''",
    "{",
    "}",
    "{{",
    "#",
    "\n",
    "[matrix]",
    "[isolation]",
    "exclude = [{}]",
    "include = [{}]",
    "cpus = [0, 0]",
    "jobs = 64",
    "repetitions = 4294967296",
    "\"shuffled\"",
    "\"clean\"",
    "é",
];

fn corpus() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["experiments", "tests/manifests/good"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let text = std::fs::read_to_string(&path).unwrap();
                files.push((path, text));
            }
        }
    }
    files.sort();
    assert!(files.len() >= 5, "corpus too small: {}", files.len());
    files
}

/// One mutation of `text`, chosen by `rng`: bytes (flip, insert, delete), lines (delete,
/// duplicate, swap) or tokens (a word replaced by one of [`TOKENS`], a token inserted).
fn mutate(rng: &mut fastrand::Rng, text: &str) -> String {
    let mut bytes = text.as_bytes().to_vec();
    let rounds = rng.usize(1..=3);
    for _ in 0..rounds {
        match rng.u8(0..8) {
            0 if !bytes.is_empty() => {
                let i = rng.usize(..bytes.len());
                bytes[i] = rng.u8(..);
            }
            1 => {
                let i = rng.usize(..=bytes.len());
                bytes.insert(i, b" \"'[]{}=#,.\\\n0a-_\t"[rng.usize(..18)]);
            }
            2 if !bytes.is_empty() => {
                let i = rng.usize(..bytes.len());
                let n = rng.usize(1..=8).min(bytes.len() - i);
                bytes.drain(i..i + n);
            }
            3..=5 => {
                let s = String::from_utf8_lossy(&bytes).into_owned();
                let mut lines: Vec<&str> = s.lines().collect();
                if lines.is_empty() {
                    continue;
                }
                let i = rng.usize(..lines.len());
                match rng.u8(0..3) {
                    0 => {
                        lines.remove(i);
                    }
                    1 => lines.insert(i, lines[i]),
                    _ => {
                        let j = rng.usize(..lines.len());
                        lines.swap(i, j);
                    }
                }
                bytes = (lines.join("\n") + "\n").into_bytes();
            }
            _ => {
                let s = String::from_utf8_lossy(&bytes).into_owned();
                let token = TOKENS[rng.usize(..TOKENS.len())];
                // Word boundaries: runs of characters that are not space, `=`, `,`, brackets.
                let words: Vec<(usize, usize)> = word_spans(&s);
                bytes = if words.is_empty() || rng.bool() {
                    let mut i = rng.usize(..=s.len());
                    while !s.is_char_boundary(i) {
                        i -= 1;
                    }
                    format!("{}{token}{}", &s[..i], &s[i..]).into_bytes()
                } else {
                    let (a, b) = words[rng.usize(..words.len())];
                    format!("{}{token}{}", &s[..a], &s[b..]).into_bytes()
                };
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn word_spans(s: &str) -> Vec<(usize, usize)> {
    let sep = |c: char| c.is_whitespace() || "=,[]{}".contains(c);
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices() {
        match (sep(c), start) {
            (true, Some(a)) => {
                out.push((a, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(a) = start {
        out.push((a, s.len()));
    }
    out
}

/// The runs a manifest plans (before `exclude`), saturating.
fn planned(m: &manifest::Manifest) -> u64 {
    m.matrix
        .axes
        .iter()
        .fold(1u64, |n, (_, v)| n.saturating_mul(v.len() as u64))
        .saturating_add(m.matrix.include.len() as u64)
        .saturating_mul(u64::from(m.schedule.repetitions))
}

/// Every rendered error block names `file:line:col`.
fn assert_located(rendered: &str, file: &str, source: &str) {
    let blocks: Vec<&str> = rendered.split("\nerror").collect();
    for block in blocks {
        let located = block.lines().any(|l| {
            l.trim_start().strip_prefix("--> ").is_some_and(|loc| {
                let mut parts = loc.rsplitn(3, ':');
                let col = parts.next().and_then(|c| c.parse::<usize>().ok());
                let line = parts.next().and_then(|c| c.parse::<usize>().ok());
                let f = parts.next();
                col.is_some_and(|c| c >= 1) && line.is_some_and(|l| l >= 1) && f == Some(file)
            })
        });
        assert!(
            located,
            "error without file:line:col:\n{block}\n--- manifest ---\n{source}"
        );
    }
}

#[test]
fn mutants_never_panic_and_every_error_is_located() {
    let corpus = corpus();
    let mut rng = fastrand::Rng::with_seed(SEED);
    let ctx = session::plan_context(Path::new("<bundle>")).unwrap();
    let (mut accepted, mut refused, mut skipped) = (0, 0, 0);
    for n in 0..IN_PROCESS {
        let (path, text) = &corpus[n % corpus.len()];
        let mutant = mutate(&mut rng, text);
        let file = path.display().to_string();
        let base = path.parent().unwrap();
        let result = catch_unwind(AssertUnwindSafe(|| match manifest::parse(&mutant, path, base) {
            Err(d) => Err(d.to_string()),
            Ok(m) if planned(&m) > EXPAND_LIMIT => Ok(None),
            Ok(m) => match hwr_exp::runner::planning::expand(&m, &ctx) {
                Ok(plan) => Ok(Some(plan.len())),
                Err(e) => Err(e.to_string()),
            },
        }));
        match result {
            Err(_) => panic!("mutant {n} of {file} panicked:\n{mutant}"),
            Ok(Err(rendered)) => {
                refused += 1;
                assert_located(&rendered, &file, &mutant);
            }
            Ok(Ok(Some(_))) => accepted += 1,
            Ok(Ok(None)) => skipped += 1,
        }
    }
    eprintln!("{IN_PROCESS} mutants: {accepted} accepted, {refused} refused, {skipped} too large to expand");
    assert!(
        refused > IN_PROCESS / 4 && accepted > 10,
        "mutations too weak or too strong"
    );
}

#[test]
fn mutants_through_the_binary_exit_0_or_2() {
    let corpus = corpus();
    let mut rng = fastrand::Rng::with_seed(SEED ^ 0xb1);
    let dir = tempfile::tempdir().unwrap();
    for n in 0..THROUGH_BINARY {
        let (path, text) = &corpus[n % corpus.len()];
        let mutant = mutate(&mut rng, text);
        let m = dir.path().join(path.file_name().unwrap());
        std::fs::write(&m, &mutant).unwrap();
        // Expansion of a huge plan takes long in a debug build; such mutants are left to the
        // in-process test's validation.
        if let Ok(parsed) = manifest::parse(&mutant, &m, dir.path())
            && planned(&parsed) > EXPAND_LIMIT
        {
            continue;
        }
        let out = crate::support::hwr(dir.path(), &["check", m.to_str().unwrap()]);
        let code = crate::support::code(&out);
        assert!(
            code == 0 || code == 2,
            "mutant {n} of {}: exit {code}\n{}\n--- manifest ---\n{mutant}",
            path.display(),
            crate::support::stderr(&out)
        );
    }
}
