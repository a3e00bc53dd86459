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

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Widget};

/// Largest smoothing weight accepted; larger weights are clamped to it.
pub const MAX_SMOOTHING: f64 = 0.999;

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

/// Y axis scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scale {
    /// Plain linear axis.
    #[default]
    Linear,
    /// Log10 axis: non-positive y are dropped; tick labels show real values
    /// (0.01, 0.1, 1).
    Log10,
}

/// A titled line chart widget. See the module docs for the layout.
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

// ---------------------------------------------------------------------------
// Smoothing
// ---------------------------------------------------------------------------

/// TensorBoard's scalar smoothing: a debiased exponential moving average.
///
/// For each finite y: `last = last * w + (1 - w) * y` (starting from 0), and the
/// smoothed value is `last / (1 - w^n)` where n counts the finite values so far.
/// Non-finite y are passed through unsmoothed and do not touch the average; a
/// constant series is returned unchanged (as TensorBoard does). `weight` is
/// clamped to `[0, 0.999]`; 0 returns the raw points.
#[must_use]
pub fn smooth(points: &[(f64, f64)], weight: f64) -> Vec<(f64, f64)> {
    let weight = clamp_weight(weight);
    let constant = points
        .first()
        .is_some_and(|&(_, y0)| points.iter().all(|&(_, y)| y == y0));
    if weight == 0.0 || constant {
        return points.to_vec();
    }
    let mut ema = Ema::new(weight);
    points.iter().map(|&(x, y)| (x, ema.next(y))).collect()
}

/// Clamps a smoothing weight to `[0, MAX_SMOOTHING]`; NaN becomes 0.
fn clamp_weight(weight: f64) -> f64 {
    if weight.is_nan() {
        0.0
    } else {
        weight.clamp(0.0, MAX_SMOOTHING)
    }
}

/// Streaming debiased EMA (the state behind [`smooth`]).
struct Ema {
    weight: f64,
    last: f64,
    /// `weight^n` for the n finite values seen so far.
    weight_pow: f64,
}

impl Ema {
    fn new(weight: f64) -> Self {
        Self {
            weight,
            last: 0.0,
            weight_pow: 1.0,
        }
    }

    /// Feeds one value and returns its smoothed value (non-finite passes through).
    fn next(&mut self, y: f64) -> f64 {
        if !y.is_finite() {
            return y;
        }
        self.last = self.last * self.weight + (1.0 - self.weight) * y;
        self.weight_pow *= self.weight;
        self.last / (1.0 - self.weight_pow)
    }

    /// Smooths the y of `points`, calling `visit(i, point, smoothed)` for each
    /// point in order.
    ///
    /// Same values as [`Ema::next`] up to rounding, but once the debias factor
    /// has reached 1 it advances four points per step of the recurrence, which
    /// keeps the loop-carried dependency short on long series.
    #[inline]
    fn scan(&mut self, points: &[(f64, f64)], mut visit: impl FnMut(usize, (f64, f64), f64)) {
        let mut done = 0;
        while done < points.len() && 1.0 - self.weight_pow != 1.0 {
            let p = points[done];
            visit(done, p, self.next(p.1));
            done += 1;
        }
        let (w, a) = (self.weight, 1.0 - self.weight);
        let (w2, w3) = (w * w, w * w * w);
        let w4 = w2 * w2;
        let mut chunks = points[done..].chunks_exact(4);
        for c in &mut chunks {
            let (y0, y1, y2, y3) = (c[0].1, c[1].1, c[2].1, c[3].1);
            if (y0 + y1 + y2 + y3).is_finite() {
                let s = self.last;
                let s0 = w * s + a * y0;
                let s1 = w * s0 + a * y1;
                let s2 = w * s1 + a * y2;
                // From `s` directly: the loop-carried chain is one step per 4 points.
                self.last = w4 * s + a * (y3 + w * y2 + w2 * y1 + w3 * y0);
                for (k, v) in [s0, s1, s2, self.last].into_iter().enumerate() {
                    visit(done + k, c[k], v);
                }
            } else {
                for (k, &p) in c.iter().enumerate() {
                    visit(done + k, p, self.next(p.1));
                }
            }
            done += 4;
        }
        for (k, &p) in chunks.remainder().iter().enumerate() {
            visit(done + k, p, self.next(p.1));
        }
    }
}

// ---------------------------------------------------------------------------
// Downsampling
// ---------------------------------------------------------------------------

/// Reduces x-ascending `points` to the first and last point plus, for each of
/// `buckets` equal-width x buckets spanning the finite points' x range, the
/// points with the minimum and maximum y (in their original order), so spikes
/// survive.
///
/// Points with a non-finite x or y are dropped. When at most `2 * buckets`
/// finite points remain they are all returned; otherwise at most
/// `2 * buckets + 2` points come back. Unsorted input does not panic, but its
/// buckets are then only approximate.
#[must_use]
pub fn downsample(points: &[(f64, f64)], buckets: usize) -> Vec<(f64, f64)> {
    let value = |&(x, y): &(f64, f64)| plot_value(Scale::Linear, x, y);
    let buckets = buckets.max(1);
    if points.iter().filter(|p| !value(p).is_nan()).count() <= 2 * buckets {
        return points
            .iter()
            .filter(|p| !value(p).is_nan())
            .copied()
            .collect();
    }
    let first = points.iter().find(|p| !value(p).is_nan());
    let last = points.iter().rev().find(|p| !value(p).is_nan());
    let (Some(&(x0, _)), Some(&(x1, _))) = (first, last) else {
        return Vec::new();
    };
    let starts = bucket_starts(points, x0, x1, buckets);
    let mut picker = Picker::new(Scale::Linear);
    for w in starts.windows(2) {
        let slice = &points[w[0]..w[1]];
        if let Some(e) = extremes(slice, value) {
            picker.add(w[0], slice, e);
        }
    }
    picker.finish()
}

/// Start index of each of `buckets` equal-width x buckets over `[x0, x1]`
/// for ascending x, plus `points.len()` at the end.
fn bucket_starts(points: &[(f64, f64)], x0: f64, x1: f64, buckets: usize) -> Vec<usize> {
    let mut starts = Vec::with_capacity(buckets + 1);
    starts.push(0);
    let (mut start, mut guess) = (0, 1);
    for b in 1..buckets {
        let edge = x0 + (x1 - x0) * (b as f64 / buckets as f64);
        let end = first_at_or_after(points, start, guess, edge);
        // Evenly spaced x: the next bucket is about as long as this one.
        guess = (end - start).max(1);
        start = end;
        starts.push(start);
    }
    starts.push(points.len());
    starts
}

/// First index `>= from` whose x is not below `edge` (x ascending), searched
/// by galloping from `from + guess` so a good guess costs a few probes.
fn first_at_or_after(points: &[(f64, f64)], from: usize, guess: usize, edge: f64) -> usize {
    let below = |i: usize| points[i].0 < edge;
    let n = points.len();
    let mut hi = (from + guess).min(n);
    let mut lo = from;
    if hi < n && below(hi) {
        // Gallop right until an index at or past the edge.
        let mut step = guess.max(1);
        lo = hi;
        while hi < n && below(hi) {
            lo = hi;
            hi = (hi + step).min(n);
            step *= 2;
        }
    } else {
        // Gallop left while the guess is still at or past the edge.
        let mut step = 1;
        while hi > from && !below(hi - 1) {
            let next = hi.saturating_sub(step).max(from);
            if below(next) {
                lo = next;
                break;
            }
            hi = next;
            step *= 2;
        }
    }
    lo + points[lo..hi].partition_point(|p| p.0 < edge)
}

/// Positions and values of the notable points of one bucket.
#[derive(Debug, Clone, Copy)]
struct Extremes {
    first: (usize, f64),
    min: (usize, f64),
    max: (usize, f64),
    last: (usize, f64),
}

/// First, last, minimum and maximum of the non-NaN `value`s of `items`
/// (`None` when all are NaN); ties go to the earliest point.
fn extremes<T>(items: &[T], value: impl Fn(&T) -> f64) -> Option<Extremes> {
    let first = items.iter().position(|t| !value(t).is_nan())?;
    let last = items.iter().rposition(|t| !value(t).is_nan())?;
    let v0 = value(&items[first]);
    let (mut min, mut max) = ((first, v0), (first, v0));
    // NaN compares false, so undrawable points never win.
    for (i, t) in (first + 1..).zip(&items[first + 1..=last]) {
        let v = value(t);
        if v < min.1 {
            min = (i, v);
        }
        if v > max.1 {
            max = (i, v);
        }
    }
    Some(Extremes {
        first: (first, v0),
        min,
        max,
        last: (last, value(&items[last])),
    })
}

/// Streaming form of [`extremes`], for values computed on the fly.
#[derive(Debug, Clone, Copy)]
struct Tracker {
    first: Option<(usize, f64)>,
    min: (usize, f64),
    max: (usize, f64),
    last: (usize, f64),
}

impl Tracker {
    fn new() -> Self {
        Self {
            first: None,
            min: (0, f64::INFINITY),
            max: (0, f64::NEG_INFINITY),
            last: (0, f64::NAN),
        }
    }

    /// Sees value `v` (NaN = not drawable) at index `i`.
    #[inline]
    fn see(&mut self, i: usize, v: f64) {
        if v.is_nan() {
            return;
        }
        if self.first.is_none() {
            self.first = Some((i, v));
        }
        if v < self.min.1 {
            self.min = (i, v);
        }
        if v > self.max.1 {
            self.max = (i, v);
        }
        self.last = (i, v);
    }

    fn finish(self) -> Option<Extremes> {
        Some(Extremes {
            first: self.first?,
            min: self.min,
            max: self.max,
            last: self.last,
        })
    }
}

/// Collects the points a downsampled track keeps, in order, without repeats.
struct Picker {
    scale: Scale,
    out: Vec<(f64, f64)>,
    /// Global index of the newest emitted point.
    emitted: Option<usize>,
    /// Newest valid point seen: global index, x, real value.
    last: Option<(usize, f64, f64)>,
}

impl Picker {
    fn new(scale: Scale) -> Self {
        Self {
            scale,
            out: Vec::new(),
            emitted: None,
            last: None,
        }
    }

    /// Adds one bucket: `slice` starts at global index `offset`.
    fn add(&mut self, offset: usize, slice: &[(f64, f64)], e: Extremes) {
        if self.emitted.is_none() {
            self.emit(offset, slice, e.first);
        }
        let (a, b) = if e.min.0 <= e.max.0 {
            (e.min, e.max)
        } else {
            (e.max, e.min)
        };
        self.emit(offset, slice, a);
        self.emit(offset, slice, b);
        self.last = Some((offset + e.last.0, slice[e.last.0].0, e.last.1));
    }

    fn emit(&mut self, offset: usize, slice: &[(f64, f64)], (i, v): (usize, f64)) {
        self.push(offset + i, slice[i].0, v);
    }

    fn push(&mut self, index: usize, x: f64, v: f64) {
        if self.emitted.is_none_or(|e| index > e) {
            let y = match self.scale {
                Scale::Linear => v,
                Scale::Log10 => v.log10(),
            };
            self.out.push((x, y));
            self.emitted = Some(index);
        }
    }

    /// The kept points in plot coordinates (y is log10 on a log axis).
    fn finish(mut self) -> Vec<(f64, f64)> {
        if let Some((index, x, v)) = self.last {
            self.push(index, x, v);
        }
        self.out
    }
}

// ---------------------------------------------------------------------------
// Ticks
// ---------------------------------------------------------------------------

/// "Nice" tick values (1, 2, 2.5 or 5 times a power of ten apart) lying inside
/// `[min, max]`: as many as possible without exceeding `n` (the finest such
/// step), so `n` is a label budget.
///
/// Returns `[min]` for an empty range, `[min, max]` for a range too wide for
/// f64 steps, and nothing for non-finite bounds or `n == 0`.
#[must_use]
pub fn nice_ticks(min: f64, max: f64, n: usize) -> Vec<f64> {
    let (lo, hi) = if min <= max { (min, max) } else { (max, min) };
    if n == 0 || !lo.is_finite() || !hi.is_finite() {
        return Vec::new();
    }
    let span = hi - lo;
    if span <= 0.0 {
        return vec![lo];
    }
    if !span.is_finite() {
        return vec![lo, hi];
    }
    let base = 10f64.powf((span / n as f64).log10().floor());
    // Candidate steps from coarse to fine: the last one within budget wins.
    let mut best: Option<f64> = None;
    for scale in [100.0, 10.0, 1.0, 0.1] {
        for mantissa in [5.0, 2.5, 2.0, 1.0] {
            let step = base * scale * mantissa;
            if tick_range(lo, hi, step).is_some_and(|(k0, k1)| k1 - k0 < n as f64) {
                best = Some(step);
            }
        }
    }
    let Some(step) = best else {
        return if n == 1 { vec![lo] } else { vec![lo, hi] };
    };
    let Some((k0, k1)) = tick_range(lo, hi, step) else {
        return vec![lo, hi];
    };
    let mut ticks: Vec<f64> = (0..=(k1 - k0) as usize)
        .map(|i| clean_tick((k0 + i as f64) * step, step))
        .collect();
    ticks.dedup();
    ticks
}

/// `t` without the float noise of `k * step` (0.30000000000000004 → 0.3).
fn clean_tick(t: f64, step: f64) -> f64 {
    if t.abs() < step * 1e-9 {
        return 0.0;
    }
    // Two digits below the step's leading digit cover steps like 0.25.
    let digits = (t.abs().log10().floor() - step.log10().floor()) as usize + 2;
    round_sig(t, digits.min(17))
}

/// Integer multiples `k0..=k1` of `step` inside `[lo, hi]` (with a hair of
/// tolerance), or `None` when there are none or absurdly many.
fn tick_range(lo: f64, hi: f64, step: f64) -> Option<(f64, f64)> {
    if !(step > 0.0 && step.is_finite()) {
        return None;
    }
    let k0 = (lo / step - 1e-9).ceil();
    let k1 = (hi / step + 1e-9).floor();
    let ok = k0.is_finite() && k1.is_finite() && k1 >= k0 && k1 - k0 <= 1000.0;
    ok.then_some((k0, k1))
}

/// Compact tick/value label: `0`, `0.035`, `2.5`, `123.4`, `1.2k`, `45M`,
/// `3e-4`, `1.5e20`. Up to 4 significant digits below 1000, 3 with a k/M/G/T
/// suffix, scientific notation below 0.001 and from 1e15 up.
#[must_use]
pub fn format_tick(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if !(1e-3..1e15).contains(&a) {
        return format_sci(v);
    }
    let plain = round_sig(v, 4);
    if plain.abs() < 1000.0 {
        return format!("{plain}");
    }
    let r = round_sig(v, 3);
    for (div, suffix) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if r.abs() >= div {
            return format!("{}{suffix}", round_sig(r / div, 3));
        }
    }
    format!("{plain}")
}

/// `v` rounded to `digits` significant digits.
fn round_sig(v: f64, digits: usize) -> f64 {
    format!("{:.*e}", digits.saturating_sub(1), v)
        .parse()
        .unwrap_or(v)
}

/// Scientific notation with up to 3 significant digits and no trailing zeros.
fn format_sci(v: f64) -> String {
    let s = format!("{v:.2e}");
    match s.split_once('e') {
        Some((mantissa, exp)) if mantissa.contains('.') => {
            let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
            format!("{mantissa}e{exp}")
        }
        _ => s,
    }
}

/// A tick: its position in plot coordinates and its label.
#[derive(Debug, Clone, PartialEq)]
struct Tick {
    pos: f64,
    label: String,
}

/// Ticks for linear values, with labels made distinct when [`format_tick`]
/// rounds neighbours to the same text.
fn linear_ticks(values: &[f64]) -> Vec<Tick> {
    let distinct = |labels: &[String]| labels.windows(2).all(|w| w[0] != w[1]);
    let mut labels: Vec<String> = values.iter().map(|&v| format_tick(v)).collect();
    for decimals in 0..=20 {
        if distinct(&labels) {
            break;
        }
        labels = values.iter().map(|v| format!("{v:.decimals$}")).collect();
    }
    values
        .iter()
        .zip(labels)
        .map(|(&pos, label)| Tick { pos, label })
        .collect()
}

/// Ticks for a log10 axis spanning `[l0, l1]` in log space, labelled with real
/// values: whole decades when two or more are visible, else 1-2-5 values, else
/// linear nice values.
fn log_ticks(l0: f64, l1: f64, n: usize) -> Vec<Tick> {
    let log_tick = |v: f64| Tick {
        pos: v.log10(),
        label: format_tick(v),
    };
    let (e0, e1) = (l0.ceil(), l1.floor());
    if e0.is_finite() && e1.is_finite() && e1 - e0 >= 1.0 {
        let count = (e1 - e0) as usize + 1;
        let stride = [1, 2, 3, 5, 10, 20, 50, 100, 200, 500]
            .into_iter()
            .find(|&k| count.div_ceil(k) <= n.max(2))
            .unwrap_or(count);
        return (0..count)
            .map(|i| e0 + i as f64)
            .filter(|e| (*e as i64).rem_euclid(stride as i64) == 0)
            .map(|e| Tick {
                pos: e,
                label: format_tick(10f64.powi(e as i32)),
            })
            .collect();
    }
    let one_two_five: Vec<Tick> = (e0 as i32 - 1..=e1 as i32)
        .flat_map(|e| [1.0, 2.0, 5.0].map(|m| round_sig(m * 10f64.powi(e), 3)))
        .filter(|v| (l0..=l1).contains(&v.log10()))
        .map(log_tick)
        .collect();
    if (2..=n.max(2) + 1).contains(&one_two_five.len()) {
        return one_two_five;
    }
    let (r0, r1) = (10f64.powf(l0), 10f64.powf(l1));
    let values: Vec<f64> = nice_ticks(r0, r1, n)
        .into_iter()
        .filter(|&v| v > 0.0)
        .collect();
    linear_ticks(&values)
        .into_iter()
        .map(|t| Tick {
            pos: t.pos.log10(),
            label: t.label,
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Data preparation
// ---------------------------------------------------------------------------

/// One drawable curve after smoothing, scale transform and downsampling.
struct Track {
    /// Points in plot coordinates (y is log10 for a log axis).
    points: Vec<(f64, f64)>,
    series: usize,
    style: SeriesStyle,
    /// False for the dim raw curve behind a smoothed one.
    strong: bool,
}

/// Everything the renderer needs from the data.
struct Prepared {
    tracks: Vec<Track>,
    x: (f64, f64),
    y: (f64, f64),
    /// Per series: the latest drawn value (smoothed when smoothed), real units.
    latest: Vec<Option<f64>>,
}

/// `y` when `(x, y)` can be drawn on `scale` (finite, and positive on a log
/// axis), else NaN.
fn plot_value(scale: Scale, x: f64, y: f64) -> f64 {
    above(floor(scale), x, y)
}

/// Values a scale can show must be above this.
fn floor(scale: Scale) -> f64 {
    match scale {
        Scale::Linear => f64::NEG_INFINITY,
        Scale::Log10 => 0.0,
    }
}

/// `y` when x is finite and `floor < y < inf`, else NaN: [`plot_value`] with
/// the scale resolved outside the hot loops.
#[inline]
fn above(floor: f64, x: f64, y: f64) -> f64 {
    // Non-short-circuit `&` keeps this branch-free.
    let ok = x.is_finite() & (y > floor) & (y < f64::INFINITY);
    if ok { y } else { f64::NAN }
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
fn prepare(series: &[Series], scale: Scale, smoothing: f64, buckets: usize) -> Option<Prepared> {
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
fn widen(lo: f64, hi: f64, pad: f64) -> (f64, f64) {
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
// Braille raster
// ---------------------------------------------------------------------------

/// Braille dot bits by `[row][column]` inside a 2×4 cell.
const BRAILLE_BITS: [[u8; 2]; 4] = [[0x01, 0x08], [0x02, 0x10], [0x04, 0x20], [0x40, 0x80]];

/// Per-series markers used in monochrome mode (legend, dots, line ends).
const MONO_MARKERS: [char; 8] = ['•', '+', 'x', 'o', '*', '#', '%', '@'];

/// Which series coloured a cell, and whether by a strong (non-dim) curve.
#[derive(Debug, Clone, Copy, Default)]
struct Ink {
    series: usize,
    strong: bool,
}

/// Maps a value range onto `0..pixels`.
#[derive(Debug, Clone, Copy)]
struct PixelAxis {
    lo: f64,
    hi: f64,
    pixels: usize,
}

impl PixelAxis {
    /// Pixel index of `v`, clamped to the axis (0 = `lo`).
    fn pixel(self, v: f64) -> usize {
        let frac = (v / 2.0 - self.lo / 2.0) / (self.hi / 2.0 - self.lo / 2.0);
        let last = self.pixels.saturating_sub(1) as f64;
        // NaN and negatives saturate to 0 in the cast.
        (frac * last).round().min(last) as usize
    }
}

/// A grid of braille cells plus glyph overlays (dots, line-end markers).
struct Raster {
    width: usize,
    height: usize,
    x: PixelAxis,
    y: PixelAxis,
    bits: Vec<u8>,
    ink: Vec<Option<Ink>>,
    glyphs: Vec<Option<(char, usize)>>,
}

impl Raster {
    fn new(width: u16, height: u16, x: (f64, f64), y: (f64, f64)) -> Self {
        let (width, height) = (usize::from(width), usize::from(height));
        let cells = width * height;
        Self {
            width,
            height,
            x: PixelAxis {
                lo: x.0,
                hi: x.1,
                pixels: width * 2,
            },
            y: PixelAxis {
                lo: y.0,
                hi: y.1,
                pixels: height * 4,
            },
            bits: vec![0; cells],
            ink: vec![None; cells],
            glyphs: vec![None; cells],
        }
    }

    /// Pixel position of a plot-space point (row 0 at the top).
    fn pixel(&self, (x, y): (f64, f64)) -> (usize, usize) {
        let row = self.y.pixels.saturating_sub(1) - self.y.pixel(y);
        (self.x.pixel(x), row)
    }

    fn cell_index(&self, (px, py): (usize, usize)) -> usize {
        (py / 4) * self.width + px / 2
    }

    fn dot(&mut self, (px, py): (usize, usize), ink: Ink) {
        let i = self.cell_index((px, py));
        self.bits[i] |= BRAILLE_BITS[py % 4][px % 2];
        if ink.strong || !self.ink[i].is_some_and(|old| old.strong) {
            self.ink[i] = Some(ink);
        }
    }

    /// Bresenham line between two pixels (both inside the grid).
    fn segment(&mut self, a: (usize, usize), b: (usize, usize), ink: Ink) {
        let (mut x, mut y) = (a.0 as i64, a.1 as i64);
        let (x1, y1) = (b.0 as i64, b.1 as i64);
        let (dx, dy) = ((x1 - x).abs(), -(y1 - y).abs());
        let (sx, sy) = ((x1 - x).signum(), (y1 - y).signum());
        let mut err = dx + dy;
        loop {
            self.dot((x as usize, y as usize), ink);
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    fn polyline(&mut self, points: &[(f64, f64)], ink: Ink) {
        let mut prev: Option<(usize, usize)> = None;
        for &p in points {
            let px = self.pixel(p);
            match prev {
                Some(q) if q == px => {}
                Some(q) => self.segment(q, px, ink),
                None => self.dot(px, ink),
            }
            prev = Some(px);
        }
    }

    fn glyph(&mut self, p: (f64, f64), glyph: char, series: usize) {
        let i = self.cell_index(self.pixel(p));
        self.glyphs[i] = Some((glyph, series));
    }

    /// Number of non-empty cells within a cell rectangle (relative coordinates).
    fn filled(&self, col: usize, row: usize, width: usize, height: usize) -> usize {
        (row..(row + height).min(self.height))
            .flat_map(|r| (col..(col + width).min(self.width)).map(move |c| r * self.width + c))
            .filter(|&i| self.bits[i] != 0 || self.glyphs[i].is_some())
            .count()
    }
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
fn truncate(s: &str, max: usize) -> String {
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

#[cfg(test)]
mod tests {
    use ratatui::buffer::Cell;

    use super::*;

    // -- helpers ------------------------------------------------------------

    fn pts(ys: &[f64]) -> Vec<(f64, f64)> {
        ys.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect()
    }

    /// Deterministic pseudo-random numbers in [0, 1).
    fn noise(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (s >> 11) as f64 / (1u64 << 53) as f64
            })
            .collect()
    }

    fn chart<'a>(series: &'a [Series]) -> LineChart<'a> {
        LineChart {
            title: "loss",
            x_title: "step",
            series,
            scale: Scale::Linear,
            smoothing: 0.0,
            color: true,
        }
    }

    fn render(chart: LineChart<'_>, width: u16, height: u16) -> Buffer {
        let mut buf = Buffer::empty(Rect::new(0, 0, width, height));
        chart.render(buf.area, &mut buf);
        buf
    }

    fn rows(buf: &Buffer) -> Vec<String> {
        let a = buf.area;
        (a.top()..a.bottom())
            .map(|y| {
                (a.left()..a.right())
                    .map(|x| buf[(x, y)].symbol())
                    .collect()
            })
            .collect()
    }

    fn has_text(buf: &Buffer, text: &str) -> bool {
        rows(buf).iter().any(|r| r.contains(text))
    }

    fn is_braille(symbol: &str) -> bool {
        symbol
            .chars()
            .any(|c| ('\u{2801}'..='\u{28FF}').contains(&c))
    }

    fn braille_cells(buf: &Buffer) -> Vec<(u16, u16)> {
        let a = buf.area;
        (a.top()..a.bottom())
            .flat_map(|y| (a.left()..a.right()).map(move |x| (x, y)))
            .filter(|&p| is_braille(buf[p].symbol()))
            .collect()
    }

    /// Position of the axis corner `└`.
    fn corner(buf: &Buffer) -> (u16, u16) {
        let a = buf.area;
        (a.top()..a.bottom())
            .flat_map(|y| (a.left()..a.right()).map(move |x| (x, y)))
            .find(|&p| buf[p].symbol() == "└")
            .expect("axes drawn")
    }

    fn train_and_val() -> Vec<Series> {
        let train = (0..=100).map(|i| (f64::from(i), f64::from(i))).collect();
        let val = (1..=4)
            .map(|e| (f64::from(e) * 25.0, f64::from(e) * 20.0))
            .collect();
        vec![
            Series::line("train loss", Color::Cyan, train),
            Series::dots("val loss", Color::Yellow, val),
        ]
    }

    // -- smoothing ----------------------------------------------------------

    #[test]
    fn smooth_matches_tensorboard_with_debias() {
        // Hand-computed with w = 0.6: last = 0.4, 1.04, 1.824, 2.6944 and
        // debias 1 - 0.6^n = 0.4, 0.64, 0.784, 0.8704.
        let got = smooth(&pts(&[1.0, 2.0, 3.0, 4.0]), 0.6);
        let want = [1.0, 1.625, 1.824 / 0.784, 2.6944 / 0.8704];
        for ((x, y), (i, w)) in got.iter().zip(want.iter().enumerate()) {
            assert_eq!(*x, i as f64);
            assert!((y - w).abs() < 1e-12, "point {i}: {y} vs {w}");
        }
        assert!((got[2].1 - 2.326_530_612_244_898).abs() < 1e-12);
        assert!((got[3].1 - 3.095_588_235_294_117_6).abs() < 1e-12);
    }

    #[test]
    fn smooth_passes_non_finite_through_without_poisoning() {
        let got = smooth(&pts(&[1.0, f64::NAN, 2.0, f64::INFINITY, 3.0]), 0.6);
        assert_eq!(got[0].1, 1.0);
        assert!(got[1].1.is_nan());
        assert!((got[2].1 - 1.625).abs() < 1e-12, "NaN must not count");
        assert_eq!(got[3].1, f64::INFINITY);
        assert!((got[4].1 - 1.824 / 0.784).abs() < 1e-12);
    }

    #[test]
    fn smooth_weight_zero_constant_and_clamping() {
        let raw = pts(&[3.0, 1.0, 4.0, 1.0, 5.0]);
        assert_eq!(smooth(&raw, 0.0), raw);
        assert_eq!(smooth(&raw, f64::NAN), raw);
        assert_eq!(smooth(&raw, -1.0), raw);
        let flat = pts(&[0.7; 50]);
        assert_eq!(smooth(&flat, 0.9), flat);
        assert!(smooth(&raw, 5.0).iter().all(|p| p.1.is_finite()));
        assert!(smooth(&[], 0.5).is_empty());
    }

    #[test]
    fn fast_ema_matches_smooth() {
        let mut ys: Vec<f64> = noise(20_000, 7).iter().map(|v| v * 10.0 - 3.0).collect();
        ys[5] = f64::NAN;
        ys[9_001] = f64::INFINITY;
        let raw = pts(&ys);
        for weight in [0.3, 0.6, 0.95, 0.999] {
            let want = smooth(&raw, weight);
            let mut ema = Ema::new(weight);
            let mut got = Vec::new();
            // Feed in uneven buckets, as the renderer does.
            let mut start = 0;
            for len in [3, 1, 997, 4, 5_000, 13_995] {
                let mut next_index = 0;
                ema.scan(&raw[start..start + len], |i, _, v| {
                    assert_eq!(i, next_index);
                    next_index += 1;
                    got.push(v);
                });
                start += len;
            }
            assert_eq!(got.len(), want.len());
            for (g, (_, w)) in got.iter().zip(&want) {
                if w.is_finite() {
                    assert!(
                        (g - w).abs() <= 1e-9 * w.abs().max(1.0),
                        "{g} vs {w} (w={weight})"
                    );
                } else {
                    assert_eq!(g.to_bits(), w.to_bits(), "non-finite passes through");
                }
            }
        }
    }

    // -- scale & preparation --------------------------------------------------

    #[test]
    fn log_scale_drops_non_positive() {
        let series = [Series::line(
            "lr",
            Color::Green,
            pts(&[1.0, 0.0, -2.0, 0.1, f64::NAN, 0.01]),
        )];
        let data = prepare(&series, Scale::Log10, 0.0, 100).expect("drawable");
        let ys: Vec<f64> = data.tracks[0].points.iter().map(|p| p.1).collect();
        assert_eq!(ys.len(), 3);
        for (got, want) in ys.iter().zip([0.0, -1.0, -2.0]) {
            assert!((got - want).abs() < 1e-12, "log10 values: {ys:?}");
        }
        assert_eq!(data.latest[0], Some(0.01));

        let non_positive = [Series::line("x", Color::Red, pts(&[0.0, -1.0, -5.0]))];
        assert!(prepare(&non_positive, Scale::Log10, 0.0, 100).is_none());
        let buf = render(
            LineChart {
                scale: Scale::Log10,
                ..chart(&non_positive)
            },
            40,
            10,
        );
        assert!(has_text(&buf, NO_DATA));
    }

    #[test]
    fn log_axis_labels_show_real_values() {
        let ys: Vec<f64> = (0..=40)
            .map(|i| 10f64.powf(-3.0 + f64::from(i) / 10.0))
            .collect();
        let series = [Series::line("grad norm", Color::Magenta, pts(&ys))];
        let buf = render(
            LineChart {
                scale: Scale::Log10,
                ..chart(&series)
            },
            60,
            20,
        );
        let text = rows(&buf).join("\n");
        for label in ["0.001┤", "0.01┤", "0.1┤", "1┤", "10┤"] {
            assert!(text.contains(label), "missing {label}:\n{text}");
        }
        assert!(rows(&buf)[0].contains("log"));
    }

    #[test]
    fn flat_and_degenerate_ranges_are_widened() {
        assert_eq!(widen(2.0, 2.0, 0.05), (1.9, 2.1));
        assert_eq!(widen(0.0, 0.0, 0.05), (-1.0, 1.0));
        let (lo, hi) = widen(0.0, 10.0, 0.05);
        assert!((lo + 0.5).abs() < 1e-12 && (hi - 10.5).abs() < 1e-12);
        let (lo, hi) = widen(-f64::MAX, f64::MAX, 0.05);
        assert!(lo.is_finite() && hi.is_finite() && lo < hi);
        // Float noise on a constant is treated as flat, not zoomed into.
        let (lo, hi) = widen(1.0, 1.0 + 1e-15, 0.05);
        assert!(hi - lo > 0.09);
    }

    // -- downsampling ---------------------------------------------------------

    #[test]
    fn downsample_keeps_bucket_extremes_and_ends() {
        let n = 10_000;
        let mut points: Vec<(f64, f64)> = noise(n, 3)
            .into_iter()
            .enumerate()
            .map(|(i, r)| (i as f64 + 0.5, (i as f64 / 900.0).sin() + r))
            .collect();
        points[4_321].1 = 50.0;
        points[7_777].1 = -50.0;
        points[100].1 = f64::NAN;
        let buckets = 50;
        let out = downsample(&points, buckets);
        assert!(out.len() <= 2 * buckets + 2, "{} points", out.len());
        assert_eq!(out.first(), points.first());
        assert_eq!(out.last(), points.last());
        assert!(out.contains(&points[4_321]) && out.contains(&points[7_777]));

        // Every bucket's min and max survive (bucket edges avoid the x values).
        let (x0, x1) = (points[0].0, points[n - 1].0);
        let bucket = |x: f64| (((x - x0) / (x1 - x0) * buckets as f64) as usize).min(buckets - 1);
        for b in 0..buckets {
            let inside = points
                .iter()
                .filter(|p| p.1.is_finite() && bucket(p.0) == b);
            let min = inside.clone().min_by(|a, c| a.1.total_cmp(&c.1)).unwrap();
            let max = inside.max_by(|a, c| a.1.total_cmp(&c.1)).unwrap();
            assert!(out.contains(min) && out.contains(max), "bucket {b}");
        }
        // Output keeps the input order.
        assert!(out.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn downsample_small_empty_and_degenerate_input() {
        assert!(downsample(&[], 10).is_empty());
        let small = pts(&[1.0, f64::NAN, 3.0, f64::NEG_INFINITY]);
        assert_eq!(downsample(&small, 10), vec![(0.0, 1.0), (2.0, 3.0)]);
        assert_eq!(downsample(&small, 0), vec![(0.0, 1.0), (2.0, 3.0)]);
        // All x equal: one bucket, still first/min/max/last.
        let same_x: Vec<(f64, f64)> = noise(1_000, 5).into_iter().map(|y| (7.0, y)).collect();
        let out = downsample(&same_x, 4);
        assert!(out.len() <= 4);
        let min = same_x.iter().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
        let max = same_x.iter().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
        assert!(out.contains(min) && out.contains(max));
        assert_eq!(out.first(), same_x.first());
        assert_eq!(out.last(), same_x.last());
        // Unsorted input must not panic.
        let unsorted: Vec<(f64, f64)> = noise(500, 9).into_iter().map(|r| (r * 100.0, r)).collect();
        assert!(!downsample(&unsorted, 8).is_empty());
    }

    #[test]
    fn bucket_starts_match_a_plain_binary_search() {
        // Uneven spacing (quadratic, then a gap) exercises both gallop directions.
        let mut points: Vec<(f64, f64)> = (0..3_000).map(|i| ((i * i) as f64, 0.0)).collect();
        points.extend((0..500).map(|i| (2e7 + f64::from(i), 0.0)));
        points.insert(10, points[10]); // duplicate x
        let (x0, x1) = (points[0].0, points[points.len() - 1].0);
        for buckets in [1, 2, 7, 64, 400] {
            let got = bucket_starts(&points, x0, x1, buckets);
            let want: Vec<usize> = (0..=buckets)
                .map(|b| match b {
                    0 => 0,
                    b if b == buckets => points.len(),
                    b => {
                        let edge = x0 + (x1 - x0) * (b as f64 / buckets as f64);
                        points.partition_point(|p| p.0 < edge)
                    }
                })
                .collect();
            assert_eq!(got, want, "{buckets} buckets");
        }
    }

    // -- ticks ----------------------------------------------------------------

    #[test]
    fn nice_ticks_cases() {
        assert_eq!(nice_ticks(0.0, 1.0, 5), vec![0.0, 0.25, 0.5, 0.75, 1.0]);
        assert_eq!(
            nice_ticks(0.0, 100.0, 5),
            vec![0.0, 25.0, 50.0, 75.0, 100.0]
        );
        assert_eq!(nice_ticks(0.03, 2.77, 5), vec![0.5, 1.0, 1.5, 2.0, 2.5]);
        assert_eq!(nice_ticks(-1.0, 1.0, 3), vec![-1.0, 0.0, 1.0]);
        assert_eq!(nice_ticks(0.0, 1234.0, 4), vec![0.0, 500.0, 1000.0]);
        assert_eq!(
            nice_ticks(1.0, 0.0, 3),
            vec![0.0, 0.5, 1.0],
            "reversed bounds"
        );
        let ticks = nice_ticks(0.1, 0.3, 5);
        assert_eq!(ticks, vec![0.1, 0.15, 0.2, 0.25, 0.3]);
        // Degenerate input.
        assert_eq!(nice_ticks(5.0, 5.0, 4), vec![5.0]);
        assert!(nice_ticks(f64::NAN, 1.0, 4).is_empty());
        assert!(nice_ticks(0.0, 1.0, 0).is_empty());
        let wide = nice_ticks(-f64::MAX, f64::MAX, 5);
        assert!(wide.len() >= 2 && wide.iter().all(|t| t.is_finite()));
        // Any range: ascending, inside the range, within budget.
        for (lo, hi) in [
            (1e-300, 3e-300),
            (1.0, 1.0 + 1e-12),
            (-7.3, 1e6),
            (3e15, 3.5e15),
        ] {
            let t = nice_ticks(lo, hi, 5);
            assert!(!t.is_empty() && t.len() <= 5, "{lo}..{hi}: {t:?}");
            assert!(t.windows(2).all(|w| w[0] < w[1]));
            assert!(
                t.iter()
                    .all(|&v| v >= lo - (hi - lo) * 1e-6 && v <= hi + (hi - lo) * 1e-6)
            );
        }
    }

    #[test]
    fn format_tick_cases() {
        let cases = [
            (0.0, "0"),
            (2.5, "2.5"),
            (100.0, "100"),
            (123.4, "123.4"),
            (0.035, "0.035"),
            (0.001, "0.001"),
            (0.1 + 0.2, "0.3"),
            (-0.5, "-0.5"),
            (1200.0, "1.2k"),
            (1234.0, "1.23k"),
            (12_345.0, "12.3k"),
            (999.96, "1k"),
            (999_999.0, "1M"),
            (1e6, "1M"),
            (2.5e9, "2.5G"),
            (1.5e12, "1.5T"),
            (3e-4, "3e-4"),
            (2.5e-5, "2.5e-5"),
            (1e20, "1e20"),
            (-1e300, "-1e300"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for (v, want) in cases {
            assert_eq!(format_tick(v), want, "format_tick({v})");
        }
    }

    #[test]
    fn truncate_keeps_both_ends() {
        assert_eq!(truncate("val loss (rank 0)", 11), "val l…nk 0)");
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("abcdefgh", 5), "ab…gh");
        assert_eq!(truncate("abcdef", 1), "…");
        assert_eq!(truncate("abcdef", 0), "");
    }

    #[test]
    fn tick_labels_stay_distinct_on_narrow_ranges() {
        let ticks = linear_ticks(&[1000.01, 1000.02, 1000.03]);
        let labels: Vec<&str> = ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(labels, ["1000.01", "1000.02", "1000.03"]);
    }

    // -- rendering ------------------------------------------------------------

    #[test]
    fn renders_title_legend_axes_and_x_title() {
        let series = train_and_val();
        let buf = render(chart(&series), 80, 24);
        let r = rows(&buf);
        let text = r.join("\n");
        assert!(r[0].contains(" loss "), "{text}");
        assert!(
            r[23].contains(" step "),
            "x title in the bottom border:\n{text}"
        );
        assert!(
            has_text(&buf, "─ train loss 100"),
            "legend with latest value:\n{text}"
        );
        assert!(has_text(&buf, "• val loss 80"), "{text}");
        for y_label in ["100┤", "50┤", "0┤"] {
            assert!(text.contains(y_label), "missing y label {y_label}:\n{text}");
        }
        let label_row = &r[22];
        for x_label in ["0", "25", "50", "75", "100"] {
            assert!(
                label_row.contains(x_label),
                "missing x label {x_label}: {label_row}"
            );
        }
        assert!(!r[0].contains("smoothing") && !r[0].contains("log"));
    }

    #[test]
    fn braille_lies_inside_the_plot_area() {
        let series = train_and_val();
        let buf = render(chart(&series), 80, 24);
        let (cx, cy) = corner(&buf);
        let cells = braille_cells(&buf);
        assert!(cells.len() > 20, "line drawn");
        assert!(
            cells
                .iter()
                .all(|&(x, y)| x > cx && y < cy && y > 0 && x < 79)
        );
        assert!(has_text(&buf, "•"), "dots drawn");
    }

    #[test]
    fn no_data_message() {
        let nan = [Series::line("loss", Color::Red, pts(&[f64::NAN; 5]))];
        for series in [&[][..], &nan[..]] {
            let buf = render(chart(series), 40, 10);
            assert!(has_text(&buf, NO_DATA));
            assert!(rows(&buf)[0].contains("loss"));
            assert!(braille_cells(&buf).is_empty());
        }
    }

    #[test]
    fn title_notes_smoothing_and_log() {
        let series = train_and_val();
        let c = LineChart {
            smoothing: 0.6,
            scale: Scale::Log10,
            ..chart(&series)
        };
        let top = rows(&render(c, 80, 24))[0].clone();
        assert!(
            top.contains(" smoothing 0.60") && top.contains(" log"),
            "{top}"
        );
    }

    #[test]
    fn smoothing_draws_raw_dim_behind_and_never_smooths_dots() {
        let ys: Vec<f64> = noise(2_000, 11)
            .iter()
            .enumerate()
            .map(|(i, r)| 1.0 / (1.0 + i as f64 / 200.0) + r)
            .collect();
        let series = [Series::line("train", Color::Cyan, pts(&ys))];
        let dim = |buf: &Buffer| {
            braille_cells(buf)
                .iter()
                .filter(|&&p| buf[p].modifier.contains(Modifier::DIM))
                .count()
        };
        let smoothed = render(
            LineChart {
                smoothing: 0.9,
                ..chart(&series)
            },
            80,
            24,
        );
        let strong = braille_cells(&smoothed).len() - dim(&smoothed);
        assert!(
            dim(&smoothed) > 0 && strong > 0,
            "raw dim + smoothed bright"
        );
        assert_eq!(
            dim(&render(chart(&series), 80, 24)),
            0,
            "no smoothing, no dim"
        );

        let dots = [Series::dots("val", Color::Yellow, pts(&[3.0, 1.0, 2.0]))];
        let buf = render(
            LineChart {
                smoothing: 0.9,
                ..chart(&dots)
            },
            40,
            12,
        );
        assert_eq!(dim(&buf), 0);
        let dot_cells = rows(&buf)
            .iter()
            .map(|r| r.matches('•').count())
            .sum::<usize>();
        assert_eq!(dot_cells, 4, "3 dots + legend marker");
    }

    #[test]
    fn monochrome_has_no_colours_and_distinct_markers() {
        let series = train_and_val();
        let c = LineChart {
            color: false,
            smoothing: 0.6,
            ..chart(&series)
        };
        let buf = render(c, 80, 24);
        for cell in buf.content() {
            assert_eq!((cell.fg, cell.bg), (Color::Reset, Color::Reset), "{cell:?}");
        }
        assert!(has_text(&buf, "• train loss") && has_text(&buf, "+ val loss"));
        assert!(!braille_cells(&buf).is_empty());

        let coloured = render(chart(&series), 80, 24);
        assert!(coloured.content().iter().any(|c| c.fg == Color::Cyan));
    }

    #[test]
    fn legend_hidden_when_too_small_and_summarised_when_crowded() {
        let series = train_and_val();
        let buf = render(chart(&series), 16, 8);
        assert!(!braille_cells(&buf).is_empty(), "plot still drawn");
        assert!(!has_text(&buf, "train") && !has_text(&buf, "val"));

        let many: Vec<Series> = (0..8)
            .map(|r| {
                Series::line(
                    format!("rank {r}"),
                    Color::Indexed(r as u8 + 1),
                    pts(&[1.0, 2.0 + f64::from(r)]),
                )
            })
            .collect();
        let buf = render(chart(&many), 60, 12);
        assert!(has_text(&buf, "rank 0") && has_text(&buf, "more"));
    }

    #[test]
    fn edge_case_data_renders() {
        let cases: Vec<Vec<(f64, f64)>> = vec![
            vec![(5.0, 1.0)],
            vec![(3.0, 1.0), (3.0, 2.0), (3.0, -4.0)],
            pts(&[2.0; 10]),
            pts(&[1e300, -1e300, 1e300]),
            pts(&[f64::MAX, -f64::MAX]),
            pts(&[1e-300, 2e-300, 3e-300]),
            pts(&[1.0, f64::INFINITY, f64::NEG_INFINITY, 2.0]),
            vec![(0.0, 1.0), (0.0, 1.0), (1.0, 2.0), (1.0, 0.5)],
            vec![(f64::NAN, 1.0), (1.0, 2.0), (f64::INFINITY, 3.0)],
        ];
        for points in cases {
            let series = [Series::line("s", Color::Red, points.clone())];
            for scale in [Scale::Linear, Scale::Log10] {
                let buf = render(
                    LineChart {
                        scale,
                        ..chart(&series)
                    },
                    50,
                    15,
                );
                let any_drawable = points
                    .iter()
                    .any(|&(x, y)| !plot_value(scale, x, y).is_nan());
                assert_eq!(
                    !braille_cells(&buf).is_empty(),
                    any_drawable,
                    "{points:?} {scale:?}"
                );
            }
        }
        let huge = [Series::line("s", Color::Red, pts(&[1e300, 2e300]))];
        assert!(has_text(&render(chart(&huge), 50, 15), "e300"));
        // Wide x labels in a narrow chart are skipped, not squeezed.
        let wide_x = [Series::line(
            "s",
            Color::Red,
            vec![(-1.25e-300, 1.0), (-1.1e-300, 2.0)],
        )];
        for width in 6..24 {
            let buf = render(chart(&wide_x), width, 8);
            let r = rows(&buf);
            assert!(
                r[1..7]
                    .iter()
                    .all(|row| row.starts_with('│') && row.ends_with('│')),
                "{r:#?}"
            );
        }
    }

    #[test]
    fn tiny_and_odd_areas_never_panic() {
        let datasets: Vec<Vec<Series>> = vec![
            vec![],
            train_and_val(),
            vec![Series::line("nan", Color::Red, pts(&[f64::NAN; 3]))],
            vec![Series::line("one", Color::Red, vec![(1.0, 1.0)])],
            vec![Series::line(
                "same x",
                Color::Red,
                vec![(1.0, 1.0), (1.0, 9.0)],
            )],
            vec![Series::line(
                "huge",
                Color::Red,
                pts(&[1e308, -1e308, 1e-308]),
            )],
        ];
        for series in &datasets {
            for (scale, smoothing, color) in
                [(Scale::Linear, 0.0, true), (Scale::Log10, 0.95, false)]
            {
                let c = LineChart {
                    scale,
                    smoothing,
                    color,
                    ..chart(series)
                };
                for w in 0..28 {
                    for h in 0..12 {
                        let mut buf = Buffer::empty(Rect::new(0, 0, 30, 14));
                        let area = Rect::new(2, 1, w, h);
                        c.render(area, &mut buf);
                        // Nothing is drawn outside the area.
                        let outside = buf.area.positions().filter(|&p| !area.contains(p));
                        for p in outside {
                            assert_eq!(buf[p], Cell::EMPTY, "{p:?} in {w}x{h}");
                        }
                    }
                }
                // An area larger than the buffer is clipped, not a panic.
                let mut buf = Buffer::empty(Rect::new(0, 0, 10, 5));
                c.render(Rect::new(5, 2, 100, 100), &mut buf);
            }
        }
    }

    #[test]
    fn too_small_for_axes_draws_only_the_block() {
        let series = train_and_val();
        let buf = render(chart(&series), 12, 5);
        assert!(rows(&buf)[0].contains("loss"));
        assert!(braille_cells(&buf).is_empty());
    }
}
