//! Training-time augmentation: random crop from a padded image plus a random horizontal flip
//! (torchvision's `RandomCrop(32, padding=4)` + `RandomHorizontalFlip()` for CIFAR).
//!
//! Every random choice is a pure function of `(seed, epoch, rank, step, position in batch)` (a
//! counter-based [`SplitMix64`] stream), so a run resumed at any step reproduces the augmentation
//! without saved RNG state. Padding is applied to the raw image with pixel value 0, i.e. in the
//! normalised data it is the per-channel value `(0 − mean) / std` ([`Augment::fill`]). CIFAR-10's
//! settings are [`Augment::cifar10`], beside the CIFAR-10 reader.

use super::rng::SplitMix64;

/// Random crop + flip with counter-based randomness; see the module docs.
#[derive(Clone, Debug, PartialEq)]
pub struct Augment {
    pub seed: u64,
    /// Padding on each side before cropping back to the original size (0: no crop).
    pub pad: usize,
    /// Flip horizontally with probability 0.5.
    pub flip: bool,
    /// Per-channel value of the padding, in normalised units (one entry per channel, or one for all).
    pub fill: Vec<f32>,
    /// Position of the next batch: [`InMemory::gather`](super::InMemory::gather) uses it, then advances `step`.
    pub epoch: u64,
    pub rank: u64,
    pub step: u64,
}

/// The choices made for one sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// Top-left corner of the crop in the padded image, each in `0..=2·pad`.
    pub top: usize,
    pub left: usize,
    pub flip: bool,
}

impl Augment {
    pub fn new(seed: u64, pad: usize, flip: bool, fill: Vec<f32>) -> Self {
        Augment {
            seed,
            pad,
            flip,
            fill,
            epoch: 0,
            rank: 0,
            step: 0,
        }
    }

    /// Positions the augmenter at a batch: call at the start of each epoch (step 0) or on resume.
    pub fn set_position(&mut self, epoch: u64, rank: usize, step: u64) {
        self.epoch = epoch;
        self.rank = rank as u64;
        self.step = step;
    }

    /// Moves to the next batch.
    pub fn advance(&mut self) {
        self.step += 1;
    }

    /// The choices for sample `pos` of the current batch.
    pub fn choice(&self, pos: usize) -> Choice {
        let mut g = SplitMix64::keyed(&[self.seed, self.epoch, self.rank, self.step, pos as u64]);
        let span = 2 * self.pad as u64 + 1;
        let top = g.below(span) as usize;
        let left = g.below(span) as usize;
        let flip = g.coin() && self.flip;
        Choice { top, left, flip }
    }

    /// Writes the augmented sample `pos` of the current batch: `src` and `dst` are one `[C, H, W]` sample.
    pub fn apply(&self, pos: usize, shape: [usize; 3], src: &[f32], dst: &mut [f32]) {
        apply_choice(self.choice(pos), self.pad, &self.fill, shape, src, dst);
    }
}

/// Crop at (`top`, `left`) of the image padded by `pad`, then flip: `dst[c][y][x]` is
/// `src[c][y + top − pad][x' + left − pad]` (or the fill value outside the image), with
/// `x' = W − 1 − x` when flipped.
pub fn apply_choice(
    ch: Choice,
    pad: usize,
    fill: &[f32],
    shape: [usize; 3],
    src: &[f32],
    dst: &mut [f32],
) {
    let [c_n, h, w] = shape;
    debug_assert_eq!(src.len(), c_n * h * w);
    debug_assert_eq!(dst.len(), c_n * h * w);
    for c in 0..c_n {
        let f = match fill {
            [] => 0.0,
            [v] => *v,
            v => v[c],
        };
        let (sp, dp) = (
            &src[c * h * w..(c + 1) * h * w],
            &mut dst[c * h * w..(c + 1) * h * w],
        );
        for y in 0..h {
            let row = &mut dp[y * w..(y + 1) * w];
            let sy = (y + ch.top).wrapping_sub(pad);
            if sy >= h {
                row.fill(f);
                continue;
            }
            let srow = &sp[sy * w..(sy + 1) * w];
            for (x, out) in row.iter_mut().enumerate() {
                let xx = if ch.flip { w - 1 - x } else { x };
                let sx = (xx + ch.left).wrapping_sub(pad);
                *out = if sx < w { srow[sx] } else { f };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Batch, InMemory, Targets};
    use super::*;

    /// 2 channels of 3×4: value = 100·c + 10·y + x.
    fn img() -> Vec<f32> {
        let mut v = Vec::new();
        for c in 0..2 {
            for y in 0..3 {
                for x in 0..4 {
                    v.push((100 * c + 10 * y + x) as f32);
                }
            }
        }
        v
    }

    fn run(ch: Choice) -> Vec<f32> {
        let mut dst = vec![0.0; 24];
        apply_choice(ch, 1, &[-1.0, -2.0], [2, 3, 4], &img(), &mut dst);
        dst
    }

    #[test]
    fn centre_crop_without_flip_is_identity() {
        assert_eq!(
            run(Choice {
                top: 1,
                left: 1,
                flip: false
            }),
            img()
        );
    }

    #[test]
    fn flip_mirrors_each_row() {
        let got = run(Choice {
            top: 1,
            left: 1,
            flip: true,
        });
        assert_eq!(&got[0..4], &[3.0, 2.0, 1.0, 0.0]);
        assert_eq!(&got[12..16], &[103.0, 102.0, 101.0, 100.0]);
        assert_eq!(&got[20..24], &[123.0, 122.0, 121.0, 120.0]);
    }

    #[test]
    fn crop_shifts_and_fills_per_channel() {
        // top 0, left 0: the window starts one pixel above and left of the image.
        let got = run(Choice {
            top: 0,
            left: 0,
            flip: false,
        });
        assert_eq!(&got[0..4], &[-1.0; 4]);
        assert_eq!(&got[4..8], &[-1.0, 0.0, 1.0, 2.0]);
        assert_eq!(&got[8..12], &[-1.0, 10.0, 11.0, 12.0]);
        assert_eq!(&got[12..16], &[-2.0; 4]);
        assert_eq!(&got[16..20], &[-2.0, 100.0, 101.0, 102.0]);
        // top 2, left 2 and flipped: shifted the other way, then mirrored.
        let got = run(Choice {
            top: 2,
            left: 2,
            flip: true,
        });
        assert_eq!(&got[0..4], &[-1.0, 13.0, 12.0, 11.0]);
        assert_eq!(&got[4..8], &[-1.0, 23.0, 22.0, 21.0]);
        assert_eq!(&got[8..12], &[-1.0; 4]);
    }

    #[test]
    fn choices_are_deterministic_and_varied() {
        let mut a = Augment::cifar10(11);
        a.set_position(3, 1, 40);
        let b = a.clone();
        let ca: Vec<Choice> = (0..256).map(|i| a.choice(i)).collect();
        assert_eq!(ca, (0..256).map(|i| b.choice(i)).collect::<Vec<_>>());
        assert!(ca.iter().all(|c| c.top <= 8 && c.left <= 8));
        let flips = ca.iter().filter(|c| c.flip).count();
        assert!((90..=166).contains(&flips), "{flips} flips of 256");
        for v in 0..=8 {
            assert!(ca.iter().any(|c| c.top == v) && ca.iter().any(|c| c.left == v));
        }
        let mut other = a.clone();
        other.set_position(3, 0, 40);
        assert_ne!(ca, (0..256).map(|i| other.choice(i)).collect::<Vec<_>>());
        other.set_position(4, 1, 40);
        assert_ne!(ca, (0..256).map(|i| other.choice(i)).collect::<Vec<_>>());
        assert_eq!(a.fill[0], (0.0 - 0.4914) / 0.2470);
        let no_flip = Augment::new(11, 4, false, vec![0.0]);
        assert!((0..64).all(|i| !no_flip.choice(i).flip));
    }

    #[test]
    fn gather_applies_and_advances() {
        let ds = InMemory {
            name: "t".into(),
            shape: [2, 3, 4],
            images: [img(), img()].concat(),
            targets: Targets::Classes(vec![0, 1]),
            classes: 2,
        };
        let mut aug = Augment::new(5, 1, true, vec![-1.0, -2.0]);
        aug.set_position(0, 0, 7);
        let expect0 = run(aug.choice(0));
        let expect1 = run(aug.choice(1));
        let mut b = Batch::new();
        ds.gather(&[1, 0], &mut b, Some(&mut aug));
        assert_eq!(&b.x[..24], &expect0[..]);
        assert_eq!(&b.x[24..], &expect1[..]);
        assert_eq!(b.classes, vec![1, 0]);
        assert_eq!(aug.step, 8);
        // A fresh augmenter set to the same position reproduces the batch (resume).
        let mut again = Augment::new(5, 1, true, vec![-1.0, -2.0]);
        again.set_position(0, 0, 7);
        let mut b2 = Batch::new();
        ds.gather(&[1, 0], &mut b2, Some(&mut again));
        assert_eq!(b.x, b2.x);
    }
}
