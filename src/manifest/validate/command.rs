//! `[command]` (DESIGN 3): exactly one of `argv` / `shell`, `workdir`, `output` (a file name
//! template inside the run's folder) and `output-format` (default from `output`'s extension).

use toml::de::{DeTable, DeValue};

use super::{Val, Validator, did_you_mean};
use crate::manifest::model::{CommandSpec, OutputFormat, Program};
use crate::manifest::template::Segment;

/// Every key of `[command]`.
pub(super) const KEYS: &[&str] = &["argv", "shell", "workdir", "output", "output-format"];

/// Built-in placeholders whose values are paths (they hold `/`).
const PATH_BUILTINS: &[&str] = &["hwr-exp", "bundle", "run-dir"];

impl Validator<'_> {
    pub(super) fn command(&mut self, root: &DeTable<'_>, known: &[String]) -> Option<CommandSpec> {
        let t = self.section(root, "command", KEYS);
        let argv_v = self.field(t, "command", "argv");
        let shell_v = self.field(t, "command", "shell");
        let mut program = None;
        match (argv_v, shell_v) {
            (Some(_), Some(s)) => self.err(
                s.span(),
                "both `argv` and `shell` are set",
                Some("give exactly one: argv = [\"prog\", \"arg\"] runs directly, shell = \"...\" runs under /bin/sh -c".into()),
            ),
            (None, None)
                if ["command", "command.argv", "command.shell"]
                    .iter()
                    .any(|k| self.suggested.contains(*k)) => {}
            (None, None) => {
                let span = self.section_span("command");
                self.err(
                    span,
                    if t.is_some() {
                        "missing `argv` or `shell` in [command]"
                    } else {
                        "missing [command] with `argv` or `shell`"
                    },
                    Some("give exactly one: argv = [\"prog\", \"arg\"] or shell = \"...\"".into()),
                );
            }
            _ => {}
        }
        if let Some(v) = argv_v {
            match v.get_ref() {
                DeValue::Array(items) if items.is_empty() => {
                    self.err(
                        v.span(),
                        "`argv` is empty",
                        Some("argv[0] is the program to run".into()),
                    );
                }
                DeValue::Array(items) => {
                    let mut args = Vec::new();
                    for item in items.iter() {
                        if let Some(s) = self.string(item) {
                            self.template(item, s, known, "command.argv");
                            args.push(s.to_string());
                        }
                    }
                    if matches!(items[0].get_ref(), DeValue::String(s) if s.is_empty()) {
                        self.err(items[0].span(), "`argv[0]` is empty", None);
                    }
                    program = Some(Program::Argv(args));
                }
                _ => self.type_err(v, "an array of strings"),
            }
        }
        if let Some(v) = shell_v
            && let Some(s) = self.string(v)
        {
            if s.trim().is_empty() {
                self.err(v.span(), "`shell` is empty", None);
            }
            self.template(v, s, known, "command.shell");
            program = Some(Program::Shell(s.to_string()));
        }
        let workdir = match self.field(t, "command", "workdir") {
            Some(v) => match self.string(v) {
                Some(s) => {
                    if s.is_empty() {
                        self.err(
                            v.span(),
                            "`workdir` is empty",
                            Some("write \".\" for the manifest's folder".into()),
                        );
                    }
                    self.template(v, s, known, "command.workdir");
                    s.to_string()
                }
                None => String::new(),
            },
            None => ".".to_string(),
        };
        let format = match self.field(t, "command", "output-format") {
            Some(v) => match self.string(v) {
                Some("json") => Some(OutputFormat::Json),
                Some("text") => Some(OutputFormat::Text),
                Some(other) => {
                    let help = match did_you_mean(other, ["json", "text"]) {
                        Some(s) => format!("did you mean \"{s}\"? "),
                        None => String::new(),
                    };
                    self.err(
                        v.span(),
                        format!("unknown output-format \"{other}\""),
                        Some(format!("{help}valid values: \"json\", \"text\"")),
                    );
                    None
                }
                None => None,
            },
            None => None,
        };
        let output = match self.field(t, "command", "output") {
            Some(v) => match self.string(v) {
                Some(s) => {
                    if s.is_empty() {
                        self.err(
                            v.span(),
                            "`output` is empty",
                            Some("default: \"{run-id}.json\"".into()),
                        );
                    } else if let Some(segments) = self.template(v, s, known, "command.output") {
                        self.output_placeholders(v, s, &segments);
                        if let Some(i) = s.find('/') {
                            let span = match self.string_content_start(v, s) {
                                Some(b) => b + i..b + i + 1,
                                None => v.span(),
                            };
                            self.err(
                            span,
                            "`output` must be a file name, not a path: `/` is not allowed",
                            Some("the output is saved inside the run's own folder runs/<run-id>/; use a name like \"{mode}-{repetition}.json\"".into()),
                        );
                        }
                    }
                    Some(s.to_string())
                }
                None => None,
            },
            None => None,
        };
        let output_format = format.unwrap_or(match &output {
            Some(o) if !o.ends_with(".json") => OutputFormat::Text,
            _ => OutputFormat::Json,
        });
        let output = output.unwrap_or_else(|| {
            match output_format {
                OutputFormat::Json => "{run-id}.json",
                OutputFormat::Text => "{run-id}.txt",
            }
            .to_string()
        });
        Some(CommandSpec {
            program: program?,
            workdir,
            output,
            output_format,
        })
    }

    /// `output` is a file name: the path-valued built-ins (`{bundle}`, `{run-dir}`, `{hwr-exp}`)
    /// would put a `/` into it when the run starts, whatever `check` and `plan` saw.
    fn output_placeholders(&mut self, v: &Val<'_>, text: &str, segments: &[Segment<'_>]) {
        let base = self.string_content_start(v, text);
        for seg in segments {
            if let Segment::Placeholder { name, span } = seg
                && PATH_BUILTINS.contains(name)
            {
                let at = match base {
                    Some(b) => b + span.start..b + span.end,
                    None => v.span(),
                };
                self.err(
                    at,
                    format!("`{{{name}}}` is a path and cannot be part of `output`, a file name"),
                    Some("the output is saved inside the run's own folder runs/<run-id>/; use {run-id}, {repetition} and matrix keys".into()),
                );
            }
        }
    }
}
