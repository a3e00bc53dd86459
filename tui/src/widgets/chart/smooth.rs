//! TensorBoard's scalar smoothing: a debiased exponential moving average.

/// Largest smoothing weight accepted; larger weights are clamped to it.
pub const MAX_SMOOTHING: f64 = 0.999;

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
pub(super) fn clamp_weight(weight: f64) -> f64 {
    if weight.is_nan() {
        0.0
    } else {
        weight.clamp(0.0, MAX_SMOOTHING)
    }
}

/// Streaming debiased EMA (the state behind [`smooth`]).
pub(super) struct Ema {
    weight: f64,
    last: f64,
    /// `weight^n` for the n finite values seen so far.
    weight_pow: f64,
}

impl Ema {
    pub(super) fn new(weight: f64) -> Self {
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
    pub(super) fn scan(
        &mut self,
        points: &[(f64, f64)],
        mut visit: impl FnMut(usize, (f64, f64), f64),
    ) {
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
