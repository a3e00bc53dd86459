//! [`LineChart`] and its [`Series`]: the data preparation (smoothing, scale
//! transform, downsampling of every series) and the rendering of the block,
//! axes, braille curves and legend.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Widget};

use super::downsample::{
    Picker, Scale, Tracker, above, bucket_starts, extremes, floor, plot_value,
};
use super::raster::{Ink, Raster};
use super::smooth::{Ema, clamp_weight};
use super::ticks::{Tick, format_tick, linear_ticks, log_ticks, nice_ticks};

/// Text shown in the plot area when no series has a drawable point.
pub const NO_DATA: &str = "no data yet";

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SeriesStyle {
    /// Braille line through the points; smoothed when the chart smooths.
    #[default]
    Line,
    /// One `•` per point, never smoothed: for sparse points such as per-epoch
    /// validation metrics.
    Dots,
}

/// One curve: e.g. "train loss", "val loss (rank 1)", or a run id in a comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// Curve and legend colour (ignored in monochrome mode).
    pub color: Color,
    /// `(x, y)` points with x ascending (equal x allowed); points with a
    /// non-finite x or y are skipped.
    pub points: Vec<(f64, f64)>,
    /// Line or dots.
    pub style: SeriesStyle,
}

impl Series {
    /// A [`SeriesStyle::Line`] series.
    pub fn line(label: impl Into<String>, color: Color, points: Vec<(f64, f64)>) -> Self {
        Self {
            label: label.into(),
            color,
            points,
            style: SeriesStyle::Line,
        }
    }

    /// A [`SeriesStyle::Dots`] series.
    pub fn dots(label: impl Into<String>, color: Color, points: Vec<(f64, f64)>) -> Self {
        Self {
            label: label.into(),
            color,
            points,
            style: SeriesStyle::Dots,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct LineChart<'a> {
    /// Chart title, shown in the top border.
    pub title: &'a str,
    /// X axis title ("step", "epoch", "time (s)"), shown in the bottom border.
    pub x_title: &'a str,
    /// The curves, drawn in order (later ones on top).
    pub series: &'a [Series],
    /// Y axis scale.
    pub scale: Scale,
    /// TensorBoard smoothing weight in `[0, 0.999]`; 0 draws the raw data.
    pub smoothing: f64,
    /// `false` (`NO_COLOR`): no colours at all; series are told apart by the
    /// legend's per-series markers, which also mark each line's last point.
    pub color: bool,
}

/// Per-series markers used in monochrome mode (legend, dots, line ends).
const MONO_MARKERS: [char; 8] = ['•', '+', 'x', 'o', '*', '#', '%', '@'];

// ---------------------------------------------------------------------------
// Data preparation
// ---------------------------------------------------------------------------

/// One drawable curve after smoothing, scale transform and downsampling.
pub(super) struct Track {
    /// Points in plot coordinates (y is log10 for a log axis).
    pub(super) points: Vec<(f64, f64)>,
    series: usize,
    style: SeriesStyle,
    /// False for the dim raw curve behind a smoothed one.
    strong: bool,
}

/// Everything the renderer needs from the data.
pub(super) struct Prepared {
    pub(super) tracks: Vec<Track>,
    pub(super) x: (f64, f64),
    pub(super) y: (f64, f64),
    /// Per series: the latest drawn value (smoothed when smoothed), real units.
    pub(super) latest: Vec<Option<f64>>,
}

/// X range of the drawable points, assuming x ascending (first and last
/// drawable point of each series).
fn x_extent(series: &[Series], scale: Scale) -> Option<(f64, f64)> {
    let drawable = |&&(x, y): &&(f64, f64)| !plot_value(scale, x, y).is_nan();
    let mut range: Option<(f64, f64)> = None;
    for s in series {
        let first = s.points.iter().find(drawable);
        let last = s.points.iter().rev().find(drawable);
        if let (Some(a), Some(b)) = (first, last) {
            let (lo, hi) = (a.0.min(b.0), a.0.max(b.0));
            range = Some(range.map_or((lo, hi), |(l, h)| (l.min(lo), h.max(hi))));
        }
    }
    range
}

/// One series after downsampling.
struct Reduced {
    /// Raw points in plot coordinates.
    raw: Vec<(f64, f64)>,
    /// Smoothed points in plot coordinates, when smoothed.
    smoothed: Option<Vec<(f64, f64)>>,
    /// Latest drawable value (smoothed when smoothed), real units.
    latest: Option<f64>,
}

/// Downsamples one series into its raw track and, when `smoothing > 0`, its
/// smoothed track, bucket by bucket (`starts` from [`bucket_starts`]).
fn reduce_series(s: &Series, scale: Scale, smoothing: f64, starts: &[usize]) -> Reduced {
    let floor = floor(scale);
    let mut raw = Picker::new(scale);
    let mut smooth = (smoothing > 0.0).then(|| (Picker::new(scale), Ema::new(smoothing)));
    for w in starts.windows(2) {
        let slice = &s.points[w[0]..w[1]];
        if let Some(e) = extremes(slice, |&(x, y)| above(floor, x, y)) {
            raw.add(w[0], slice, e);
        }
        if let Some((picker, ema)) = smooth.as_mut() {
            let mut bucket = Tracker::new();
            ema.scan(slice, |i, (x, _), v| bucket.see(i, above(floor, x, v)));
            if let Some(e) = bucket.finish() {
                picker.add(w[0], slice, e);
            }
        }
    }
    let smooth = smooth.map(|(picker, _)| picker);
    let latest = smooth.as_ref().unwrap_or(&raw).last.map(|l| l.2);
    Reduced {
        raw: raw.finish(),
        smoothed: smooth.map(Picker::finish),
        latest,
    }
}

/// Smooths, transforms and downsamples every series (`buckets` x buckets
/// shared by all). Returns `None` when nothing is drawable.
pub(super) fn prepare(
    series: &[Series],
    scale: Scale,
    smoothing: f64,
    buckets: usize,
) -> Option<Prepared> {
    let (x0, x1) = x_extent(series, scale)?;
    let mut tracks = Vec::new();
    let mut latest = Vec::with_capacity(series.len());
    for (i, s) in series.iter().enumerate() {
        let smoothing = if s.style == SeriesStyle::Line {
            smoothing
        } else {
            0.0
        };
        let starts = bucket_starts(&s.points, x0, x1, buckets.max(1));
        let reduced = reduce_series(s, scale, smoothing, &starts);
        let track = |points, strong| Track {
            points,
            series: i,
            style: s.style,
            strong,
        };
        tracks.push(track(reduced.raw, reduced.smoothed.is_none()));
        tracks.extend(reduced.smoothed.map(|points| track(points, true)));
        latest.push(reduced.latest);
    }
    let (y0, y1) = tracks
        .iter()
        .flat_map(|t| &t.points)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &(_, y)| {
            (lo.min(y), hi.max(y))
        });
    if y0 > y1 {
        return None;
    }
    Some(Prepared {
        tracks,
        x: widen(x0, x1, 0.0),
        y: widen(y0, y1, 0.05),
        latest,
    })
}

/// `[lo, hi]` padded by `pad` of its span on each side; an empty (or
/// float-noise-thin) range becomes ±5% of its value, or ±1 around 0.
pub(super) fn widen(lo: f64, hi: f64, pad: f64) -> (f64, f64) {
    // Halves keep the span finite for bounds near ±f64::MAX.
    let half = hi / 2.0 - lo / 2.0;
    let magnitude = lo.abs().max(hi.abs());
    if half > magnitude * 5e-10 {
        let p = half * 2.0 * pad;
        return ((lo - p).max(f64::MIN), (hi + p).min(f64::MAX));
    }
    let mid = lo / 2.0 + hi / 2.0;
    let d = if mid == 0.0 { 1.0 } else { mid.abs() * 0.05 };
    ((mid - d).max(f64::MIN), (mid + d).min(f64::MAX))
}

// ---------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------

/// Smallest plot area (cells) worth drawing axes for.
const MIN_PLOT_WIDTH: u16 = 4;
const MIN_PLOT_HEIGHT: u16 = 2;

/// Where the parts of the chart go inside the block.
struct Frame {
    inner: Rect,
    plot: Rect,
    y_label_width: u16,
    x_ticks: Vec<Tick>,
    y_ticks: Vec<Tick>,
}

impl Frame {
    /// Lays out axes and labels, or `None` when the area is too small for them.
    fn new(inner: Rect, data: &Prepared, scale: Scale) -> Option<Self> {
        if inner.height < MIN_PLOT_HEIGHT + 2 {
            return None;
        }
        let plot_height = inner.height - 2;
        let n_y = usize::from(plot_height / 3).clamp(2, 5);
        let y_ticks = match scale {
            Scale::Linear => linear_ticks(&nice_ticks(data.y.0, data.y.1, n_y)),
            Scale::Log10 => log_ticks(data.y.0, data.y.1, n_y),
        };
        let widest = y_ticks
            .iter()
            .map(|t| text_width(&t.label))
            .max()
            .unwrap_or(0);
        let y_label_width = (widest as u16).min(inner.width / 3);
        if inner.width < y_label_width + 1 + MIN_PLOT_WIDTH {
            return None;
        }
        let plot_width = inner.width - y_label_width - 1;
        let n_x = usize::from(plot_width / 12).clamp(2, 5);
        let x_ticks = linear_ticks(&nice_ticks(data.x.0, data.x.1, n_x));
        let plot = Rect::new(
            inner.x + y_label_width + 1,
            inner.y,
            plot_width,
            plot_height,
        );
        Some(Self {
            inner,
            plot,
            y_label_width,
            x_ticks,
            y_ticks,
        })
    }

    fn axis_row(&self) -> u16 {
        self.plot.bottom()
    }

    fn axis_col(&self) -> u16 {
        self.plot.x - 1
    }
}

impl LineChart<'_> {
    /// The outer block: title (+ smoothing / log notes) and the x axis title.
    fn block(&self) -> Block<'static> {
        let mut title = vec![Span::styled(
            format!(" {} ", self.title),
            Style::new().add_modifier(Modifier::BOLD),
        )];
        let smoothing = clamp_weight(self.smoothing);
        if smoothing > 0.0 {
            title.push(Span::raw(format!("smoothing {smoothing:.2} ")));
        }
        if self.scale == Scale::Log10 {
            title.push(Span::raw("log "));
        }
        let mut block = Block::bordered().title(Line::from(title));
        if !self.x_title.is_empty() {
            block = block.title_bottom(Line::from(format!(" {} ", self.x_title)).right_aligned());
        }
        block
    }

    /// Style for something drawn in a series' colour (plain when monochrome).
    fn series_style(&self, series: usize) -> Style {
        match self.series.get(series) {
            Some(s) if self.color => Style::new().fg(s.color),
            _ => Style::new(),
        }
    }

    fn axis_style(&self) -> Style {
        if self.color {
            Style::new().fg(Color::DarkGray)
        } else {
            Style::new()
        }
    }

    /// Legend / dot marker of a series.
    fn marker(&self, series: usize) -> char {
        match (self.color, self.series.get(series).map(|s| s.style)) {
            (false, _) => MONO_MARKERS[series % MONO_MARKERS.len()],
            (true, Some(SeriesStyle::Dots)) => '•',
            (true, _) => '─',
        }
    }

    fn draw_no_data(inner: Rect, buf: &mut Buffer) {
        let width = text_width(NO_DATA) as u16;
        let x = inner.x + inner.width.saturating_sub(width) / 2;
        let y = inner.y + inner.height / 2;
        buf.set_stringn(x, y, NO_DATA, usize::from(inner.right() - x), Style::new());
    }

    fn draw_axes(&self, frame: &Frame, raster: &Raster, buf: &mut Buffer) {
        let style = self.axis_style();
        let (col, row) = (frame.axis_col(), frame.axis_row());
        for y in frame.plot.top()..frame.plot.bottom() {
            set_cell(buf, col, y, "│", style);
        }
        for x in frame.plot.left()..frame.plot.right() {
            set_cell(buf, x, row, "─", style);
        }
        set_cell(buf, col, row, "└", style);

        let mut last_row = None;
        for tick in &frame.y_ticks {
            let py = raster.y.pixels - 1 - raster.y.pixel(tick.pos);
            let y = frame.plot.y + (py / 4) as u16;
            if last_row == Some(y) {
                continue;
            }
            last_row = Some(y);
            set_cell(buf, col, y, "┤", style);
            let label = truncate(&tick.label, usize::from(frame.y_label_width));
            let x = frame.inner.x + frame.y_label_width - text_width(&label) as u16;
            buf.set_stringn(x, y, &label, usize::from(frame.y_label_width), Style::new());
        }

        let label_row = row + 1;
        let mut free_from = frame.inner.x;
        for tick in &frame.x_ticks {
            let x = frame.plot.x + (raster.x.pixel(tick.pos) / 2) as u16;
            set_cell(buf, x, row, "┬", style);
            let width = text_width(&tick.label) as u16;
            // Centred under its tick, kept inside the block; skipped if wider.
            let last_start = frame.inner.right().checked_sub(width);
            let Some(last_start) = last_start.filter(|&s| s >= frame.inner.x) else {
                continue;
            };
            let start = x.saturating_sub(width / 2).clamp(frame.inner.x, last_start);
            if start < free_from {
                continue;
            }
            buf.set_stringn(
                start,
                label_row,
                &tick.label,
                usize::from(width),
                Style::new(),
            );
            free_from = start + width + 1;
        }
    }

    fn rasterize(&self, frame: &Frame, data: &Prepared) -> Raster {
        let mut raster = Raster::new(frame.plot.width, frame.plot.height, data.x, data.y);
        let lines = data.tracks.iter().filter(|t| t.style == SeriesStyle::Line);
        // Dim raw curves first so any strong curve sharing a cell takes its colour.
        for track in lines
            .clone()
            .filter(|t| !t.strong)
            .chain(lines.filter(|t| t.strong))
        {
            let ink = Ink {
                series: track.series,
                strong: track.strong,
            };
            raster.polyline(&track.points, ink);
            if let (false, true, Some(&end)) = (self.color, track.strong, track.points.last()) {
                raster.glyph(end, self.marker(track.series), track.series);
            }
        }
        for track in data.tracks.iter().filter(|t| t.style == SeriesStyle::Dots) {
            for &p in &track.points {
                raster.glyph(p, self.marker(track.series), track.series);
            }
        }
        raster
    }

    fn draw_raster(&self, plot: Rect, raster: &Raster, buf: &mut Buffer) {
        for row in 0..raster.height {
            for col in 0..raster.width {
                let i = row * raster.width + col;
                let (x, y) = (plot.x + col as u16, plot.y + row as u16);
                if let Some((glyph, series)) = raster.glyphs[i] {
                    let style = self.series_style(series).remove_modifier(Modifier::DIM);
                    set_cell(buf, x, y, glyph.encode_utf8(&mut [0; 4]), style);
                } else if let Some(ink) = raster.ink[i] {
                    let braille = char::from_u32(0x2800 + u32::from(raster.bits[i])).unwrap_or(' ');
                    let style = self.series_style(ink.series);
                    let style = if ink.strong {
                        style.remove_modifier(Modifier::DIM)
                    } else {
                        style.add_modifier(Modifier::DIM)
                    };
                    set_cell(buf, x, y, braille.encode_utf8(&mut [0; 4]), style);
                }
            }
        }
    }

    /// Legend rows: `(text, series)`; series `None` for the "+N more" row.
    fn legend_rows(
        &self,
        data: &Prepared,
        max_width: usize,
        max_rows: usize,
    ) -> Vec<(String, Option<usize>)> {
        let n = self.series.len();
        if max_rows == 0 || n == 0 || (n > max_rows && max_rows < 2) || max_width < 5 {
            return Vec::new();
        }
        let shown = if n > max_rows { max_rows - 1 } else { n };
        let entry = |i: usize, with_value: bool| {
            let s = &self.series[i];
            let mut text = format!("{} {}", self.marker(i), s.label);
            if let (true, Some(v)) = (with_value, data.latest[i]) {
                text.push(' ');
                text.push_str(&format_tick(v));
            }
            text
        };
        let with_values = (0..shown).all(|i| text_width(&entry(i, true)) <= max_width);
        let mut rows: Vec<(String, Option<usize>)> = (0..shown)
            .map(|i| (truncate(&entry(i, with_values), max_width), Some(i)))
            .collect();
        if shown < n {
            rows.push((truncate(&format!("+{} more", n - shown), max_width), None));
        }
        rows
    }

    fn draw_legend(&self, plot: Rect, data: &Prepared, raster: &Raster, buf: &mut Buffer) {
        let max_width = usize::from(plot.width / 2).saturating_sub(1);
        let rows = self.legend_rows(data, max_width, usize::from(plot.height / 2));
        let Some(width) = rows.iter().map(|(t, _)| text_width(t) + 1).max() else {
            return;
        };
        let (width, height) = (width as u16, rows.len() as u16);
        let (right, bottom) = (plot.width - width, plot.height - height);
        // Top-right unless another corner hides fewer data cells.
        let corners = [(right, 0), (0, 0), (right, bottom), (0, bottom)];
        let cost = |&(c, r): &(u16, u16)| {
            raster.filled(
                usize::from(c),
                usize::from(r),
                usize::from(width),
                usize::from(height),
            )
        };
        let (col, row) = corners
            .iter()
            .copied()
            .min_by_key(|corner| cost(corner))
            .unwrap_or(corners[0]);
        let (x, y) = (plot.x + col, plot.y + row);
        for (dy, (text, series)) in rows.iter().enumerate() {
            let y = y + dy as u16;
            // Blank the cells but keep any background the parent painted.
            let blank = Style::new()
                .fg(Color::Reset)
                .remove_modifier(Modifier::all());
            for dx in 0..width {
                set_cell(buf, x + dx, y, " ", blank);
            }
            let style = series.map_or(Style::new(), |s| self.series_style(s));
            buf.set_stringn(x + 1, y, text, usize::from(width - 1), style);
        }
    }
}

impl Widget for LineChart<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let area = area.intersection(buf.area);
        if area.is_empty() {
            return;
        }
        let block = self.block();
        let inner = block.inner(area);
        block.render(area, buf);
        if inner.is_empty() {
            return;
        }
        let buckets = usize::from(inner.width) * 2;
        let smoothing = clamp_weight(self.smoothing);
        let Some(data) = prepare(self.series, self.scale, smoothing, buckets) else {
            Self::draw_no_data(inner, buf);
            return;
        };
        let Some(frame) = Frame::new(inner, &data, self.scale) else {
            return;
        };
        let raster = self.rasterize(&frame, &data);
        self.draw_axes(&frame, &raster, buf);
        self.draw_raster(frame.plot, &raster, buf);
        self.draw_legend(frame.plot, &data, &raster, buf);
    }
}

/// Display width of `s` in cells.
fn text_width(s: &str) -> usize {
    Span::raw(s).width()
}

/// `s` cut to `max` cells with `…` in the middle when cut, so labels that
/// differ only at the end ("loss (rank 0)", "loss (rank 1)") stay distinct.
pub(super) fn truncate(s: &str, max: usize) -> String {
    if text_width(s) <= max {
        return s.to_string();
    }
    let Some(budget) = max.checked_sub(1) else {
        return String::new();
    };
    let chars: Vec<char> = s.chars().collect();
    let width = |c: &char| text_width(c.encode_utf8(&mut [0; 4]));
    let take = |chars: &mut dyn Iterator<Item = &char>, limit: usize| {
        let mut used = 0;
        chars
            .take_while(|c| {
                used += width(c);
                used <= limit
            })
            .copied()
            .collect::<Vec<char>>()
    };
    let head = take(&mut chars.iter(), budget.div_ceil(2));
    let head_width: usize = head.iter().map(width).sum();
    let mut tail = take(&mut chars.iter().rev(), budget - head_width);
    tail.reverse();
    head.into_iter().chain(['…']).chain(tail).collect()
}

/// Sets one cell's symbol and style, ignoring positions outside the buffer.
fn set_cell(buf: &mut Buffer, x: u16, y: u16, symbol: &str, style: Style) {
    if let Some(cell) = buf.cell_mut((x, y)) {
        cell.set_symbol(symbol).set_style(style);
    }
}
