//! The result bundle: versioned on-disk format, writer and reader (DESIGN 5).

pub mod artifacts;
pub mod format;
pub mod read;
pub mod write;

pub use format::*;
pub use write::BundleWriter;
