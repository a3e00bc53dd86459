//! Pixels to model inputs: `x = p / 255` (torchvision's `ToTensor`), then `(x − mean[c]) / std[c]`
//! per channel where a mean and standard deviation are given or computed (`Normalize`), all in
//! `f32` in that order, so that the same figures give the same bits as PyTorch (and as the IDX
//! reader's `(p / 255 − 0.5) / 0.5`). Done by a table of the 256 byte values per channel.
//!
//! `normalize = "auto"` computes the figures from a histogram of the training part's pixels
//! per channel: the mean of `p / 255` and its population standard deviation (`ddof = 0`),
//! exact in integers before the final division and square root.

/// Per channel, the input value of every byte value.
#[derive(Clone)]
pub struct Lut {
    tables: Vec<[f32; 256]>,
}

impl Lut {
    /// `p / 255`, then `(· − mean[c]) / std[c]` with `figures`; `channels` tables.
    pub fn new(channels: usize, figures: Option<(&[f32], &[f32])>) -> Lut {
        let tables = (0..channels)
            .map(|c| {
                std::array::from_fn(|p| {
                    let x = p as f32 / 255.0;
                    match figures {
                        Some((mean, std)) => (x - mean[c]) / std[c],
                        None => x,
                    }
                })
            })
            .collect();
        Lut { tables }
    }

    /// The input value of byte `p` in channel `c`.
    pub fn value(&self, c: usize, p: u8) -> f32 {
        self.tables[c][p as usize]
    }

    /// Appends the inputs of one sample's planar pixels (`channels` planes of equal length).
    pub fn extend(&self, pixels: &[u8], out: &mut Vec<f32>) {
        let plane = pixels.len() / self.tables.len();
        for (table, px) in self.tables.iter().zip(pixels.chunks_exact(plane)) {
            out.extend(px.iter().map(|&p| table[p as usize]));
        }
    }
}

/// Per-channel histograms of pixel values, summed over samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    counts: Vec<[u64; 256]>,
}

impl Histogram {
    pub fn new(channels: usize) -> Histogram {
        Histogram {
            counts: vec![[0; 256]; channels],
        }
    }

    /// Counts one sample's planar pixels.
    pub fn add(&mut self, pixels: &[u8]) {
        let plane = pixels.len() / self.counts.len();
        for (h, px) in self.counts.iter_mut().zip(pixels.chunks_exact(plane)) {
            for &p in px {
                h[p as usize] += 1;
            }
        }
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
    }

    /// Per channel, the mean and population standard deviation of `p / 255`; `None` without
    /// pixels.
    pub fn mean_std(&self) -> Option<(Vec<f32>, Vec<f32>)> {
        let mut mean = Vec::new();
        let mut std = Vec::new();
        for h in &self.counts {
            let (mut n, mut s1, mut s2) = (0u128, 0u128, 0u128);
            for (p, &k) in h.iter().enumerate() {
                let (p, k) = (p as u128, k as u128);
                n += k;
                s1 += k * p;
                s2 += k * p * p;
            }
            if n == 0 {
                return None;
            }
            // var(p) = (n·Σp² − (Σp)²) / n², exact until the division.
            let var = (n * s2 - s1 * s1) as f64 / (n as f64 * n as f64);
            mean.push((s1 as f64 / n as f64 / 255.0) as f32);
            std.push((var.sqrt() / 255.0) as f32);
        }
        Some((mean, std))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_pytorchs_f32_arithmetic() {
        let plain = Lut::new(1, None);
        assert_eq!(plain.value(0, 0), 0.0);
        assert_eq!(plain.value(0, 255), 1.0);
        // float32(128) / float32(255) = 0.5019608
        assert_eq!(plain.value(0, 128), 0.501_960_8);
        let half = Lut::new(1, Some((&[0.5], &[0.5])));
        // The IDX reader's (128 / 255 − 0.5) / 0.5 in f32.
        assert_eq!(half.value(0, 128), 0.003_921_628);
        assert_eq!((half.value(0, 0), half.value(0, 255)), (-1.0, 1.0));
        let two = Lut::new(2, Some((&[0.0, 0.25], &[1.0, 0.5])));
        let mut out = vec![9.0];
        two.extend(&[0, 255, 51, 102], &mut out);
        // channel 0: 0, 1; channel 1: (0.2 − 0.25) / 0.5, (0.4 − 0.25) / 0.5 in f32.
        let c1 = |p: f32| (p / 255.0 - 0.25) / 0.5;
        assert_eq!(out, [9.0, 0.0, 1.0, c1(51.0), c1(102.0)]);
        assert_eq!(out[3], -0.099_999_994);
    }

    #[test]
    fn auto_figures_are_exact() {
        let mut h = Histogram::new(2);
        // channel 0: 0, 255, 0, 255 → mean 0.5, std 0.5; channel 1: 51 ×4 → mean 0.2, std 0.
        h.add(&[0, 255, 51, 51]);
        let mut g = Histogram::new(2);
        g.add(&[0, 255, 51, 51]);
        h.merge(&g);
        let (m, s) = h.mean_std().unwrap();
        assert_eq!((m, s), (vec![0.5, 0.2], vec![0.5, 0.0]));
        // 1, 2, 3, 4 (/255): mean 2.5/255, population std sqrt(1.25)/255.
        let mut h = Histogram::new(1);
        h.add(&[1, 2, 3, 4]);
        let (m, s) = h.mean_std().unwrap();
        assert_eq!(m, [(2.5f64 / 255.0) as f32]);
        assert_eq!(s, [(1.25f64.sqrt() / 255.0) as f32]);
        assert_eq!(Histogram::new(3).mean_std(), None);
    }
}
