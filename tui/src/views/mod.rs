//! The dashboard's views, a folder each: its state in `mod.rs` (changed by
//! [`App::update`](crate::app::App::update)) and its drawing in `draw.rs`, which only reads it.
//! - [`runs`]: every run of the workspace, filtered, sorted, grouped, marked.
//! - [`run`]: one open run: header, Charts, Logs, Events, Spec and [`run::sample`] panes; its
//!   [`run::charts`] are the Compare view's too.
//! - [`compare`]: marked runs' curves overlaid and the spec keys that differ.
//! - [`sweep`]: one sweep: a search's status, rungs, leaderboard and parallel coordinates, and
//!   its actions (stop, resume, promote a trial by hand).
//! - [`devices`]: GPUs (or CPU cores and memory) and the processes of live runs.
//! - `text`: small text pieces for the views' cells (bars, sparklines, truncation, sizes).

pub mod compare;
pub mod devices;
pub mod run;
pub mod runs;
pub mod sweep;
pub(crate) mod text;
