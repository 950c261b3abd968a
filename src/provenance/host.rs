//! Host facts for host.json.

/// Facts about the machine and the runner (host.json).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct HostFacts {
    /// Placeholder until implemented.
    pub todo: (),
}

/// Collects host facts; missing facts are absent, never an error.
pub fn collect() -> HostFacts {
    todo!("host::collect")
}
