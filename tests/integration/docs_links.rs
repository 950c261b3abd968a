//! Issue 38 item 1: the README is a front door (at most 250 lines) and the user guide in docs/
//! holds together: every relative link in README.md and docs/*.md names a file that exists (and a
//! heading that exists, where it names one), and docs/index.md links every page of docs/.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::support::package_root;

/// A link of a Markdown file: the line it is on and its target as written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Link {
    line: usize,
    target: String,
}

/// The text of `markdown` outside fenced code blocks and inline code spans, line by line (code
/// holds brackets and parentheses that are no links: TOML arrays, `f(x)`).
fn prose_lines(markdown: &str) -> Vec<(usize, String)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in markdown.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop inline code spans: text between pairs of backticks.
        let prose: String = line
            .split('`')
            .enumerate()
            .filter(|(k, _)| k % 2 == 0)
            .map(|(_, part)| part)
            .collect::<Vec<_>>()
            .join(" ");
        out.push((i + 1, prose));
    }
    out
}

/// Every link of `markdown`: inline `[text](target)` and `![alt](target)`, and reference
/// definitions `[name]: target`. A target's optional title (`"..."`) is dropped.
fn links(markdown: &str) -> Vec<Link> {
    let mut found = Vec::new();
    for (line, prose) in prose_lines(markdown) {
        let trimmed = prose.trim_start();
        // A reference definition: the first `]` of a line that opens with `[` is followed by `:`.
        if trimmed.starts_with('[')
            && let Some(end) = trimmed.find(']')
            && trimmed[end + 1..].starts_with(':')
        {
            let target = trimmed[end + 2..].split_whitespace().next().unwrap_or("");
            found.push(Link {
                line,
                target: target.to_string(),
            });
            continue;
        }
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(close) = after.find(')') else { break };
            let inner = after[..close].trim();
            let target = inner.split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            found.push(Link {
                line,
                target: target.to_string(),
            });
            rest = &after[close..];
        }
    }
    found
}

/// GitHub's anchor for a heading: lower case, punctuation dropped except `-` and `_`, spaces as
/// `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (a repeated heading gets `-1`, `-2`, ...).
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let text = line.trim_start_matches('#');
        if !text.starts_with(' ') {
            continue;
        }
        let base = slug(text);
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// The problems of the relative links of `file` (a Markdown file): targets that do not exist,
/// and anchors no heading of the target has. Links with a scheme (`https:`, `mailto:`) are not
/// followed.
fn broken_links(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let dir = file.parent().expect("a file has a folder");
    let mut problems = Vec::new();
    for link in links(&text) {
        let target = link.target.as_str();
        let place = format!("{}:{}: ({target})", file.display(), link.line);
        if target.is_empty() {
            problems.push(format!("{place}: empty link"));
            continue;
        }
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target, None),
        };
        let resolved = if path.is_empty() {
            file.to_path_buf()
        } else {
            dir.join(path)
        };
        if !resolved.exists() {
            problems.push(format!("{place}: {} does not exist", resolved.display()));
            continue;
        }
        if let Some(anchor) = anchor
            && resolved.extension().is_some_and(|e| e == "md")
        {
            let headings = anchors(&std::fs::read_to_string(&resolved).unwrap());
            if !headings.contains(anchor) {
                problems.push(format!(
                    "{place}: no heading of {} has the anchor #{anchor}",
                    resolved.display()
                ));
            }
        }
    }
    problems
}

/// The Markdown pages of the guide, `docs/*.md`, sorted.
fn guide_pages(root: &Path) -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    pages
}

/// The pages of docs/ that docs/index.md does not link.
fn pages_missing_from_index(root: &Path) -> Vec<String> {
    let index = root.join("docs/index.md");
    let text = std::fs::read_to_string(&index).unwrap_or_else(|e| panic!("{}: {e}", index.display()));
    let linked: BTreeSet<PathBuf> = links(&text)
        .iter()
        .map(|l| l.target.split('#').next().unwrap_or_default().to_string())
        .filter(|t| !t.is_empty() && !t.contains("://"))
        .map(|t| normalize(&root.join("docs").join(t)))
        .collect();
    guide_pages(root)
        .into_iter()
        .filter(|p| p != &index && !linked.contains(&normalize(p)))
        .map(|p| p.display().to_string())
        .collect()
}

/// `path` with `.` and `..` resolved lexically (the files may not exist).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_readme_and_the_guide_resolves() {
    let root = package_root();
    let mut files = vec![root.join("README.md")];
    files.extend(guide_pages(root));
    let problems: Vec<String> = files.iter().flat_map(|f| broken_links(f)).collect();
    assert!(problems.is_empty(), "broken links:\n{}", problems.join("\n"));
    // The README links the guide's index, and the check saw links at all.
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(links(&readme).iter().any(|l| l.target == "docs/index.md"));
}

#[test]
fn the_guide_index_links_every_page() {
    let missing = pages_missing_from_index(package_root());
    assert!(missing.is_empty(), "docs/index.md does not link: {missing:?}");
}

#[test]
fn the_readme_is_a_front_door_of_at_most_250_lines() {
    let readme = std::fs::read_to_string(package_root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 250, "README.md has {lines} lines");
    // It opens with the two set-up commands, as .ci/run says ("the README's test command").
    let first_block: String = readme
        .split("```sh")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap_or_default()
        .to_string();
    assert!(
        first_block.contains("cargo run --release -- run experiments/size-compare.toml"),
        "{first_block}"
    );
    assert!(first_block.contains("cargo test --locked"), "{first_block}");
    let ci = std::fs::read_to_string(package_root().join(".ci/run")).unwrap();
    assert!(
        ci.contains("\ncargo test --locked 2>&1"),
        "the README's test command in .ci/run"
    );
}

/// The checks fail where they should: a folder with a README and a guide whose links are broken
/// in each way, and an index that leaves a page out.
#[test]
fn the_checks_find_broken_links_and_unlinked_pages() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("docs")).unwrap();
    std::fs::write(
        root.join("README.md"),
        "# r\n\nSee [the guide](docs/index.md), [gone](docs/gone.md) and \
         [a heading](docs/a.md#no-such-heading).\n\n```toml\nx = [1](2)\n```\n\n`[code](not-a-link.md)`\n\
         [ok](docs/a.md#the-a-page) [web](https://example.com/x.md)\n",
    )
    .unwrap();
    std::fs::write(
        root.join("docs/index.md"),
        "# i\n\n- [a](a.md)\n- [up](../README.md)\n",
    )
    .unwrap();
    std::fs::write(root.join("docs/a.md"), "# The `a` page\n\n![plot](missing.svg)\n").unwrap();
    std::fs::write(root.join("docs/b.md"), "# b\n\n[back](index.md)\n").unwrap();

    let readme = broken_links(&root.join("README.md"));
    assert_eq!(readme.len(), 2, "{readme:#?}");
    assert!(readme[0].contains("docs/gone.md does not exist"), "{readme:#?}");
    assert!(readme[1].contains("#no-such-heading"), "{readme:#?}");
    let a = broken_links(&root.join("docs/a.md"));
    assert_eq!(a.len(), 1, "{a:#?}");
    assert!(
        a[0].contains("missing.svg does not exist") && a[0].contains("a.md:3:"),
        "{a:#?}"
    );
    assert!(broken_links(&root.join("docs/index.md")).is_empty());
    assert!(broken_links(&root.join("docs/b.md")).is_empty());

    let missing = pages_missing_from_index(root);
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert!(missing[0].ends_with("docs/b.md"), "{missing:?}");
}
