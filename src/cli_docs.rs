//! Documentation generated from the clap definitions in [`crate::cli`]: shell completion scripts
//! (clap_complete) and man pages in roff (clap_mangen). Nothing here is written by hand, so the
//! completions and pages follow every change of the command line.

use std::io::Write;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;

/// The binary's name, as completions register it and man pages title it.
pub const BIN_NAME: &str = "hwr-exp";

/// Errors writing completions or a man page.
#[derive(Debug, thiserror::Error)]
pub enum CliDocsError {
    /// `hwr-exp man A B` names a subcommand that does not exist.
    #[error("no subcommand `{path}`; {available}")]
    UnknownCommand {
        /// The subcommand path as given, space separated.
        path: String,
        /// The deepest command that exists on the path (`hwr-exp`, `hwr-exp probe`).
        parent: String,
        /// What there is instead: `subcommands of `hwr-exp probe`: safetensors-retention` (hidden
        /// ones left out), or `` `hwr-exp report` has no subcommands``.
        available: String,
    },
    /// Writing to the output failed.
    #[error("writing: {0}")]
    Io(#[from] std::io::Error),
}

/// The clap command tree, built (subcommands know their full names, e.g. `hwr-exp-run`), without
/// clap's implicit `help` subcommand, which has no page of its own.
fn command() -> clap::Command {
    let mut cmd = Cli::command().bin_name(BIN_NAME).disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// Writes the completion script for `shell` to `out`.
///
/// # Errors
/// [`CliDocsError::Io`] when `out` cannot be written.
pub fn completions(shell: Shell, out: &mut dyn Write) -> Result<(), CliDocsError> {
    use clap_complete::Generator;
    let cmd = command();
    shell.try_generate(&cmd, out)?;
    Ok(())
}

/// Writes the man page (roff, section 1) of the subcommand at `path` (empty: hwr-exp itself, whose
/// page lists every subcommand) to `out`.
///
/// # Errors
/// [`CliDocsError::UnknownCommand`] when `path` names no subcommand, [`CliDocsError::Io`] when
/// `out` cannot be written.
pub fn man_page(path: &[String], out: &mut dyn Write) -> Result<(), CliDocsError> {
    let mut cmd = command();
    let mut walked = vec![BIN_NAME.to_string()];
    for name in path {
        let found = cmd.find_subcommand(name).cloned();
        let Some(sub) = found else {
            let names: Vec<String> = cmd
                .get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(|s| s.get_name().to_string())
                .collect();
            let parent = walked.join(" ");
            let available = if names.is_empty() {
                format!("`{parent}` has no subcommands")
            } else {
                format!("subcommands of `{parent}`: {}", names.join(", "))
            };
            return Err(CliDocsError::UnknownCommand {
                path: path.join(" "),
                parent,
                available,
            });
        };
        walked.push(name.clone());
        cmd = sub;
    }
    clap_mangen::Man::new(cmd).render(out)?;
    if path.is_empty() {
        // The SUBCOMMANDS section names pages like hwr-exp-run(1): say where they come from.
        out.write_all(SEE_ALSO.as_bytes())?;
    }
    Ok(())
}

/// Closing section of the top-level page (roff).
const SEE_ALSO: &str = r#".SH "SEE ALSO"
The page of each subcommand is printed by \fBhwr\-exp man\fR \fISUBCOMMAND\fR, e.g.
\fBhwr\-exp man run | man \-l \-\fR.
Shell completions: \fBhwr\-exp completions\fR \fIbash\fR|\fIzsh\fR|\fIfish\fR|\fIelvish\fR|\fIpowershell\fR.
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn man_page_of_a_nested_subcommand_and_an_unknown_one() {
        let mut out = Vec::new();
        man_page(&["probe".into(), "safetensors-retention".into()], &mut out).unwrap();
        let page = String::from_utf8(out).unwrap();
        assert!(
            page.contains(".TH hwr-exp-probe-safetensors-retention 1"),
            "{page}"
        );
        let err = man_page(&["probe".into(), "nope".into()], &mut Vec::new()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no subcommand `probe nope`; subcommands of `hwr-exp probe`: safetensors-retention"
        );
    }
}
