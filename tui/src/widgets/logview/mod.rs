//! Per-replica log panes for `ddp-tui`.
//!
//! A training run writes one log per replica (`logs/rank-R.log`) plus
//! `logs/supervisor.log`. Lines arrive live, may carry ANSI SGR colours and
//! carriage-return progress bars, and are shown in scrollable, searchable
//! panes: one per source, or all sources merged in arrival order.
//!
//! Lines are stored raw; the terminal processing (CR overwrite, escapes,
//! tabs) is done only for the lines a frame actually shows, or once per line
//! by a search scan.
//!
//! # Layout
//! - `buffer`: [`LogSource`], [`LogLine`] (one log line and the replica it
//!   came from) and [`LogBuffer`], the bounded FIFO of the newest lines, with a
//!   monotonic line index (`dropped() + position`) that survives lines
//!   scrolling off.
//! - `ansi`: what one raw line looks like on screen ([`render_text`],
//!   [`visible_text`]): the escape parser (`process`, `escape`, `csi`, `sgr`)
//!   feeding a `Sink` of shown characters.
//! - `search`: case-insensitive matching (`Needle`) and an active search's
//!   matches (`Search`).
//! - `state`: [`LogViewState`], the follow / scroll / wrap / search state of
//!   one pane, and the rows a wrapped line takes (`RowWrap`).
//! - `widget`: [`LogPane`], the widget that draws the visible lines of a
//!   buffer (row layout: `Shaper`).
//!
//! Each file imports only the ones listed before it.
//!
//! # Per frame
//! ```text
//! state.refresh(&buf); // keeps search counts live (cheap: new lines only)
//! let block = Block::bordered().title(" rank 1 ");
//! let inner = block.inner(area);
//! f.render_widget(block, area);
//! let pane = LogPane { highlight: state.search_query(), ..LogPane::new(&buf, &state) };
//! f.render_widget(pane, inner); // also records `inner`'s size in `state`
//! ```
//! Keys map to `scroll_up/down`, `page_up/down`, `home`, `end`,
//! `toggle_follow`, `toggle_wrap`, `set_search`, `next_match` (`n`, older)
//! and `prev_match` (`N`, newer); `search_status()` feeds the status line.

mod ansi;
mod buffer;
mod search;
mod state;
#[cfg(test)]
mod tests;
mod widget;

pub use ansi::{render_text, visible_text};
pub use buffer::{LogBuffer, LogLine, LogSource};
pub use state::LogViewState;
pub use widget::LogPane;
