//! `[executor]` (DESIGN 3 and 8): `kind = "local" | "slurm"` and the slurm-only keys.
//!
//! Rules beyond types: the slurm-only keys (`partition`, `account`, `qos`, `time-margin`,
//! `sbatch-args`) are errors with `kind = "local"` (also when `kind` is left at its default);
//! a fixed CPU list in `[isolation] cpus` is an error with `kind = "slurm"` (Slurm picks each
//! task's CPUs; `"auto"` means those); `sbatch-args` may not set what hwr-exp sets itself.

use toml::de::{DeTable, DeValue};

use super::executor_kubernetes::KUBERNETES_KEYS;
use super::{Validator, did_you_mean, entries};
use crate::manifest::model::{CpuSelection, ExecutorConfig, ExecutorKind, Isolation, SlurmConfig};

/// Every key of `[executor]`.
pub(super) const KEYS: &[&str] = &[
    "kind",
    "partition",
    "account",
    "qos",
    "time-margin",
    "sbatch-args",
    "keep-sbatch-env",
    "nodes",
    "exclude-nodes",
    "requeue",
    "address",
    "image",
    "namespace",
    "context",
    "volume",
    "mount-path",
    "memory",
];

/// The keys that apply to `kind = "ray"` only.
const RAY_KEYS: &[&str] = &["address"];

/// The keys that apply to `kind = "slurm"` only.
const SLURM_KEYS: &[&str] = &[
    "partition",
    "account",
    "qos",
    "time-margin",
    "sbatch-args",
    "keep-sbatch-env",
    "nodes",
    "exclude-nodes",
    "requeue",
];

/// sbatch options hwr-exp sets itself (long form, short form, why / what to write instead).
const RESERVED_OPTIONS: &[(&str, Option<&str>, &str)] = &[
    (
        "--array",
        Some("-a"),
        "hwr-exp submits the plan as job arrays itself",
    ),
    ("--wrap", None, "the batch script is hwr-exp's"),
    (
        "--comment",
        None,
        "hwr-exp tags its arrays with the bundle in --comment",
    ),
    (
        "--hold",
        Some("-H"),
        "hwr-exp submits held and releases once the job id is recorded",
    ),
    (
        "--output",
        Some("-o"),
        "Slurm's logs go to the bundle's slurm/logs/",
    ),
    (
        "--error",
        Some("-e"),
        "Slurm's logs go to the bundle's slurm/logs/",
    ),
    (
        "--job-name",
        Some("-J"),
        "hwr-exp names the job hwr-exp:<experiment>",
    ),
    ("--chdir", Some("-D"), "tasks run in the bundle's folder"),
    ("--ntasks", Some("-n"), "each array task is one run"),
    (
        "--dependency",
        Some("-d"),
        "hwr-exp chains its arrays with --dependency",
    ),
    ("--cpus-per-task", Some("-c"), "set `cpus-per-run` in [isolation]"),
    (
        "--time",
        Some("-t"),
        "Slurm's --time is `timeout` + `grace` + `time-margin`",
    ),
    ("--partition", Some("-p"), "set `partition` in [executor]"),
    ("--account", Some("-A"), "set `account` in [executor]"),
    ("--qos", Some("-q"), "set `qos` in [executor]"),
    ("--requeue", None, "set `requeue = true` in [executor]"),
    (
        "--no-requeue",
        None,
        "hwr-exp sets it unless `requeue = true` in [executor]",
    ),
    ("--nodelist", Some("-w"), "set `nodes` in [executor]"),
    ("--exclude", Some("-x"), "set `exclude-nodes` in [executor]"),
];

/// The reserved option `arg` names, if any: `--opt`, `--opt=value`, an unambiguous abbreviation
/// (`--arr=...`, as getopt accepts), `-x` or `-xVALUE`.
fn reserved(arg: &str) -> Option<(&'static str, &'static str)> {
    if let Some(long) = arg.strip_prefix("--") {
        let name = long.split('=').next().unwrap_or(long);
        return RESERVED_OPTIONS
            .iter()
            .find(|(opt, _, _)| {
                let opt = &opt[2..];
                opt == name || (name.len() >= 3 && opt.starts_with(name))
            })
            .map(|(opt, _, why)| (*opt, *why));
    }
    let short = arg.get(..2)?;
    RESERVED_OPTIONS
        .iter()
        .find(|(_, s, _)| *s == Some(short))
        .map(|(opt, _, why)| (*opt, *why))
}

impl Validator<'_> {
    /// A word of `[executor]` `key`: a non-empty string without white space or control
    /// characters (one argument of a scheduler's command line: a Slurm partition, a Ray address,
    /// a Kubernetes image). `help` says what to write instead; an error otherwise.
    pub(super) fn executor_word(
        &mut self,
        t: Option<&DeTable<'_>>,
        key: &str,
        help: String,
    ) -> Option<String> {
        let v = self.field(t, "executor", key)?;
        let s = self.string(v)?;
        let problem = if s.is_empty() {
            format!("`{key}` is empty")
        } else if !is_word(s) {
            format!(
                "`{key}` \"{}\" contains white space or control characters",
                s.escape_debug()
            )
        } else {
            return Some(s.to_string());
        };
        self.err(v.span(), problem, Some(help));
        None
    }

    /// A Slurm name (`partition`, `account`, `qos`): an [`Validator::executor_word`].
    fn slurm_name(&mut self, t: Option<&DeTable<'_>>, key: &str) -> Option<String> {
        let help = format!("Slurm {key} names are single words; remove `{key}` to use the cluster's default");
        self.executor_word(t, key, help)
    }

    /// `nodes` / `exclude-nodes`: a host list string (`"n[1-2]"`, `"n1,n2"`) or an array of
    /// node names, each without white space, control characters or (in an array) commas; joined
    /// by `,` for sbatch.
    fn node_list(&mut self, t: Option<&DeTable<'_>>, key: &str) -> Option<String> {
        let v = self.field(t, "executor", key)?;
        let bad = |s: &str| !is_word(s);
        let help = format!("write {key} = [\"n1\", \"n2\"] or a Slurm host list like {key} = \"n[1-2]\"");
        match v.get_ref() {
            DeValue::String(s) => {
                if bad(s) {
                    self.err(
                        v.span(),
                        format!(
                            "`{key}` \"{}\" is empty or contains white space",
                            s.escape_debug()
                        ),
                        Some(help),
                    );
                    return None;
                }
                Some(s.to_string())
            }
            DeValue::Array(items) => {
                let mut names = Vec::new();
                for item in items.iter() {
                    let Some(name) = self.string(item) else { continue };
                    if bad(name) || name.contains(',') {
                        self.err(
                            item.span(),
                            format!(
                                "node name \"{}\" is empty or contains white space or a comma",
                                name.escape_debug()
                            ),
                            Some(help.clone()),
                        );
                        continue;
                    }
                    names.push(name.to_string());
                }
                if names.is_empty() {
                    if items.is_empty() {
                        self.err(
                            v.span(),
                            format!("`{key}` is empty"),
                            Some(format!("remove `{key}` to allow every node")),
                        );
                    }
                    return None;
                }
                Some(names.join(","))
            }
            _ => {
                self.type_err(v, "a host list string or an array of node names");
                None
            }
        }
    }

    /// Errors for keys of `[executor]` in `keys`, which apply only to the executor `owner`, when
    /// the manifest's executor is `kind` (another).
    fn keys_of_other_kinds(
        &mut self,
        t: Option<&DeTable<'_>>,
        kind: ExecutorKind,
        owner: &str,
        keys: &[&str],
    ) {
        if kind.as_str() == owner {
            return;
        }
        for (k, _) in t.map(entries).unwrap_or_default() {
            let name: &str = k.get_ref();
            if keys.contains(&name) {
                let stated = self.spans.contains_key("executor.kind");
                self.err(
                    k.span(),
                    format!(
                        "`{name}` applies only to the {owner} executor, and this manifest's is {}{}",
                        kind.as_str(),
                        if stated { "" } else { " (the default)" }
                    ),
                    Some(format!("set kind = \"{owner}\" in [executor], or remove the key")),
                );
            }
        }
    }

    /// The keys of `kind = "ray"`: `address` (a non-empty string without white space); a fixed
    /// CPU list in `[isolation] cpus` is an error (each task claims CPUs on its node).
    fn ray_executor(
        &mut self,
        t: Option<&DeTable<'_>>,
        isolation: &Isolation,
    ) -> crate::manifest::model::RayConfig {
        let mut ray = crate::manifest::model::RayConfig::default();
        let help = "write the head node's GCS address, like address = \"10.0.0.5:6379\", or remove it to use RAY_ADDRESS";
        ray.address = self.executor_word(t, "address", help.into());
        if let CpuSelection::List(_) = isolation.cpus {
            let span = self
                .spans
                .get("isolation.cpus")
                .cloned()
                .unwrap_or_else(|| self.section_span("isolation"));
            self.err(
                span,
                "a fixed CPU list cannot be used with the ray executor",
                Some("each Ray task claims free CPUs of its node: write cpus = \"auto\" and set `cpus-per-run`".into()),
            );
        }
        ray
    }

    /// `[executor]`; `isolation` is the validated `[isolation]` (for the CPU-list rule).
    /// `adaptive`: the schedule's repetitions are adaptive (refused with kubernetes for now).
    pub(super) fn executor(
        &mut self,
        root: &DeTable<'_>,
        isolation: &Isolation,
        adaptive: bool,
    ) -> ExecutorConfig {
        let t = self.section(root, "executor", KEYS);
        let mut config = ExecutorConfig::default();
        if let Some(v) = self.field(t, "executor", "kind")
            && let Some(k) = self.string(v)
        {
            config.kind = match k {
                "local" => ExecutorKind::Local,
                "slurm" => ExecutorKind::Slurm,
                "ray" => ExecutorKind::Ray,
                "kubernetes" => ExecutorKind::Kubernetes,
                other => {
                    let help = match did_you_mean(other, ["local", "slurm", "ray", "kubernetes"]) {
                        Some(s) => format!("did you mean \"{s}\"? "),
                        None => String::new(),
                    };
                    self.err(
                        v.span(),
                        format!("unknown executor kind \"{other}\""),
                        Some(format!(
                            "{help}valid values: \"local\", \"slurm\", \"ray\", \"kubernetes\""
                        )),
                    );
                    // The other keys are judged as if the kind were right: no second error
                    // for slurm keys under a misspelt "slurm".
                    ExecutorKind::Slurm
                }
            };
        }
        self.keys_of_other_kinds(t, config.kind, "ray", RAY_KEYS);
        self.keys_of_other_kinds(t, config.kind, "kubernetes", KUBERNETES_KEYS);
        if config.kind == ExecutorKind::Ray {
            self.keys_of_other_kinds(t, config.kind, "slurm", SLURM_KEYS);
            config.ray = self.ray_executor(t, isolation);
            return config;
        }
        if config.kind == ExecutorKind::Local {
            for (k, _) in t.map(entries).unwrap_or_default() {
                let name: &str = k.get_ref();
                if SLURM_KEYS.contains(&name) {
                    let stated = self.spans.contains_key("executor.kind");
                    self.err(
                        k.span(),
                        format!(
                            "`{name}` applies only to the slurm executor, and this manifest's is local{}",
                            if stated { "" } else { " (the default)" }
                        ),
                        Some("set kind = \"slurm\" in [executor], or remove the key".into()),
                    );
                }
            }
            return ExecutorConfig::default();
        }
        if config.kind == ExecutorKind::Kubernetes {
            let own = |k: &&str| *k != "time-margin";
            let slurm_only: Vec<&str> = SLURM_KEYS.iter().copied().filter(own).collect();
            self.keys_of_other_kinds(t, config.kind, "slurm", &slurm_only);
            config.kubernetes = self.kubernetes_executor(t, isolation, adaptive);
            return config;
        }

        let mut slurm = SlurmConfig {
            partition: self.slurm_name(t, "partition"),
            account: self.slurm_name(t, "account"),
            qos: self.slurm_name(t, "qos"),
            nodes: self.node_list(t, "nodes"),
            exclude_nodes: self.node_list(t, "exclude-nodes"),
            ..SlurmConfig::default()
        };
        if let Some(v) = self.field(t, "executor", "time-margin")
            && let Some(d) = self.duration(v, "time-margin")
        {
            slurm.time_margin = d;
        }
        if let Some(v) = self.field(t, "executor", "requeue") {
            match v.get_ref() {
                DeValue::Boolean(b) => slurm.requeue = *b,
                _ => self.type_err(v, "a boolean, like requeue = true"),
            }
        }
        if let Some(v) = self.field(t, "executor", "sbatch-args") {
            match v.get_ref() {
                DeValue::Array(items) => {
                    for item in items.iter() {
                        let Some(arg) = self.string(item) else { continue };
                        if arg.is_empty() {
                            self.err(item.span(), "empty sbatch argument", None);
                        } else if arg.contains(['\n', '\r', '\0']) {
                            self.err(
                                item.span(),
                                "sbatch argument contains a line break or NUL",
                                Some(
                                    "each argument becomes part of an #SBATCH line of the batch script"
                                        .into(),
                                ),
                            );
                        } else if let Some((opt, why)) = reserved(arg) {
                            self.err(
                                item.span(),
                                format!("sbatch-args may not set `{opt}`: hwr-exp sets it"),
                                Some(why.to_string()),
                            );
                        }
                        slurm.sbatch_args.push(arg.to_string());
                    }
                }
                _ => self.type_err(v, "an array of strings, like sbatch-args = [\"--mem=4G\"]"),
            }
        }
        if let Some(v) = self.field(t, "executor", "keep-sbatch-env") {
            match v.get_ref() {
                DeValue::Boolean(b) => slurm.keep_sbatch_env = *b,
                _ => self.type_err(v, "a boolean"),
            }
        }
        if let CpuSelection::List(_) = isolation.cpus {
            let span = self
                .spans
                .get("isolation.cpus")
                .cloned()
                .unwrap_or_else(|| self.section_span("isolation"));
            self.err(
                span,
                "a fixed CPU list cannot be used with the slurm executor",
                Some("Slurm chooses each task's CPUs: write cpus = \"auto\" (the CPUs Slurm gives the task) and set `cpus-per-run`".into()),
            );
        }
        config.slurm = slurm;
        config
    }
}

/// Whether `s` is one word: non-empty, without white space or control characters.
fn is_word(s: &str) -> bool {
    !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use crate::manifest::{self, Diagnostics, ExecutorKind, Manifest};

    const HEAD: &str = "format = 1\n[experiment]\nname = \"t\"\n[command]\nargv = [\"true\"]\n";

    fn parse(tail: &str) -> Result<Manifest, Diagnostics> {
        manifest::parse(&format!("{HEAD}{tail}"), Path::new("m.toml"), Path::new("/"))
    }

    /// `(line, col, message)` of every diagnostic.
    fn errors(tail: &str) -> Vec<(usize, usize, String)> {
        let d = parse(tail).expect_err("should fail");
        d.items
            .iter()
            .map(|i| {
                let (l, c) = d.line_col(i.span.start);
                (l, c, i.message.clone())
            })
            .collect()
    }

    #[test]
    fn defaults_to_local() {
        let m = parse("").unwrap();
        assert_eq!(m.executor.kind, ExecutorKind::Local);
        assert_eq!(m.executor.slurm.time_margin, Duration::from_secs(60));
        let m = parse("[executor]\nkind = \"local\"\n").unwrap();
        assert_eq!(m.executor.kind, ExecutorKind::Local);
    }

    #[test]
    fn reads_every_slurm_key() {
        let m = parse(
            "[executor]\nkind = \"slurm\"\npartition = \"cpu\"\naccount = \"proj-1\"\nqos = \"normal\"\n\
             time-margin = \"2m\"\nsbatch-args = [\"--mem=4G\", \"--constraint\", \"skylake\"]\n",
        )
        .unwrap();
        let s = &m.executor.slurm;
        assert_eq!(m.executor.kind, ExecutorKind::Slurm);
        assert_eq!(s.partition.as_deref(), Some("cpu"));
        assert_eq!(s.account.as_deref(), Some("proj-1"));
        assert_eq!(s.qos.as_deref(), Some("normal"));
        assert_eq!(s.time_margin, Duration::from_secs(120));
        assert_eq!(s.sbatch_args, ["--mem=4G", "--constraint", "skylake"]);
        assert_eq!(&m.source[m.spans["executor.partition"].clone()], "\"cpu\"");
    }

    #[test]
    fn requeue_is_a_slurm_boolean_and_sbatch_args_may_not_set_it() {
        assert!(
            !parse("[executor]\nkind = \"slurm\"\n")
                .unwrap()
                .executor
                .slurm
                .requeue
        );
        let m = parse("[executor]\nkind = \"slurm\"\nrequeue = true\n").unwrap();
        assert!(m.executor.slurm.requeue);
        let e = errors("[executor]\nkind = \"slurm\"\nrequeue = \"yes\"\n");
        assert!(e.iter().any(|(_, _, m)| m.contains("requeue = true")), "{e:?}");
        let e = errors("[executor]\nrequeue = true\n");
        assert!(
            e.iter()
                .any(|(_, _, m)| m.contains("applies only to the slurm executor")),
            "{e:?}"
        );
        let e = errors("[executor]\nkind = \"slurm\"\nsbatch-args = [\"--requeue\", \"--no-requeue\"]\n");
        assert_eq!(e.len(), 2, "{e:?}");
    }

    #[test]
    fn nodes_and_exclude_nodes_take_a_host_list_or_names() {
        let m = parse("[executor]\nkind = \"slurm\"\nnodes = [\"n1\", \"n2\"]\nexclude-nodes = \"n[3-4]\"\n")
            .unwrap();
        assert_eq!(m.executor.slurm.nodes.as_deref(), Some("n1,n2"));
        assert_eq!(m.executor.slurm.exclude_nodes.as_deref(), Some("n[3-4]"));
        let e = errors("[executor]\nkind = \"slurm\"\nnodes = [\"n 1\", \"a,b\"]\nexclude-nodes = []\n");
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(e[0].2.contains("node name \"n 1\""), "{e:?}");
        assert!(e[2].2.contains("`exclude-nodes` is empty"), "{e:?}");
        let e = errors("[executor]\nkind = \"slurm\"\nsbatch-args = [\"--nodelist=n1\", \"-x\", \"n2\"]\n");
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(
            e[0].2.contains("--nodelist") && e[1].2.contains("--exclude"),
            "{e:?}"
        );
        let e = errors("[executor]\nnodes = \"n1\"\n");
        assert!(e[0].2.contains("applies only to the slurm executor"), "{e:?}");
    }

    #[test]
    fn slurm_keys_need_the_slurm_kind() {
        assert_eq!(
            errors("[executor]\npartition = \"cpu\"\n"),
            [(
                7,
                1,
                "`partition` applies only to the slurm executor, and this manifest's is local (the default)"
                    .into()
            )]
        );
        let e = errors("[executor]\nkind = \"local\"\nqos = \"x\"\ntime-margin = \"1s\"\n");
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!((e[0].0, e[0].1), (8, 1));
        assert!(e[0].2.ends_with("this manifest's is local"), "{e:?}");
        assert_eq!((e[1].0, e[1].1), (9, 1));
    }

    #[test]
    fn unknown_keys_and_kinds_suggest_the_closest() {
        let d = parse("[executor]\nkind = \"slurm\"\npartiton = \"cpu\"\n").unwrap_err();
        assert_eq!(d.items.len(), 1);
        assert_eq!(d.items[0].message, "unknown key `partiton` in [executor]");
        assert!(
            d.items[0]
                .help
                .as_deref()
                .unwrap()
                .starts_with("did you mean `partition`?")
        );
        let d = parse("[executor]\nkind = \"slrum\"\npartition = \"cpu\"\n").unwrap_err();
        assert_eq!(d.items.len(), 1, "{d}");
        assert_eq!(d.items[0].message, "unknown executor kind \"slrum\"");
        assert!(
            d.items[0]
                .help
                .as_deref()
                .unwrap()
                .starts_with("did you mean \"slurm\"?")
        );
    }

    #[test]
    fn fixed_cpu_lists_are_refused_with_slurm() {
        let e = errors("[isolation]\ncpus = [0]\n[executor]\nkind = \"slurm\"\n");
        assert!(
            e.contains(&(
                7,
                8,
                "a fixed CPU list cannot be used with the slurm executor".into()
            )),
            "{e:?}"
        );
        let e = errors("[isolation]\ncpus = \"0\"\n[executor]\nkind = \"slurm\"\n");
        assert!(
            e.iter()
                .any(|(l, c, m)| (*l, *c) == (7, 8) && m.contains("fixed CPU list")),
            "{e:?}"
        );
        let m = parse("[isolation]\ncpus = \"auto\"\n[executor]\nkind = \"slurm\"\n").unwrap();
        assert_eq!(m.executor.kind, ExecutorKind::Slurm);
        // The local executor (stated or by default) keeps fixed lists.
        let first = crate::cpus::allowed_cpus().unwrap()[0];
        for tail in ["", "[executor]\nkind = \"local\"\n"] {
            let m = parse(&format!("[isolation]\ncpus = [{first}]\n{tail}")).unwrap();
            assert_eq!(m.isolation.cpus, crate::manifest::CpuSelection::List(vec![first]));
        }
    }

    #[test]
    fn bad_values_are_located() {
        let e = errors(
            "[executor]\nkind = \"slurm\"\npartition = \"\"\nqos = \"a b\"\ntime-margin = \"60\"\n\
             sbatch-args = [\"--array=0-3\", 4, \"-c4\", \"--arr=1\", \"--time-min=5\", \"--mem\", \"4G\"]\n",
        );
        let msgs: Vec<String> = e.iter().map(|(l, c, m)| format!("{l}:{c} {m}")).collect();
        assert_eq!(
            msgs,
            [
                "8:13 `partition` is empty",
                "9:7 `qos` \"a b\" contains white space or control characters",
                "10:15 invalid duration \"60\" for `time-margin`: time unit needed, for example 60sec or 60ms",
                "11:16 sbatch-args may not set `--array`: hwr-exp sets it",
                "11:31 expected a string, found an integer",
                "11:34 sbatch-args may not set `--cpus-per-task`: hwr-exp sets it",
                "11:41 sbatch-args may not set `--array`: hwr-exp sets it",
            ]
        );
        let e = errors("[executor]\nkind = \"slurm\"\nsbatch-args = \"--mem=4G\"\n");
        assert_eq!(
            e[0].2,
            "expected an array of strings, like sbatch-args = [\"--mem=4G\"], found a string"
        );
        let d = manifest::parse(
            &format!("executor = \"slurm\"\n{HEAD}"),
            Path::new("m.toml"),
            Path::new("/"),
        )
        .unwrap_err();
        assert_eq!(
            d.items[0].message,
            "expected a table ([executor]), found a string"
        );
        assert_eq!(d.line_col(d.items[0].span.start), (1, 12));
    }

    #[test]
    fn reserved_options() {
        assert_eq!(super::reserved("--partition").map(|r| r.0), Some("--partition"));
        assert_eq!(super::reserved("--part=x").map(|r| r.0), Some("--partition"));
        assert_eq!(super::reserved("-pcpu").map(|r| r.0), Some("--partition"));
        assert_eq!(super::reserved("--mem=4G"), None);
        assert_eq!(super::reserved("--time-min=10"), None);
        assert_eq!(super::reserved("--ntasks-per-node=1"), None);
        assert_eq!(super::reserved("4G"), None);
        assert_eq!(super::reserved("-"), None);
    }

    #[test]
    fn ray_reads_its_address_and_refuses_the_keys_of_other_executors() {
        let m = parse("[executor]\nkind = \"ray\"\naddress = \"10.0.0.5:6379\"\n").unwrap();
        assert_eq!(m.executor.kind, ExecutorKind::Ray);
        assert_eq!(m.executor.ray.address.as_deref(), Some("10.0.0.5:6379"));
        let m = parse("[executor]\nkind = \"ray\"\n").unwrap();
        assert_eq!(m.executor.ray.address, None, "RAY_ADDRESS then");
        let e = errors("[executor]\nkind = \"ray\"\npartition = \"cpu\"\n");
        assert!(
            e.iter().any(|(_, _, m)| m
                .contains("`partition` applies only to the slurm executor, and this manifest's is ray")),
            "{e:?}"
        );
        let e = errors("[executor]\naddress = \"h:1\"\n");
        assert!(
            e.iter().any(|(_, _, m)| m.contains(
                "`address` applies only to the ray executor, and this manifest's is local (the default)"
            )),
            "{e:?}"
        );
        let e = errors("[executor]\nkind = \"slurm\"\naddress = \"h:1\"\n");
        assert!(
            e.iter()
                .any(|(_, _, m)| m.contains("applies only to the ray executor")),
            "{e:?}"
        );
        let e = errors("[executor]\nkind = \"ray\"\naddress = \"h 1\"\n");
        assert!(
            e.iter()
                .any(|(_, _, m)| m.contains("`address` \"h 1\" contains white space")),
            "{e:?}"
        );
        let e = errors("[executor]\nkind = \"rya\"\n");
        assert!(
            e.iter().any(|(_, _, m)| m.contains("unknown executor kind")),
            "{e:?}"
        );
    }
}
