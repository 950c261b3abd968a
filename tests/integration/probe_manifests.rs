//! The checked-in manifests under experiments/ ask for what their headers say, and every cell's
//! command line is accepted by the probe it names. (The end-to-end `hwr-exp run` of them belongs
//! to the runner's tests.) Placeholders are rendered with `hwr_exp::manifest::template::render`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use toml::Table;

use crate::support::probe::python_ready;
use crate::support::{bin, source_path};

fn experiments() -> PathBuf {
    source_path("experiments")
}

fn load(name: &str) -> (String, Table) {
    let text = std::fs::read_to_string(experiments().join(name)).unwrap();
    let table: Table = text.parse().unwrap();
    (text, table)
}

/// Every cell of the manifest's `[matrix]` (cartesian product, no exclude/include in ours).
fn cells(table: &Table) -> Vec<Vec<(String, String)>> {
    let matrix = table["matrix"].as_table().unwrap();
    let mut out: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for (key, values) in matrix {
        let values = values.as_array().unwrap();
        out = out
            .into_iter()
            .flat_map(|cell| {
                values.iter().map(move |v| {
                    let text = match v {
                        toml::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    let mut cell = cell.clone();
                    cell.push((key.clone(), text));
                    cell
                })
            })
            .collect();
    }
    out
}

fn render(template: &str, cell: &[(String, String)]) -> String {
    hwr_exp::manifest::template::render(template, |name| match name {
        "hwr-exp" => Some(bin().display().to_string()),
        "repetition" => Some("1".to_owned()),
        _ => cell.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()),
    })
    .unwrap()
}

/// The cell's argv, with `--iterations`/`--sample-every` replaced by `small` values when given
/// (the checked-in counts are sized for a release build).
fn argv(table: &Table, cell: &[(String, String)], small: Option<(&str, &str)>) -> Vec<String> {
    let mut argv: Vec<String> = table["command"]["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| render(a.as_str().unwrap(), cell))
        .collect();
    if let Some((iterations, sample_every)) = small {
        for i in 1..argv.len() {
            match argv[i - 1].as_str() {
                "--iterations" => argv[i] = iterations.to_owned(),
                "--sample-every" => argv[i] = sample_every.to_owned(),
                _ => {}
            }
        }
    }
    argv
}

fn run(table: &Table, argv: &[String]) -> Value {
    let workdir = table["command"]
        .get("workdir")
        .and_then(|w| w.as_str())
        .unwrap_or(".");
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(experiments().join(Path::new(workdir)))
        .env("CUDA_VISIBLE_DEVICES", "")
        .env_remove("HWR_PROBE_SMAPS_PATH")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{argv:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn common_checks(text: &str, table: &Table, name: &str) {
    assert!(text.starts_with("# "), "{name}: comment header first");
    assert_eq!(table["format"].as_integer(), Some(1));
    assert_eq!(table["experiment"]["name"].as_str(), Some(name));
    assert_eq!(
        table["command"]["output"].as_str(),
        Some("{mode}-{elements}-{repetition}.json")
    );
    assert_eq!(table["command"]["output-format"].as_str(), Some("json"));
    assert_eq!(table["isolation"]["cpus"].as_str(), Some("auto"));
    assert_eq!(table["isolation"]["timeout"].as_str(), Some("120s"));
}

#[test]
fn size_compare_asks_for_5_repetitions_of_get_tensor_and_reuse_at_16_and_64() {
    let (text, table) = load("size-compare.toml");
    common_checks(&text, &table, "size-compare");
    assert_eq!(table["schedule"]["repetitions"].as_integer(), Some(5));
    let cells = cells(&table);
    assert_eq!(cells.len(), 4);
    let mut outputs = Vec::new();
    for cell in &cells {
        let doc = run(&table, &argv(&table, cell, Some(("2000", "1000"))));
        assert_eq!(doc["completed"], true);
        let mode = &cell.iter().find(|(k, _)| k == "mode").unwrap().1;
        let elements = &cell.iter().find(|(k, _)| k == "elements").unwrap().1;
        assert_eq!(doc["arguments"]["mode"].as_str(), Some(mode.as_str()));
        assert_eq!(doc["arguments"]["tensor_elements"].to_string(), *elements);
        outputs.push(render(table["command"]["output"].as_str().unwrap(), cell));
    }
    outputs.sort();
    assert_eq!(
        outputs,
        [
            "get_tensor-16-1.json",
            "get_tensor-64-1.json",
            "reuse-16-1.json",
            "reuse-64-1.json"
        ]
    );
    // The checked-in counts: 1,000,000 iterations, a sample every 100,000.
    let full = argv(&table, &cells[0], None);
    let at = |flag: &str| full[full.iter().position(|a| a == flag).unwrap() + 1].clone();
    assert_eq!(at("--iterations"), "1000000");
    assert_eq!(at("--sample-every"), "100000");
}

#[test]
fn feasibility_runs_one_get_tensor_cell_of_10000_iterations_as_written() {
    let (text, table) = load("feasibility.toml");
    common_checks(&text, &table, "feasibility");
    let cells = cells(&table);
    assert_eq!(cells.len(), 1);
    let doc = run(&table, &argv(&table, &cells[0], None));
    assert_eq!(doc["arguments"]["mode"], "get_tensor");
    assert_eq!(doc["arguments"]["iterations"], 10000);
    assert_eq!(doc["arguments"]["sample_every"], 5000);
    let loops = doc["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["phase"] == "loop")
        .count();
    assert_eq!(loops, 2);
}

#[test]
fn python_diagnostic_points_at_the_python_probe_with_the_same_flags() {
    let (text, table) = load("python-diagnostic.toml");
    common_checks(&text, &table, "python-diagnostic");
    assert!(text.contains("pip install safetensors numpy"));
    let cells = cells(&table);
    assert_eq!(cells.len(), 3);
    let first = argv(&table, &cells[0], None);
    assert_eq!(first[0], "python3");
    let workdir = table["command"]["workdir"].as_str().unwrap();
    assert!(
        experiments().join(workdir).join(&first[1]).is_file(),
        "{} relative to the workdir",
        first[1]
    );
    if !python_ready() {
        return;
    }
    let doc = run(&table, &argv(&table, &cells[0], Some(("2000", "1000"))));
    assert_eq!(doc["completed"], true);
    assert_eq!(doc["schema_version"], 1);
}
