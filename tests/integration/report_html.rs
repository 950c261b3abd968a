//! `report --format html` / `compare --format html` (DESIGN 9): the page is self-contained, escapes
//! user data, and renders in a real headless browser (Debian's `chromium`) without console errors,
//! with every run id and one plot line per run series in the DOM.
//!
//! Without chromium on PATH the browser tests print a message and pass; with
//! `HWR_REQUIRE_CHROMIUM=1` (set by `.ci/run`) they fail instead. Screenshots are kept under
//! `target/tmp/report-html/`.
//!
//! How console errors are seen: chromium's `--enable-logging=stderr --v=0` prints every console
//! message of the page (`console.error`, uncaught exceptions, Content-Security-Policy violations) as
//! a `...:INFO:CONSOLE...] "message", source: URL (line)` line on stderr. The page has no scripts,
//! so any such line is a failure. `console_detector_sees_injected_errors` is the negative control:
//! the same detector on the same report page with an injected script must find it.
//!
//! `cargo test --test integration -- --ignored report_html::docs_screenshot` rewrites docs/report-html.png from
//! the checked-in bundle.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use hwr_exp::report::collect;

use crate::support::{
    Chromium, code, hwr, json, need, package_root, run, run_records, stderr, wait_child, write_manifest,
};

/// The checked-in bundle under results/ (the one shown in docs/).
const CHECKED_IN: &str = "results/size-compare/20261130T021245Z-18f8";
/// Real fixture bundles: failed runs (probe-size-compare) and timed-out runs (python-retention).
const FIXTURES: [&str; 2] = [
    "tests/fixtures/bundles/probe-size-compare",
    "tests/fixtures/bundles/python-retention",
];
/// The plot's run lines: plotters draws each run's series as one `<polyline>` with the stroke
/// width `report/plot.rs` gives run lines (axes and ticks have width 1).
const RUN_LINE: &str = "stroke-width=\"2\"";
/// Most seconds one chromium invocation may take before the test gives up on it (a hang guard,
/// not a timing assertion).
const BROWSER_DEADLINE: Duration = Duration::from_secs(180);

/// chromium (or chromium-browser) on PATH. `None` means skip, unless skips are failures
/// (`CI`, `HWR_REQUIRE_CHROMIUM=1`: [`need`]).
#[track_caller]
fn browser() -> Option<PathBuf> {
    need(Chromium)
}

/// What chromium made of a page.
struct Rendered {
    /// The serialized DOM after load (`--dump-dom`).
    dom: String,
    /// Console messages of the page, one stderr line each.
    console: Vec<String>,
    /// The screenshot file (PNG).
    screenshot: PathBuf,
}

/// The page's console messages among chromium's stderr lines (`:INFO:CONSOLE:1]` in current
/// releases, `:INFO:CONSOLE(1)]` in older ones).
fn console_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_string)
        .collect()
}

/// Loads `page` in headless chromium as root, offline, with a new empty profile; dumps the DOM,
/// takes a `width` x `height` screenshot into `shot`, and collects the console messages.
fn render(chromium: &Path, page: &Path, shot: &Path, (width, height): (u32, u32)) -> Rendered {
    let work = tempfile::tempdir().unwrap();
    let profile = work.path().join("profile");
    std::fs::create_dir(&profile).unwrap();
    let stdout_path = work.path().join("dom.html");
    let stderr_path = work.path().join("stderr.log");
    let page = std::fs::canonicalize(page).unwrap();
    let url = format!("file://{}", page.display());
    assert!(
        !url.contains([' ', '#', '?', '%']),
        "test pages live at plain paths: {url}"
    );
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--enable-logging=stderr",
            "--v=0",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--dump-dom")
        .arg(&url)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).unwrap())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .expect("chromium starts");
    let status = wait_child(&mut child, BROWSER_DEADLINE, &format!("chromium loading {url}"));
    let stderr = String::from_utf8_lossy(&std::fs::read(&stderr_path).unwrap()).into_owned();
    assert!(status.success(), "chromium {status} on {url}:\n{stderr}");
    Rendered {
        dom: String::from_utf8(std::fs::read(&stdout_path).unwrap()).expect("the DOM is UTF-8"),
        console: console_lines(&stderr),
        screenshot: shot.to_path_buf(),
    }
}

/// Width and height from a PNG's IHDR chunk, after checking the signature.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(bytes.len() > 24, "{}: too short for a PNG", path.display());
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}: not a PNG", path.display());
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
    (be(16), be(20))
}

/// Folder for screenshots kept after the tests (under target/tmp).
fn shots_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-html");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `hwr-exp <args>` run from the crate root; its stdout, after asserting exit 0.
fn hwr_stdout(args: &[&str]) -> String {
    let out = hwr(package_root(), args);
    assert_eq!(code(&out), 0, "hwr-exp {args:?}: {}", stderr(&out));
    String::from_utf8(out.stdout).expect("UTF-8 page")
}

/// The tags of an HTML page: the text from each `<` to the next `>`. User data cannot open a tag
/// (its `<` is escaped), so this sees the page's own elements only.
fn tags(html: &str) -> Vec<&str> {
    html.split('<')
        .skip(1)
        .filter_map(|rest| rest.split_once('>').map(|(tag, _)| tag))
        .collect()
}

/// The page loads nothing and runs nothing: no scripts, stylesheets, images, frames or links, no
/// URLs in attributes or styles besides the SVG namespace, and a Content-Security-Policy that
/// forbids them anyway.
fn assert_self_contained(html: &str) {
    assert!(html.to_ascii_lowercase().starts_with("<!doctype html>"));
    for tag in tags(html) {
        let lower = tag.to_ascii_lowercase();
        let name = lower.split([' ', '/', '\n']).next().unwrap_or_default();
        assert!(
            ![
                "script", "link", "img", "image", "iframe", "object", "embed", "a", "use", "base"
            ]
            .contains(&name),
            "page has a <{tag}>"
        );
        // Attribute names: the text outside double quotes (every attribute value is quoted).
        let names: Vec<&str> = lower
            .split('"')
            .step_by(2)
            .flat_map(|part| part.split_whitespace())
            .filter_map(|word| word.strip_suffix('='))
            .collect();
        for name in names {
            assert!(
                !["src", "srcset", "href", "xlink:href", "style", "action", "poster"].contains(&name)
                    && !name.starts_with("on"),
                "<{tag}> has {name}="
            );
        }
        let without_ns = lower.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
        assert!(
            !without_ns.contains("http:") && !without_ns.contains("https:"),
            "<{tag}>"
        );
    }
    let style_start = html.find("<style>").expect("inline style") + "<style>".len();
    let style = &html[style_start..style_start + html[style_start..].find("</style>").unwrap()];
    for needle in ["url(", "@import", "@font-face", "http"] {
        assert!(!style.contains(needle), "style has {needle}");
    }
    assert!(html.contains("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none';"));
}

#[test]
fn self_contained_check_rejects_loads_and_scripts() {
    let page = hwr_stdout(&["report", CHECKED_IN, "--format", "html"]);
    assert_self_contained(&page);
    for injected in [
        "<script>1</script>",
        "<img src=\"x.png\">",
        "<link rel=\"stylesheet\" href=\"s.css\">",
        "<svg><image href=\"https://example.com/x.png\"/></svg>",
        "<p onclick=\"x()\">p</p>",
        "<div style=\"background: url(x.png)\"></div>",
    ] {
        let bad = page.replacen("</body>", &format!("{injected}</body>"), 1);
        let caught = std::panic::catch_unwind(|| assert_self_contained(&bad)).is_err();
        assert!(caught, "not caught: {injected}");
    }
    let bad = page.replacen("</style>", "@import \"x.css\";</style>", 1);
    assert!(std::panic::catch_unwind(|| assert_self_contained(&bad)).is_err());
}

/// Number of the plot's run lines inside `<figure id="ID">` of a page or DOM.
fn run_lines(page: &str, id: &str) -> usize {
    let start = page
        .find(&format!("<figure id=\"{id}\""))
        .unwrap_or_else(|| panic!("no figure {id}"));
    let end = start + page[start..].find("</figure>").expect("figure closes");
    page[start..end]
        .split("<polyline")
        .skip(1)
        .filter(|el| el.split('>').next().is_some_and(|attrs| attrs.contains(RUN_LINE)))
        .count()
}

/// Series the plot of `bundle` draws: one per run with retention samples, one per run with
/// memory.jsonl samples.
fn expected_series(bundle: &str) -> (usize, usize) {
    let report = collect(package_root().join(bundle).as_path(), true).unwrap();
    let with_points = report.runs.iter().filter(|r| !r.points.is_empty()).count();
    let with_memory = report.runs.iter().filter(|r| !r.memory.is_empty()).count();
    (with_points, with_memory)
}

/// run-ids of a bundle's plan.json.
fn run_ids(bundle: &Path) -> Vec<String> {
    json(&bundle.join("plan.json"))["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run-id"].as_str().unwrap().to_string())
        .collect()
}

/// Checks of a rendered report page of `bundle`: no console message, every run id as a row of the
/// run table, one run line per plotted series, a screenshot of the window's size.
fn check_report_dom(bundle: &str, r: &Rendered, window: (u32, u32)) {
    assert!(
        r.console.is_empty(),
        "console messages:\n{}",
        r.console.join("\n")
    );
    let root = package_root().join(bundle);
    let ids = run_ids(&root);
    assert!(!ids.is_empty());
    for id in &ids {
        assert!(
            r.dom.contains(&format!("<tr data-run-id=\"{id}\"")),
            "run {id} has no row in the DOM"
        );
        assert!(r.dom.contains(&format!("<td>{id}</td>")), "run {id} not shown");
    }
    let (points, memory) = expected_series(bundle);
    let ok_runs = run_records(&root)
        .iter()
        .filter(|rec| rec["outcome"] == "ok")
        .count();
    assert!(points >= ok_runs, "every ok run has retention samples");
    assert_eq!(
        run_lines(&r.dom, "plot"),
        points + memory,
        "run lines of {bundle}"
    );
    assert!(r.dom.contains("<th>reason</th>"));
    assert_eq!(png_size(&r.screenshot), window);
    // A blank white page of this size compresses to a few kilobytes; tables and plot do not.
    let size = std::fs::metadata(&r.screenshot).unwrap().len();
    assert!(size > 30_000, "screenshot of {bundle} is {size} bytes: blank?");
}

#[test]
fn report_page_is_self_contained_and_complete() {
    for bundle in FIXTURES.iter().chain([&CHECKED_IN]) {
        let page = hwr_stdout(&["report", bundle, "--format", "html"]);
        assert_self_contained(&page);
        let (points, memory) = expected_series(bundle);
        assert!(points > 0, "{bundle} has plotted runs");
        assert_eq!(run_lines(&page, "plot"), points + memory, "{bundle}");
        for id in run_ids(&package_root().join(bundle)) {
            assert!(page.contains(&format!("data-run-id=\"{id}\"")), "{bundle}: {id}");
        }
        for heading in [
            "Summary",
            "Runs",
            "Retention and metrics",
            "Plot",
            "Provenance",
            "Host",
        ] {
            assert!(
                page.contains(&format!("\">{heading}</h2>")),
                "{bundle}: {heading}"
            );
        }
    }
}

#[test]
fn report_page_gives_reasons_for_runs_that_are_not_ok() {
    let page = hwr_stdout(&["report", FIXTURES[0], "--format", "html"]);
    // The `mode = "bogus"` cell: the probe rejects the mode with exit 2 and writes nothing.
    assert!(
        page.contains("<td class=\"reason\">exit 2: For more information, try '--help'."),
        "{page}"
    );
    let page = hwr_stdout(&["report", FIXTURES[1], "--format", "html"]);
    // The `hang` runs hit the 3 s timeout; the script exits 0 on SIGTERM.
    assert_eq!(
        page.matches("<td class=\"reason\">timeout, exit 0 after SIGTERM</td>")
            .count(),
        2,
        "{page}"
    );
}

#[test]
fn compare_page_is_self_contained() {
    let page = hwr_stdout(&[
        "compare",
        "tests/fixtures/bundles/synthetic-a",
        "tests/fixtures/bundles/synthetic-b",
        "--format",
        "html",
    ]);
    assert_self_contained(&page);
    // B has another revision and a dirty tree (tests/fixtures/bundles/README.md).
    assert!(page.contains("<td>revision</td>") && page.contains("<td>dirty</td>"));
    assert!(page.contains("Cells only in B: "));
    assert!(page.contains("<figure id=\"plot-a\"") && page.contains("<figure id=\"plot-b\""));
}

/// A bundle of a real run whose matrix values are markup and quote characters.
fn hostile_bundle(dir: &Path) -> PathBuf {
    let manifest = write_manifest(
        dir,
        r#"format = 1
[experiment]
name = "hostile"
description = "<b>bold</b> & \"quoted\" 'single'"
[command]
argv = ["sh", "-c", "echo \"$0\" >&2; exit 3", "{v}"]
[matrix]
v = ["<script>console.error('xss')</script>", "\"&'", "</td></tr></table><img src=x>"]
"#,
    );
    let (out, bundle) = run(dir, &manifest);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    bundle.expect("bundle written")
}

#[test]
fn user_data_is_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = hostile_bundle(dir.path());
    let page = hwr_stdout(&["report", bundle.to_str().unwrap(), "--format", "html"]);
    assert_self_contained(&page);
    assert!(page.contains("v=&lt;script&gt;console.error('xss')&lt;/script&gt;"));
    assert!(page.contains("v=&quot;&amp;'"));
    assert!(page.contains("v=&lt;/td&gt;&lt;/tr&gt;&lt;/table&gt;&lt;img src=x&gt;"));
    assert!(page.contains("&lt;b&gt;bold&lt;/b&gt; &amp; &quot;quoted&quot; 'single'"));
    let Some(chromium) = browser() else { return };
    let path = dir.path().join("hostile.html");
    std::fs::write(&path, &page).unwrap();
    let r = render(&chromium, &path, &shots_dir().join("hostile.png"), (1280, 900));
    // An unescaped value would run (blocked by the CSP, which logs the violation) or load.
    assert!(
        r.console.is_empty(),
        "console messages:\n{}",
        r.console.join("\n")
    );
    let dom = r.dom.to_ascii_lowercase();
    assert!(!dom.contains("<script") && !dom.contains("<img"), "{}", r.dom);
    assert!(
        r.dom
            .contains("v=&lt;script&gt;console.error('xss')&lt;/script&gt;")
    );
    // Every run is still one row of the run table: no value broke out of its cell.
    for id in run_ids(&bundle) {
        assert!(
            r.dom
                .contains(&format!("<tr data-run-id=\"{id}\" class=\"not-ok\">")),
            "{id}"
        );
    }
}

#[test]
fn console_detector_sees_injected_errors() {
    let Some(chromium) = browser() else { return };
    let dir = tempfile::tempdir().unwrap();
    let page = hwr_stdout(&["report", CHECKED_IN, "--format", "html"]);
    let clean = dir.path().join("clean.html");
    std::fs::write(&clean, &page).unwrap();
    let shot = dir.path().join("shot.png");
    assert!(render(&chromium, &clean, &shot, (800, 600)).console.is_empty());

    // The same page with a script that logs an error and one that throws, Content-Security-Policy
    // removed so that they run.
    let csp_start = page.find("<meta http-equiv=\"Content-Security-Policy\"").unwrap();
    let csp_end = csp_start + page[csp_start..].find('>').unwrap() + 1;
    let no_csp = format!("{}{}", &page[..csp_start], &page[csp_end..]);
    let injected = no_csp.replace(
        "</body>",
        "<script>console.error('injected-console-error')</script><script>throw new Error('injected-throw')</script></body>",
    );
    let path = dir.path().join("injected.html");
    std::fs::write(&path, injected).unwrap();
    let console = render(&chromium, &path, &shot, (800, 600)).console.join("\n");
    assert!(
        console.contains("\"injected-console-error\""),
        "not detected:\n{console}"
    );
    assert!(
        console.contains("Uncaught Error: injected-throw"),
        "not detected:\n{console}"
    );

    // With the page's own policy, an injected script and image are blocked, and the blocks are
    // console errors too.
    let blocked = page.replace(
        "</body>",
        "<script>console.error('must-not-run')</script><img src=\"x.png\"></body>",
    );
    std::fs::write(&path, blocked).unwrap();
    let console = render(&chromium, &path, &shot, (800, 600)).console.join("\n");
    assert!(
        !console.contains("\"must-not-run\""),
        "the CSP let a script run:\n{console}"
    );
    assert!(
        console.contains("Content Security Policy"),
        "block not detected:\n{console}"
    );
    assert!(console.contains("x.png"), "image block not detected:\n{console}");
}

#[test]
fn fixture_reports_render_in_chromium() {
    let Some(chromium) = browser() else { return };
    let dir = tempfile::tempdir().unwrap();
    for bundle in FIXTURES.iter().chain([&CHECKED_IN]) {
        let page = hwr_stdout(&["report", bundle, "--format", "html"]);
        let name = Path::new(bundle)
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let path = dir.path().join(format!("{name}.html"));
        std::fs::write(&path, page).unwrap();
        let window = (1280, 2400);
        let r = render(&chromium, &path, &shots_dir().join(format!("{name}.png")), window);
        check_report_dom(bundle, &r, window);
    }
}

#[test]
fn compare_page_renders_in_chromium() {
    let Some(chromium) = browser() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        "tests/fixtures/bundles/synthetic-a",
        "tests/fixtures/bundles/synthetic-b",
    );
    let page = hwr_stdout(&["compare", a, b, "--format", "html"]);
    let path = dir.path().join("compare.html");
    std::fs::write(&path, page).unwrap();
    let r = render(&chromium, &path, &shots_dir().join("compare.png"), (1280, 2400));
    assert!(
        r.console.is_empty(),
        "console messages:\n{}",
        r.console.join("\n")
    );
    for (bundle, figure) in [(a, "plot-a"), (b, "plot-b")] {
        for id in run_ids(&package_root().join(bundle)) {
            assert!(
                r.dom.contains(&format!("<tr data-run-id=\"{id}\"")),
                "{bundle}: {id}"
            );
        }
        let (points, memory) = expected_series(bundle);
        assert_eq!(run_lines(&r.dom, figure), points + memory, "{bundle}");
    }
}

/// Rewrites docs/report-html.png: the report page of the checked-in bundle, 1280 pixels wide and
/// as tall as the page (measured first by a copy of the page with a script, its policy removed).
#[test]
#[ignore = "rewrites docs/report-html.png"]
fn docs_screenshot() {
    let chromium = browser().expect("chromium is needed to write the screenshot");
    let dir = tempfile::tempdir().unwrap();
    let page = hwr_stdout(&["report", CHECKED_IN, "--format", "html"]);
    let csp_start = page.find("<meta http-equiv=\"Content-Security-Policy\"").unwrap();
    let csp_end = csp_start + page[csp_start..].find('>').unwrap() + 1;
    let measuring = format!("{}{}", &page[..csp_start], &page[csp_end..]).replace(
        "</body>",
        "<script>document.body.dataset.height = document.documentElement.scrollHeight</script></body>",
    );
    let measure = dir.path().join("measure.html");
    std::fs::write(&measure, measuring).unwrap();
    let r = render(&chromium, &measure, &dir.path().join("m.png"), (1280, 800));
    let height: u32 = r
        .dom
        .split("data-height=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .and_then(|s| s.parse().ok())
        .expect("measured height");
    let path = dir.path().join("report.html");
    std::fs::write(&path, &page).unwrap();
    let out = package_root().join("docs/report-html.png");
    let r = render(&chromium, &path, &out, (1280, height));
    check_report_dom(CHECKED_IN, &r, (1280, height));
}
