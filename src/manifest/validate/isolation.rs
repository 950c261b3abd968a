//! `[isolation]` (DESIGN 3): the CPU pool (`cpus`, `cpus-per-run`), `timeout` and `grace`, and
//! the run's environment (`env-policy`, `env`, `env-unset`), and the `allocator` (a template;
//! its names are checked when the plan is made, against the host's linker cache).
//!
//! Rules beyond types: a listed pool must hold `jobs` x `cpus-per-run` CPUs, each listed once;
//! a variable may not be both set in `env` and removed in `env-unset`; `env` may not set
//! `LD_PRELOAD` beside `allocator`. Whether listed CPUs are in
//! the allowed set is a host fact, checked when the plan is made.

use std::collections::BTreeSet;
use std::ops::Range;
use std::time::Duration;

use toml::de::{DeTable, DeValue};

use super::{Val, Validator, did_you_mean, entries, found};
use crate::cpus;
use crate::manifest::model::{CpuSelection, EnvPolicy, Isolation};

/// Every key of `[isolation]`.
pub(super) const KEYS: &[&str] = &[
    "cpus",
    "cpus-per-run",
    "timeout",
    "grace",
    "env-policy",
    "env",
    "env-unset",
    "allocator",
];

/// Default `grace`: 5 s between SIGTERM and SIGKILL.
const DEFAULT_GRACE: Duration = Duration::from_secs(5);

impl Validator<'_> {
    pub(super) fn isolation(&mut self, root: &DeTable<'_>, known: &[String], jobs: u32) -> Isolation {
        let t = self.section(root, "isolation", KEYS);
        let mut iso = Isolation {
            cpus: CpuSelection::Auto,
            cpus_per_run: 1,
            timeout: None,
            grace: DEFAULT_GRACE,
            env_policy: EnvPolicy::Inherit,
            env: Vec::new(),
            env_unset: Vec::new(),
            allocator: None,
        };
        let cpus_per_run_v = self.field(t, "isolation", "cpus-per-run");
        let mut cpus_per_run_ok = true;
        if let Some(v) = cpus_per_run_v {
            match self.positive::<usize>(v, "cpus-per-run") {
                Some(n) => iso.cpus_per_run = n,
                None => cpus_per_run_ok = false,
            }
        }
        let cpus_v = self.field(t, "isolation", "cpus");
        let mut pool_ok = true;
        if let Some(v) = cpus_v {
            let (cpus, ok) = self.cpus(v);
            iso.cpus = cpus;
            pool_ok = ok;
        }
        // Only a listed pool is checked here: the size of "auto" (the allowed CPU set) and
        // whether listed CPUs are allowed are host facts, checked when the plan is made.
        if let CpuSelection::List(pool) = &iso.cpus
            && pool_ok
            && cpus_per_run_ok
        {
            self.pool_size(pool, iso.cpus_per_run, jobs, cpus_per_run_v, cpus_v);
        }
        if let Some(v) = self.field(t, "isolation", "timeout") {
            iso.timeout = self.positive_duration(v, "timeout");
        }
        if let Some(v) = self.field(t, "isolation", "grace") {
            iso.grace = self.positive_duration(v, "grace").unwrap_or(DEFAULT_GRACE);
        }
        if let Some(v) = self.field(t, "isolation", "env-policy")
            && let Some(p) = self.string(v)
        {
            iso.env_policy = self.env_policy(v, p);
        }
        if let Some(v) = self.field(t, "isolation", "env") {
            iso.env = self.env(v, known);
        }
        if let Some(v) = self.field(t, "isolation", "env-unset") {
            iso.env_unset = self.env_unset(v, &iso.env);
        }
        if let Some(v) = self.field(t, "isolation", "allocator")
            && let Some(s) = self.string(v)
        {
            iso.allocator = self.allocator(v, s, known, &iso.env);
        }
        iso
    }

    /// `cpus`: "auto", a CPU list string or an array of CPU numbers, each listed once. Returns
    /// the selection and whether the list is valid (the pool size is checked only then); an
    /// invalid list gives the CPUs that were valid.
    fn cpus(&mut self, v: &Val<'_>) -> (CpuSelection, bool) {
        let mut pool_ok = true;
        // (cpu, span of the value that named it)
        let mut listed: Vec<(usize, Range<usize>)> = Vec::new();
        match v.get_ref() {
            DeValue::String(s) if s.as_ref() == "auto" => {}
            DeValue::String(s) => match cpus::parse_cpu_list(s) {
                Ok(list) if list.is_empty() => {
                    pool_ok = false;
                    self.err(
                        v.span(),
                        "empty CPU list",
                        Some("write \"auto\", a list like [0, 2] or a range like \"2-3\"".into()),
                    );
                }
                Ok(list) => listed.extend(list.into_iter().map(|c| (c, v.span()))),
                Err(e) => {
                    pool_ok = false;
                    self.err(
                        v.span(),
                        format!("invalid CPU list \"{s}\": {e}"),
                        Some("write \"auto\", a list like [0, 2] or a range like \"2-3,5\"".into()),
                    );
                }
            },
            DeValue::Array(items) if items.is_empty() => {
                pool_ok = false;
                self.err(
                    v.span(),
                    "empty CPU list",
                    Some("write \"auto\" or list at least one CPU".into()),
                );
            }
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    // Later stages point at one CPU of the list (the allowed-set check).
                    self.spans.insert(format!("isolation.cpus.{i}"), item.span());
                    match self.integer(item) {
                        Some(n) if n >= 0 => listed.push((n as usize, item.span())),
                        Some(n) => {
                            pool_ok = false;
                            self.err(
                                item.span(),
                                format!("CPU numbers are non-negative, found {n}"),
                                None,
                            );
                        }
                        None => pool_ok = false,
                    }
                }
            }
            _ => {
                pool_ok = false;
                self.err(
                    v.span(),
                    format!(
                        "expected \"auto\", a CPU list string or an array of CPU numbers, found {}",
                        found(v.get_ref())
                    ),
                    None,
                );
            }
        }
        let mut seen = BTreeSet::new();
        let mut pool = Vec::new();
        for (cpu, span) in listed {
            if !seen.insert(cpu) {
                pool_ok = false;
                self.err(span, format!("CPU {cpu} is listed more than once"), None);
                continue;
            }
            pool.push(cpu);
        }
        if matches!(v.get_ref(), DeValue::String(s) if s.as_ref() == "auto") {
            (CpuSelection::Auto, pool_ok)
        } else {
            (CpuSelection::List(pool), pool_ok)
        }
    }

    /// A listed pool must hold `jobs` x `cpus-per-run` CPUs; the error points at `cpus-per-run`,
    /// else `jobs`, else `cpus`, else the section.
    fn pool_size(
        &mut self,
        pool: &[usize],
        cpus_per_run: usize,
        jobs: u32,
        cpus_per_run_v: Option<&Val<'_>>,
        cpus_v: Option<&Val<'_>>,
    ) {
        let need = (jobs as usize).saturating_mul(cpus_per_run);
        if need > pool.len() {
            let span = cpus_per_run_v
                .map(|v| v.span())
                .or_else(|| self.spans.get("schedule.jobs").cloned())
                .or_else(|| cpus_v.map(|v| v.span()))
                .unwrap_or_else(|| self.section_span("isolation"));
            self.err(
                span,
                format!(
                    "jobs ({jobs}) x cpus-per-run ({}) needs {need} CPUs, but `cpus` ({}) has {}",
                    cpus_per_run,
                    cpus::format_cpu_list(pool),
                    pool.len()
                ),
                Some("each concurrent run gets its own CPUs; lower `jobs` or `cpus-per-run`, or list more CPUs".into()),
            );
        }
    }

    /// `env-policy`: "inherit" or "clean"; an unknown value is reported and read as "inherit".
    fn env_policy(&mut self, v: &Val<'_>, p: &str) -> EnvPolicy {
        match p {
            "inherit" => EnvPolicy::Inherit,
            "clean" => EnvPolicy::Clean,
            other => {
                let help = match did_you_mean(other, ["inherit", "clean"]) {
                    Some(s) => format!("did you mean \"{s}\"? "),
                    None => String::new(),
                };
                self.err(
                    v.span(),
                    format!("unknown env-policy \"{other}\""),
                    Some(format!("{help}valid values: \"inherit\", \"clean\"")),
                );
                EnvPolicy::Inherit
            }
        }
    }

    /// `env`: a table of variable names to templates, in the order written.
    fn env(&mut self, v: &Val<'_>, known: &[String]) -> Vec<(String, String)> {
        let mut env = Vec::new();
        match v.get_ref() {
            DeValue::Table(table) => {
                for (k, val) in entries(table) {
                    let name: &str = k.get_ref();
                    self.spans.insert(format!("isolation.env.{name}"), val.span());
                    self.env_name(name, k.span());
                    if let Some(s) = self.string(val) {
                        self.template(val, s, known, &format!("isolation.env.{name}"));
                        env.push((name.to_string(), s.to_string()));
                    }
                }
            }
            _ => self.type_err(v, "a table of strings, like env = { NAME = \"value\" }"),
        }
        env
    }

    /// `env-unset`: an array of variable names, none of them also set in `env`.
    fn env_unset(&mut self, v: &Val<'_>, env: &[(String, String)]) -> Vec<String> {
        let mut unset = Vec::new();
        match v.get_ref() {
            DeValue::Array(items) => {
                for item in items.iter() {
                    if let Some(s) = self.string(item) {
                        self.env_name(s, item.span());
                        if env.iter().any(|(n, _)| n == s) {
                            self.err(
                                item.span(),
                                format!("`{s}` is both set in `env` and removed in `env-unset`"),
                                Some("keep it in one of the two".into()),
                            );
                        }
                        unset.push(s.to_string());
                    }
                }
            }
            _ => self.type_err(v, "an array of strings"),
        }
        unset
    }

    /// `allocator` (a template, not empty); `env` may not set `LD_PRELOAD` beside it.
    fn allocator(
        &mut self,
        v: &Val<'_>,
        s: &str,
        known: &[String],
        env: &[(String, String)],
    ) -> Option<String> {
        let mut allocator = None;
        if s.is_empty() {
            self.err(
                v.span(),
                "allocator is empty",
                Some("write \"glibc\", \"jemalloc\", \"tcmalloc\", \"mimalloc\", a library path or a placeholder".into()),
            );
        } else if self.template(v, s, known, "isolation.allocator").is_some() {
            allocator = Some(s.to_string());
        }
        if env.iter().any(|(n, _)| n == "LD_PRELOAD") {
            let span = self
                .spans
                .get("isolation.env.LD_PRELOAD")
                .cloned()
                .unwrap_or(v.span());
            self.err(
                span,
                "`LD_PRELOAD` is set in `env` and `allocator` is given: the allocator sets it",
                Some("keep one of the two".into()),
            );
        }
        allocator
    }

    fn env_name(&mut self, name: &str, span: Range<usize>) {
        if name.is_empty() {
            self.err(span, "environment variable name is empty", None);
        } else if name.contains('=') || name.contains('\0') {
            self.err(
                span,
                format!(
                    "environment variable name `{}` contains `=` or NUL",
                    name.escape_debug()
                ),
                None,
            );
        }
    }
}
