//! `[executor]` keys of `kind = "kubernetes"` (DESIGN 3 and 8, docs/kubernetes.md): `image`,
//! `namespace`, `context`, `volume`, `mount-path`, `memory`, `time-margin`.
//!
//! Rules beyond types: `image` and `volume` are required; names are non-empty single words (a namespace and a claim name are DNS
//! labels / subdomains, checked by Kubernetes; here only what would break the Job outright);
//! `mount-path` is absolute; `memory` is at least 1 MiB; a fixed CPU list and adaptive repetitions
//! are errors (Kubernetes picks each pod's CPUs; the Job is submitted whole).

use toml::de::DeTable;

use super::Validator;
use crate::manifest::model::{CpuSelection, Isolation, KubernetesConfig};

/// The keys that apply to `kind = "kubernetes"` only.
pub(super) const KUBERNETES_KEYS: &[&str] =
    &["image", "namespace", "context", "volume", "mount-path", "memory"];

/// The smallest `memory` accepted: 1 MiB (a pod below that cannot start a process).
const MIN_MEMORY: f64 = 1024.0 * 1024.0;

impl Validator<'_> {
    /// A single-word name of `[executor]` ([`Validator::executor_word`]).
    fn kubernetes_word(&mut self, t: Option<&DeTable<'_>>, key: &str) -> Option<String> {
        self.executor_word(
            t,
            key,
            format!("Kubernetes {key} names are single words, like \"bench\""),
        )
    }

    /// The kubernetes keys of `[executor]` `t`; `isolation` and `adaptive` for the rules that
    /// span sections.
    pub(super) fn kubernetes_executor(
        &mut self,
        t: Option<&DeTable<'_>>,
        isolation: &Isolation,
        adaptive: bool,
    ) -> KubernetesConfig {
        let mut config = KubernetesConfig {
            image: self.kubernetes_word(t, "image"),
            namespace: self.kubernetes_word(t, "namespace"),
            context: self.kubernetes_word(t, "context"),
            volume: self.kubernetes_word(t, "volume"),
            ..KubernetesConfig::default()
        };
        if let Some(v) = self.field(t, "executor", "mount-path")
            && let Some(s) = self.string(v)
        {
            if s.starts_with('/') && !s.contains(['\n', '\0']) {
                config.mount_path = Some(std::path::PathBuf::from(s));
            } else {
                self.err(
                    v.span(),
                    format!("`mount-path` \"{}\" is not an absolute path", s.escape_debug()),
                    Some("the folder inside the pods where `volume` is mounted, like \"/results\"".into()),
                );
            }
        }
        if let Some(v) = self.field(t, "executor", "memory")
            && let Some(bytes) = self.size(v, "memory")
        {
            if bytes < MIN_MEMORY {
                self.err(
                    v.span(),
                    "`memory` is below 1MiB",
                    Some("each run's pod requests and is limited to this much, like \"4GiB\"".into()),
                );
            } else {
                config.memory = Some(bytes as u64);
            }
        }
        if let Some(v) = self.field(t, "executor", "time-margin")
            && let Some(d) = self.duration(v, "time-margin")
        {
            config.time_margin = Some(d);
        }
        let missing: Vec<&str> = [
            ("image", config.image.is_none()),
            ("volume", config.volume.is_none()),
        ]
        .into_iter()
        .filter(|&(key, absent)| absent && !self.spans.contains_key(&format!("executor.{key}")))
        .map(|(key, _)| key)
        .collect();
        if !missing.is_empty() {
            let span = self.section_span("executor");
            self.err(
                span,
                format!("the kubernetes executor needs `{}` in [executor]", missing.join("` and `")),
                Some("image: the pods' container image, with hwr-exp on its PATH; volume: the PersistentVolumeClaim holding the results folder (docs/kubernetes.md)".into()),
            );
        }
        if let CpuSelection::List(_) = isolation.cpus {
            let span = self
                .spans
                .get("isolation.cpus")
                .cloned()
                .unwrap_or_else(|| self.section_span("isolation"));
            self.err(
                span,
                "a fixed CPU list cannot be used with the kubernetes executor",
                Some("Kubernetes places each pod: write cpus = \"auto\" (the CPUs the pod gets) and set `cpus-per-run`".into()),
            );
        }
        if adaptive {
            let span = self
                .spans
                .get("schedule.repetitions")
                .cloned()
                .unwrap_or_else(|| self.section_span("schedule"));
            self.err(
                span,
                "adaptive repetitions cannot be used with the kubernetes executor yet: it submits the whole plan as one Indexed Job",
                Some("give a fixed number, like repetitions = 10, or use kind = \"local\"".into()),
            );
        }
        config
    }
}
