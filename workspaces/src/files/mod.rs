//! Files as every part of the workspace writes and follows them.
//!
//! Layout:
//! - `fsutil`: atomic file writes, a folder's modification stamp.
//! - `lockfile`: the workspace's lock files (`locks/`: a GPU, a sweep's slot, the Slurm
//!   watcher), an exclusive `flock` held by a value, and who holds one.
//! - `tail`, `watch`: following files line by line (notify + polling fallback).

pub mod fsutil;
pub mod lockfile;
pub mod tail;
pub mod watch;
