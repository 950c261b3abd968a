//! Build-time facts recorded by the built-in probe (`hwr-exp probe safetensors-retention`):
//!
//! - `HWR_BUILD_RUSTC_VERSION`: the output of `$RUSTC --version`, e.g. `rustc 1.95.0 (59807616e 2026-04-14)`;
//! - `HWR_BUILD_SAFETENSORS_VERSION`: the `safetensors` crate version resolved in `Cargo.lock`.
//!
//! Either is `unknown` when it cannot be found (no lock file, compiler not runnable); the build
//! never fails because of them.

use std::path::Path;
use std::process::Command;

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let rustc_version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=HWR_BUILD_RUSTC_VERSION={rustc_version}");

    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".to_owned());
    let lock = Path::new(&manifest_dir).join("Cargo.lock");
    let safetensors = std::fs::read_to_string(&lock)
        .ok()
        .and_then(|text| locked_version(&text, "safetensors"))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=HWR_BUILD_SAFETENSORS_VERSION={safetensors}");
    println!("cargo:rerun-if-changed=Cargo.lock");
    println!("cargo:rerun-if-changed=build.rs");
}

/// The `version` of the `[[package]]` named `name` in Cargo.lock text.
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let wanted = format!("name = \"{name}\"");
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == wanted {
            let version = lines.next()?.trim().strip_prefix("version = \"")?;
            return Some(version.trim_end_matches('"').to_owned());
        }
    }
    None
}
