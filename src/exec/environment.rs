//! The child's environment: which of the runner's variables a run starts from, then the
//! manifest's `env` and `env-unset` (DESIGN 3, `[isolation]` `env-policy`).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// What a run's environment starts from (the manifest's `[isolation] env-policy`, mapped by the
/// runner).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvPolicy {
    /// The runner's whole environment.
    Inherit,
    /// Only the runner's variables that [`clean_keeps`] accepts.
    Clean,
}

/// Variables the clean policy keeps from the runner's environment (when set), besides every
/// name starting with [`CLEAN_KEPT_PREFIX`].
pub const CLEAN_KEPT: &[&str] = &["PATH", "HOME", "LANG", "TERM", "USER", "TMPDIR"];

/// Prefix of the locale variables the clean policy also keeps (`LC_ALL`, `LC_CTYPE`, ...).
pub const CLEAN_KEPT_PREFIX: &str = "LC_";

/// `true` when the clean policy keeps the runner's variable `name`: one of [`CLEAN_KEPT`] or a
/// name starting with [`CLEAN_KEPT_PREFIX`].
pub fn clean_keeps(name: &OsStr) -> bool {
    let b = name.as_bytes();
    CLEAN_KEPT.iter().any(|k| k.as_bytes() == b) || b.starts_with(CLEAN_KEPT_PREFIX.as_bytes())
}

/// Builds a run's environment.
///
/// - `policy`: [`EnvPolicy::Inherit`] starts from the runner's whole environment;
///   [`EnvPolicy::Clean`] keeps only the variables [`clean_keeps`] accepts (`PATH`, `HOME`,
///   `LANG`, `LC_*`, `TERM`, `USER` and `TMPDIR`, those that are set);
/// - then every `(name, value)` of `set` is applied in order (a later one overrides an earlier
///   one; an empty value stays an empty string, it does not unset);
/// - then every name in `unset` is removed.
///
/// Returns `(name, value)` pairs without duplicates, in the runner's order followed by new names
/// in `set` order.
pub fn build_env(policy: EnvPolicy, set: &[(String, String)], unset: &[String]) -> Vec<(OsString, OsString)> {
    let keep = |name: &OsStr| match policy {
        EnvPolicy::Inherit => true,
        EnvPolicy::Clean => clean_keeps(name),
    };
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os().filter(|(k, _)| keep(k)).collect();
    for (name, value) in set {
        match env.iter_mut().find(|(k, _)| k == name.as_str()) {
            Some(slot) => slot.1 = OsString::from(value),
            None => env.push((OsString::from(name), OsString::from(value))),
        }
    }
    env.retain(|(k, _)| !unset.iter().any(|u| k == u.as_str()));
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_policy_keeps_the_listed_names_and_locale_variables() {
        for name in [
            "PATH", "HOME", "LANG", "TERM", "USER", "TMPDIR", "LC_ALL", "LC_CTYPE",
        ] {
            assert!(clean_keeps(OsStr::new(name)), "{name}");
        }
        for name in ["PYTHONPATH", "PATHX", "LD_PRELOAD", "LC", "HOME2"] {
            assert!(!clean_keeps(OsStr::new(name)), "{name}");
        }
    }
}
