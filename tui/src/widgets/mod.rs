//! The dashboard's own widgets, a folder each with one file per part:
//! - [`logview`]: per-replica log panes (line buffer, ANSI processing, search, view state and
//!   the widget that draws them).
//! - [`chart`]: scalar line charts (smoothing, downsampling, ticks, braille raster and the
//!   widget that draws them).

pub mod chart;
pub mod logview;
