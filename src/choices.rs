//! The closed sets a user chooses from both on the command line and in the library: where runs
//! execute ([`ExecutorKind`]: `run --executor`, the manifest's `[executor] kind`), how a report is
//! written ([`ReportFormat`]: `report --format`, `compare --format`) and what the retention probe
//! does ([`ProbeMode`]: `probe safetensors-retention --mode`, the probe document's `mode`).
//!
//! Each is defined once, here, with its clap [`ValueEnum`] (the command line's names and help) and,
//! where it is written to a file, its serde names; [`crate::cli`] and the modules that act on them
//! ([`crate::manifest`], [`crate::report`], [`crate::probe`]) use the same type, so there is no
//! mirrored enum to map. A leaf: it imports no other module of the crate.
//!
//! Each names itself once (`as_str`), tested against its serde and clap names.

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

/// Where the runs execute (DESIGN 8): the manifest's `[executor] kind` (default `local`), which
/// `run --executor` overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ExecutorKind {
    /// On this machine.
    #[default]
    Local,
    /// As Slurm job arrays (sbatch), one array task per run.
    Slurm,
    /// On an existing Ray cluster, one fresh Ray task process per run.
    Ray,
    /// As one Kubernetes Indexed Job (kubectl), one completion index per run.
    Kubernetes,
}

impl ExecutorKind {
    /// The name the manifest and the command line use (`local`, `slurm`).
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutorKind::Local => "local",
            ExecutorKind::Slurm => "slurm",
            ExecutorKind::Ray => "ray",
            ExecutorKind::Kubernetes => "kubernetes",
        }
    }
}

/// Output format of `report` and `compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ReportFormat {
    /// Terminal tables.
    #[default]
    Table,
    /// Markdown tables, to paste into a pull request.
    Md,
    /// CSV, one row per run (pandas-friendly; `compare`: one row per cell).
    Csv,
    /// One JSON document.
    Json,
    /// One self-contained HTML page (inline CSS and SVG plots, no scripts).
    Html,
}

impl ReportFormat {
    /// The name `--format` takes (`table`, `md`, `csv`, `json`, `html`).
    pub fn as_str(self) -> &'static str {
        match self {
            ReportFormat::Table => "table",
            ReportFormat::Md => "md",
            ReportFormat::Csv => "csv",
            ReportFormat::Json => "json",
            ReportFormat::Html => "html",
        }
    }
}

/// What makes `report --fail-on` exit 1 (DESIGN 6): a verdict a CI job should fail on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOn {
    /// A compared cell's verdict is `above control`.
    AboveControl,
    /// A contrast's verdict is `changes retention`.
    Changes,
}

impl FailOn {
    /// The name `--fail-on` takes (`above-control`, `changes`).
    pub fn as_str(self) -> &'static str {
        match self {
            FailOn::AboveControl => "above-control",
            FailOn::Changes => "changes",
        }
    }
}

/// What one loop iteration of `probe safetensors-retention` does with the tensor (`--mode`, and
/// `mode` in the probe's JSON document).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
pub enum ProbeMode {
    /// Parse the safetensors header from the mapping and copy the tensor into a newly allocated
    /// owned buffer (dropped at the end of the iteration).
    #[serde(rename = "get_tensor")]
    #[value(name = "get_tensor")]
    GetTensor,
    /// Parse the header and take a borrowed view of the mapped bytes (no copy).
    #[serde(rename = "view")]
    #[value(name = "view")]
    View,
    /// Read the one owned copy made by the first read (the control).
    #[serde(rename = "reuse")]
    #[value(name = "reuse")]
    Reuse,
}

impl ProbeMode {
    /// The name `--mode` and the probe document use (`get_tensor`, `view`, `reuse`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeMode::GetTensor => "get_tensor",
            ProbeMode::View => "view",
            ProbeMode::Reuse => "reuse",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `as_str` is clap's name for every variant.
    fn clap_agrees<T: ValueEnum + Copy + std::fmt::Debug>(as_str: fn(T) -> &'static str) {
        for v in T::value_variants() {
            let clap = v.to_possible_value().expect("no variant is skipped");
            assert_eq!(clap.get_name(), as_str(*v), "{v:?}");
        }
    }

    /// `as_str` is serde's name for every variant, both ways.
    fn serde_agrees<T>(as_str: fn(T) -> &'static str)
    where
        T: ValueEnum + Serialize + serde::de::DeserializeOwned + Copy + PartialEq + std::fmt::Debug,
    {
        for v in T::value_variants() {
            assert_eq!(serde_json::to_value(v).unwrap(), as_str(*v), "{v:?}");
            let back: T = serde_json::from_value(as_str(*v).into()).unwrap();
            assert_eq!(back, *v);
        }
    }

    #[test]
    fn every_choice_names_itself_as_clap_and_serde_do() {
        clap_agrees(ExecutorKind::as_str);
        serde_agrees(ExecutorKind::as_str);
        clap_agrees(ProbeMode::as_str);
        serde_agrees(ProbeMode::as_str);
        clap_agrees(ReportFormat::as_str);
        clap_agrees(FailOn::as_str);
        assert_eq!(ExecutorKind::default(), ExecutorKind::Local);
        assert_eq!(ReportFormat::default(), ReportFormat::Table);
    }
}
