//! Following runs live, as views show them.
//!
//! Layout:
//! - `events`: following a run as typed events (`Workspace::watch` → `RunWatch`, a stream of
//!   `RunEvent`; `events::blocking`: the same for plain code, with a time limit per event).
//! - `run_list`: following the whole run list live (`Workspace::watch_runs` → `RunListWatch`,
//!   a stream of `RunListEvent`: runs appearing, changing, disappearing, with metric digests).

pub mod events;
pub mod run_list;
