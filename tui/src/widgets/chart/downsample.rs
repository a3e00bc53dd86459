//! The y scales, which points they can draw, and min/max downsampling of a
//! series into equal-width x buckets (so spikes survive).

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

/// `y` when `(x, y)` can be drawn on `scale` (finite, and positive on a log
/// axis), else NaN.
pub(super) fn plot_value(scale: Scale, x: f64, y: f64) -> f64 {
    above(floor(scale), x, y)
}

/// Values a scale can show must be above this.
pub(super) fn floor(scale: Scale) -> f64 {
    match scale {
        Scale::Linear => f64::NEG_INFINITY,
        Scale::Log10 => 0.0,
    }
}

/// `y` when x is finite and `floor < y < inf`, else NaN: [`plot_value`] with
/// the scale resolved outside the hot loops.
#[inline]
pub(super) fn above(floor: f64, x: f64, y: f64) -> f64 {
    // Non-short-circuit `&` keeps this branch-free.
    let ok = x.is_finite() & (y > floor) & (y < f64::INFINITY);
    if ok { y } else { f64::NAN }
}

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
pub(super) fn bucket_starts(points: &[(f64, f64)], x0: f64, x1: f64, buckets: usize) -> Vec<usize> {
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
pub(super) struct Extremes {
    first: (usize, f64),
    min: (usize, f64),
    max: (usize, f64),
    last: (usize, f64),
}

/// First, last, minimum and maximum of the non-NaN `value`s of `items`
/// (`None` when all are NaN); ties go to the earliest point.
pub(super) fn extremes<T>(items: &[T], value: impl Fn(&T) -> f64) -> Option<Extremes> {
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
pub(super) struct Tracker {
    first: Option<(usize, f64)>,
    min: (usize, f64),
    max: (usize, f64),
    last: (usize, f64),
}

impl Tracker {
    pub(super) fn new() -> Self {
        Self {
            first: None,
            min: (0, f64::INFINITY),
            max: (0, f64::NEG_INFINITY),
            last: (0, f64::NAN),
        }
    }

    /// Sees value `v` (NaN = not drawable) at index `i`.
    #[inline]
    pub(super) fn see(&mut self, i: usize, v: f64) {
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

    pub(super) fn finish(self) -> Option<Extremes> {
        Some(Extremes {
            first: self.first?,
            min: self.min,
            max: self.max,
            last: self.last,
        })
    }
}

/// Collects the points a downsampled track keeps, in order, without repeats.
pub(super) struct Picker {
    scale: Scale,
    out: Vec<(f64, f64)>,
    /// Global index of the newest emitted point.
    emitted: Option<usize>,
    /// Newest valid point seen: global index, x, real value.
    pub(super) last: Option<(usize, f64, f64)>,
}

impl Picker {
    pub(super) fn new(scale: Scale) -> Self {
        Self {
            scale,
            out: Vec::new(),
            emitted: None,
            last: None,
        }
    }

    /// Adds one bucket: `slice` starts at global index `offset`.
    pub(super) fn add(&mut self, offset: usize, slice: &[(f64, f64)], e: Extremes) {
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
    pub(super) fn finish(mut self) -> Vec<(f64, f64)> {
        if let Some((index, x, v)) = self.last {
            self.push(index, x, v);
        }
        self.out
    }
}
