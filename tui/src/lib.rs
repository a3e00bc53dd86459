//! `ddp-tui`: a terminal dashboard over a ddp workspace — the runs of every experiment, live
//! charts and per-replica logs of one run, the devices and the processes on them, and a
//! comparison of runs — with the same actions as the `ddp` CLI (new run, stop, resume, delete,
//! tags, notes). Built on `ddp-workspaces` alone: the run folders are the contract, so runs
//! started by the CLI or a notebook appear by themselves and quitting never touches a run.
//!
//! The shape is ratatui's: one [`app::App`] state changed only by [`app::App::update`] (which
//! returns effects instead of doing I/O), rendering that borrows the state (`impl Widget for
//! &App`), and one loop ([`runtime`]) that selects over input, producer events and a tick.
//!
//! Layout:
//! - [`app`]: `App`, `Msg` (everything that changes it), `Effect` (what it asks the runtime to
//!   do), `update`; `app_tests` tests it without a terminal.
//! - [`keys`]: key tables per view (the footer and the help overlay are made from them).
//! - [`runs`], [`run_view`], [`compare`]: the state of the Runs, Run and Compare views.
//! - `scroll`: what the movement keys do to a plain scroll position (Run and Compare views).
//! - [`dialog`], [`input`]: dialogs (help, confirm, new run, tags, filter, search), which take
//!   their own keys and return a `DialogOutcome` for `update` to apply, and the one-line input
//!   with shell-like word splitting and path completion.
//! - [`widgets`]: the dashboard's own widgets, a folder each with one file per part:
//!   [`widgets::logview`] (log buffers, scrolling/follow/search state, ANSI and `\r`
//!   rendering) and [`widgets::chart`] (braille line charts with TensorBoard smoothing and log
//!   scale).
//! - `ui`: drawing every view and dialog (`impl Widget for &App`); its tests, one file per view.
//! - [`theme`]: colours, honouring `NO_COLOR`.
//! - [`runtime`]: the terminal, the producers (run-list watch, run watches, telemetry), the
//!   effect executor and the event loop.
//! - [`bench`](mod@bench): the performance benchmark (`ddp-tui --bench`).

pub mod app;
#[cfg(test)]
mod app_tests;
pub mod bench;
pub mod compare;
pub mod dialog;
pub mod input;
pub mod keys;
pub mod run_view;
pub mod runs;
pub mod runtime;
mod scroll;
pub mod theme;
mod ui;
pub mod widgets;
