//! Standardising a table's features (`data.normalize = true`): each column's mean and
//! population standard deviation over the training rows, then `(x − mean) / std` in `f32`.
//!
//! The figures are summed in `f64` over fixed blocks of rows, the blocks' sums added in order,
//! so they do not depend on the number of threads. A constant column (std 0) gets std 1: it is
//! only centred.

use rayon::prelude::*;

/// Rows per block of the sums.
const BLOCK: usize = 4096;

/// The mean and population standard deviation of each of the `nf` columns of the row-major
/// `features`, over the rows `rows` (all rows when None). No rows: mean 0, std 1.
pub fn column_stats(features: &[f32], nf: usize, rows: Option<&[usize]>) -> (Vec<f32>, Vec<f32>) {
    let n = rows.map_or(features.len() / nf.max(1), <[usize]>::len);
    if nf == 0 || n == 0 {
        return (vec![0.0; nf], vec![1.0; nf]);
    }
    let sum = |centre: Option<&[f64]>| -> Vec<f64> {
        let block = |rows: &mut dyn Iterator<Item = usize>| -> Vec<f64> {
            let mut acc = vec![0.0f64; nf];
            for r in rows {
                let x = &features[r * nf..(r + 1) * nf];
                match centre {
                    None => acc.iter_mut().zip(x).for_each(|(a, &v)| *a += v as f64),
                    Some(m) => acc.iter_mut().zip(x).zip(m).for_each(|((a, &v), &m)| {
                        let d = v as f64 - m;
                        *a += d * d;
                    }),
                }
            }
            acc
        };
        let partial: Vec<Vec<f64>> = match rows {
            Some(rows) => rows
                .par_chunks(BLOCK)
                .map(|c| block(&mut c.iter().copied()))
                .collect(),
            None => (0..n.div_ceil(BLOCK))
                .into_par_iter()
                .map(|b| block(&mut (b * BLOCK..((b + 1) * BLOCK).min(n))))
                .collect(),
        };
        let mut total = vec![0.0f64; nf];
        for p in partial {
            total.iter_mut().zip(p).for_each(|(t, v)| *t += v);
        }
        total
    };
    let mean: Vec<f64> = sum(None).into_iter().map(|s| s / n as f64).collect();
    let std: Vec<f32> = sum(Some(&mean))
        .into_iter()
        .map(|s| {
            let sd = (s / n as f64).sqrt() as f32;
            if sd > 0.0 && sd.is_finite() { sd } else { 1.0 }
        })
        .collect();
    (mean.into_iter().map(|m| m as f32).collect(), std)
}

/// `(x − mean) / std` per column, in place, in `f32`.
pub fn standardize(features: &mut [f32], mean: &[f32], std: &[f32]) {
    let nf = mean.len();
    if nf == 0 {
        return;
    }
    features.par_chunks_mut(BLOCK * nf).for_each(|block| {
        for row in block.chunks_exact_mut(nf) {
            for ((x, &m), &s) in row.iter_mut().zip(mean).zip(std) {
                *x = (*x - m) / s;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn population_figures_and_constant_columns() {
        // Columns: 1, 2, 3, 4 (mean 2.5, std √1.25); 5 constant; −1, 1, −1, 1 (mean 0, std 1).
        let mut x = vec![
            1.0, 5.0, -1.0, //
            2.0, 5.0, 1.0, //
            3.0, 5.0, -1.0, //
            4.0, 5.0, 1.0,
        ];
        let (mean, std) = column_stats(&x, 3, None);
        assert_eq!(mean, vec![2.5, 5.0, 0.0]);
        assert_eq!(std, vec![1.25f64.sqrt() as f32, 1.0, 1.0]);
        standardize(&mut x, &mean, &std);
        let s = 1.25f64.sqrt() as f32;
        assert_eq!(
            x,
            vec![
                -1.5 / s,
                0.0,
                -1.0, //
                -0.5 / s,
                0.0,
                1.0, //
                0.5 / s,
                0.0,
                -1.0, //
                1.5 / s,
                0.0,
                1.0
            ]
        );
    }

    #[test]
    fn only_the_given_rows_count() {
        let x = vec![0.0, 10.0, 2.0, 100.0, 4.0];
        let (mean, std) = column_stats(&x, 1, Some(&[0, 2, 4]));
        assert_eq!(mean, vec![2.0]);
        assert_eq!(std, vec![(8.0f64 / 3.0).sqrt() as f32]);
        assert_eq!(column_stats(&x, 1, Some(&[])), (vec![0.0], vec![1.0]));
    }

    #[test]
    fn figures_do_not_depend_on_blocks() {
        let n = 3 * BLOCK + 17;
        let x: Vec<f32> = (0..2 * n)
            .map(|i| ((i * 7919) % 1000) as f32 * 0.001)
            .collect();
        let rows: Vec<usize> = (0..n).collect();
        assert_eq!(column_stats(&x, 2, None), column_stats(&x, 2, Some(&rows)));
    }
}
