//! placeholder
pub mod error;
pub mod models;
pub mod spec;
pub use error::{Error, Result};
