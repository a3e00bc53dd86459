mod server;

pub use server::*;
