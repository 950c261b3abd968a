//! The result bundle: versioned on-disk format, writer and reader (DESIGN 5).

pub mod format;
pub mod read;
pub mod reason;
pub mod write;

pub use format::*;
pub use write::BundleWriter;
