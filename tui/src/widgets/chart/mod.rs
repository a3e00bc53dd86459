//! Scalar line charts for training metrics (loss, accuracy, learning rate, ...).
//!
//! A TensorBoard-style scalar chart for ratatui: debiased EMA smoothing with the
//! raw curve drawn dim behind the smoothed one, linear or log10 y axis, min/max
//! downsampling (so a million-point series costs about one pass over the data),
//! a legend with each series' latest value, and a monochrome (`NO_COLOR`) mode.
//!
//! The curves are rasterised by this module into braille cells (2×4 dots per
//! terminal cell), so dots from different series merge inside a cell and the
//! smoothed curve's colour wins over the dim raw one.
//!
//! Layout, inside a bordered block:
//! - top border: the title, then ` smoothing 0.60` and ` log` when active;
//! - left column: y tick labels, right-aligned, then the y axis (`│`, `┤` ticks);
//! - plot area: braille curves; [`SeriesStyle::Dots`] points as `•`;
//! - legend: `marker label latest-value` rows in the top-right corner of the
//!   plot, moved to the emptiest corner when the data is under it, and hidden
//!   when the plot is too small;
//! - bottom rows: the x axis (`└──┬──`) and the x tick labels;
//! - bottom border: the x axis title, right-aligned.
//!
//! When no series has a finite point the plot area shows "no data yet"; when the
//! area is too small for the axes only the block (title) is drawn.
//!
//! Files, each importing only the ones listed before it:
//! - `smooth`: [`smooth()`], TensorBoard's debiased EMA (and the streaming form
//!   the renderer uses).
//! - `downsample`: [`Scale`], which points a scale can draw, and min/max
//!   [`downsample()`]ing into x buckets.
//! - `ticks`: [`nice_ticks`], [`format_tick`] and the labelled ticks of linear
//!   and log axes.
//! - `raster`: the braille grid the curves are drawn into.
//! - `widget`: [`Series`], [`LineChart`], the data preparation (smooth,
//!   transform, downsample every series) and the rendering of the layout above.

mod downsample;
mod raster;
mod smooth;
#[cfg(test)]
mod tests;
mod ticks;
mod widget;

pub use downsample::{Scale, downsample};
pub use smooth::{MAX_SMOOTHING, smooth};
pub use ticks::{format_tick, nice_ticks};
pub use widget::{LineChart, NO_DATA, Series, SeriesStyle};
