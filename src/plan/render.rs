//! Printing a plan for `hwr-exp plan`: a table, plan.json, or one shell line per run.

use std::io::{self, Write};

use super::{Plan, PlannedRun, describe_cell};
use crate::cpus::format_cpu_list;
use crate::exec::{CLEAN_KEPT, CLEAN_KEPT_PREFIX};
use crate::manifest::EnvPolicy;

/// Quotes a word for POSIX sh (`''` for the empty string).
pub fn sh_quote(word: &str) -> String {
    if word.is_empty() {
        return "''".into();
    }
    shlex::try_quote(word)
        .map(|c| c.into_owned())
        .unwrap_or_else(|_| format!("'{}'", word.replace('\'', "'\\''")))
}

/// Writes the plan as an aligned text table: index, run-id, cell, repetition, CPUs, command.
///
/// Two passes over the runs (widths, then rows), so memory does not grow with the plan.
///
/// # Errors
/// Errors of `out`.
pub fn table(plan: &Plan, out: &mut impl Write) -> io::Result<()> {
    // Values as the terminal shows them (escaped, long ones cut: `crate::terminal::cell`); the
    // command is escaped but whole, for reproducing the run (`--format json` keeps every value raw).
    let shown = |text: String| crate::terminal::cell(&text, crate::terminal::MAX_WORD_COLUMNS).into_owned();
    let columns = |r: &PlannedRun| {
        [
            shown(r.run_id.clone()),
            shown(describe_cell(&r.cell)),
            r.repetition.to_string(),
            format_cpu_list(&r.cpus),
        ]
    };
    let header = ["run-id", "cell", "rep", "cpus", "command"];
    let mut widths: [usize; 4] = [0; 4];
    for (w, h) in widths.iter_mut().zip(header) {
        *w = h.len();
    }
    for r in plan.runs() {
        for (w, c) in widths.iter_mut().zip(columns(&r)) {
            *w = (*w).max(crate::terminal::width(&c));
        }
    }
    // Padding is written out rather than through `{:w$}`: a format width above u16::MAX panics,
    // and a cell (a long matrix value) can be that wide.
    let line = |out: &mut dyn Write, c: [&str; 5]| {
        for (i, (cell, width)) in c.iter().zip(widths).enumerate() {
            if i > 0 {
                out.write_all(b"  ")?;
            }
            let pad = width.saturating_sub(crate::terminal::width(cell));
            if i == 2 {
                write_spaces(out, pad)?;
                out.write_all(cell.as_bytes())?;
            } else {
                out.write_all(cell.as_bytes())?;
                write_spaces(out, pad)?;
            }
        }
        writeln!(out, "  {}", c[4])
    };
    line(out, header)?;
    for r in plan.runs() {
        let [a, b, c, d] = columns(&r);
        let command = r.argv.iter().map(|a| sh_quote(a)).collect::<Vec<_>>().join(" ");
        let command = crate::terminal::escape(&command);
        line(out, [&a, &b, &c, &d, &command])?;
    }
    let timeout = plan
        .timeout
        .map_or("none".to_string(), |t| humantime::format_duration(t).to_string());
    writeln!(
        out,
        "{} runs, order {}{}, jobs {}, timeout {timeout}, grace {}",
        plan.len(),
        plan.order.as_str(),
        plan.seed.map_or(String::new(), |s| format!(" (seed {s})")),
        plan.jobs,
        humantime::format_duration(plan.grace)
    )?;
    match plan.adaptive_text() {
        Some(text) => writeln!(out, "{text}"),
        None => Ok(()),
    }
}

/// Writes `n` spaces to `out`.
fn write_spaces(out: &mut dyn Write, n: usize) -> io::Result<()> {
    const SPACES: [u8; 64] = [b' '; 64];
    let mut left = n;
    while left > 0 {
        let k = left.min(SPACES.len());
        out.write_all(&SPACES[..k])?;
        left -= k;
    }
    Ok(())
}

/// One shell line equivalent to the run, for reproducing it by hand:
/// `cd DIR && CUDA_VISIBLE_DEVICES='' ... taskset -c 0 timeout -k 5s 120s ARGV...`.
///
/// Variables are set as prefix assignments when that is exact; otherwise (clean policy, removed
/// variables, names that are not shell identifiers) through `env`: `env -i ${PATH+"PATH=$PATH"} ...`
/// keeps only the clean policy's variables that are set, `env -u NAME` removes, `'NAME=value'` sets.
pub fn shell_line(plan: &Plan, run: &PlannedRun) -> String {
    let mut words: Vec<String> = vec![
        "cd".into(),
        sh_quote(&run.workdir.display().to_string()),
        "&&".into(),
    ];
    let clean = run.env.policy == EnvPolicy::Clean;
    let identifier = |k: &str| {
        !k.is_empty()
            && !k.starts_with(|c: char| c.is_ascii_digit())
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let use_env = clean || !run.env.unset.is_empty() || run.env.set.iter().any(|(k, _)| !identifier(k));
    if use_env {
        words.push("env".into());
        if clean {
            words.push("-i".into());
            for k in clean_keep().filter(|k| !run.env.unset.iter().any(|u| u == k)) {
                words.push(format!("${{{k}+\"{k}=${k}\"}}"));
            }
        } else {
            for k in &run.env.unset {
                words.push(format!("-u {}", sh_quote(k)));
            }
        }
        for (k, v) in &run.env.set {
            words.push(if identifier(k) {
                format!("{k}={}", sh_quote(v))
            } else {
                sh_quote(&format!("{k}={v}"))
            });
        }
    } else {
        for (k, v) in &run.env.set {
            words.push(format!("{k}={}", sh_quote(v)));
        }
    }
    if !run.cpus.is_empty() {
        words.push(format!("taskset -c {}", format_cpu_list(&run.cpus)));
    }
    if let Some(t) = plan.timeout {
        words.push(format!(
            "timeout -k {}s {}s",
            secs(plan.grace.as_secs_f64()),
            secs(t.as_secs_f64())
        ));
    }
    words.extend(run.argv.iter().map(|a| sh_quote(a)));
    words.join(" ")
}

/// Locale categories whose `LC_*` variable a shell line passes through under the clean policy
/// (a shell cannot enumerate the variables with a prefix, so the common ones are listed).
const LOCALE_CATEGORIES: &[&str] = &[
    "ALL", "CTYPE", "NUMERIC", "TIME", "COLLATE", "MONETARY", "MESSAGES",
];

/// Variables a shell line keeps under the clean policy: the executor's [`CLEAN_KEPT`] names,
/// then the [`CLEAN_KEPT_PREFIX`] variables of [`LOCALE_CATEGORIES`].
fn clean_keep() -> impl Iterator<Item = String> {
    CLEAN_KEPT.iter().map(|k| k.to_string()).chain(
        LOCALE_CATEGORIES
            .iter()
            .map(|c| format!("{CLEAN_KEPT_PREFIX}{c}")),
    )
}

fn secs(s: f64) -> String {
    let t = format!("{s:.3}");
    t.trim_end_matches('0').trim_end_matches('.').to_string()
}
