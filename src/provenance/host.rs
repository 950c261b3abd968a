//! Host facts for host.json. (stub until the provenance branch lands)

/// Facts about the machine and the runner (host.json).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct HostFacts {
    /// Placeholder until implemented.
    pub todo: (),
}

/// Collects host facts. (stub)
pub fn collect() -> HostFacts {
    HostFacts { todo: () }
}

impl HostFacts {
    /// Writes host.json. (stub)
    ///
    /// # Errors
    /// I/O errors.
    pub fn write(&self, bundle_dir: &std::path::Path) -> std::io::Result<()> {
        let _ = bundle_dir;
        Ok(())
    }
}
