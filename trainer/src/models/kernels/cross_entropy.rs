//! Mean cross-entropy of logits `[N, V]` against target ids, log-softmax and the pick of the
//! target in one pass per row (PyTorch's `F.cross_entropy`), and its gradient
//! `(softmax(row) − onehot(target))·g/N` in one more: the `N × V` log-probabilities are never
//! written.

use super::math::exp;
use super::simd::widest_simd;
use super::tasks::{items_per_task, map_range, written_pieces};

/// Rows per parallel task: at least 64 (a task costs a wake-up).
fn rows_per_task(rows: usize, threads: usize) -> usize {
    items_per_task(rows, threads).max(64)
}

widest_simd! {
    /// `log Σ exp(row)`: the maximum, then the sum of `exp(v − max)` in 16 lanes.
    fn log_sum_exp(row: &[f32]) -> f32 {
        let mut lanes = [f32::NEG_INFINITY; 16];
        let chunks = row.chunks_exact(16);
        let mut max = f32::NEG_INFINITY;
        for v in chunks.remainder() {
            max = if *v > max { *v } else { max };
        }
        for c in chunks {
            for (m, v) in lanes.iter_mut().zip(c) {
                *m = if *v > *m { *v } else { *m };
            }
        }
        for m in lanes {
            max = if m > max { m } else { max };
        }
        let mut acc = [0f32; 16];
        let chunks = row.chunks_exact(16);
        let mut tail = 0f32;
        for v in chunks.remainder() {
            tail += exp(v - max);
        }
        for c in chunks {
            for (a, v) in acc.iter_mut().zip(c) {
                *a += exp(v - max);
            }
        }
        max + (acc.iter().sum::<f32>() + tail).ln()
    }
}

widest_simd! {
    /// `out = (exp(row − lse) − [j = target])·scale`.
    fn row_grad(row: &[f32], lse: f32, target: usize, scale: f32, out: &mut [f32]) {
        for (o, v) in out.iter_mut().zip(row) {
            *o = exp(v - lse) * scale;
        }
        out[target] -= scale;
    }
}

/// Checks the shapes and every target id; `V`, the number of classes.
fn check(logits: &[f32], targets: &[u32]) -> Result<usize, String> {
    let n = targets.len();
    if n == 0 || logits.is_empty() || !logits.len().is_multiple_of(n) {
        return Err(format!(
            "cross-entropy: {} logits for {n} targets",
            logits.len()
        ));
    }
    let v = logits.len() / n;
    match targets.iter().find(|&&t| t as usize >= v) {
        Some(t) => Err(format!("cross-entropy: target {t} of {v} classes")),
        None => Ok(v),
    }
}

/// The mean over the rows of `lse(row) − row[target]` (summed in f64).
pub fn forward(logits: &[f32], targets: &[u32], threads: usize) -> Result<f32, String> {
    let v = check(logits, targets)?;
    let n = targets.len();
    let per = rows_per_task(n, threads);
    let tasks = n.div_ceil(per);
    let sums = map_range(tasks, threads, |task| {
        let rows = task * per..(task * per + per).min(n);
        rows.map(|r| {
            let row = &logits[r * v..][..v];
            (log_sum_exp(row) - row[targets[r] as usize]) as f64
        })
        .sum::<f64>()
    });
    Ok((sums.iter().sum::<f64>() / n as f64) as f32)
}

/// The gradient of [`forward`] times `g` (the loss's own gradient): `[N, V]`.
pub fn backward(
    logits: &[f32],
    targets: &[u32],
    g: f32,
    threads: usize,
) -> Result<Vec<f32>, String> {
    let v = check(logits, targets)?;
    let n = targets.len();
    let scale = g / n as f32;
    let per = rows_per_task(n, threads);
    Ok(written_pieces(logits.len(), v, per, |first, out| {
        for (i, o) in out.chunks_exact_mut(v).enumerate() {
            let r = first + i;
            let row = &logits[r * v..][..v];
            row_grad(row, log_sum_exp(row), targets[r] as usize, scale, o);
        }
    })
    .0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_and_gradient_match_the_formulas() {
        let (n, v) = (150, 19);
        let logits: Vec<f32> = (0..n * v)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 9.0)
            .collect();
        let targets: Vec<u32> = (0..n).map(|i| (i * 7 % v) as u32).collect();
        let mut want = 0.0;
        let mut want_grad = vec![0.0f64; n * v];
        for r in 0..n {
            let row: Vec<f64> = logits[r * v..][..v].iter().map(|x| *x as f64).collect();
            let lse = row.iter().map(|x| x.exp()).sum::<f64>().ln();
            want += lse - row[targets[r] as usize];
            for j in 0..v {
                let onehot = if j == targets[r] as usize { 1.0 } else { 0.0 };
                want_grad[r * v + j] = ((row[j] - lse).exp() - onehot) * 2.0 / n as f64;
            }
        }
        want /= n as f64;
        for threads in [1, 3] {
            let loss = forward(&logits, &targets, threads).unwrap();
            assert!((loss as f64 - want).abs() < 1e-5, "{loss} vs {want}");
            let grad = backward(&logits, &targets, 2.0, threads).unwrap();
            let worst = grad
                .iter()
                .zip(&want_grad)
                .map(|(a, b)| (*a as f64 - b).abs())
                .fold(0.0, f64::max);
            assert!(worst < 1e-7, "gradient off by {worst}");
        }
    }

    #[test]
    fn bad_targets_are_refused() {
        let e = forward(&[0.0; 6], &[0, 3], 1).unwrap_err();
        assert!(e.contains("target 3 of 3 classes"), "{e}");
        assert!(forward(&[0.0; 5], &[0, 1], 1).is_err());
    }
}
