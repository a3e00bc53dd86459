//! Seeded synthetic data sets: learnable, deterministic, and needing no files.
//!
//! - Classification: each class has a fixed template (standard normal values drawn from the seed);
//!   a sample is its class's template plus `noise · N(0, 1)` per value, its class uniform at random.
//! - Regression (the `linear` model's data): `x ~ N(0, 1)^d` with `d = C·H·W`,
//!   `y = w·x + b + noise · N(0, 1)` where `w ~ N(0, 1/d)^d` and `b ~ N(0, 1)` are fixed by the seed.
//!
//! Sample `i` of a split is a pure function of `(seed, split, i)`; the train and test splits use
//! different stream keys, so they are disjoint draws from the same distribution.

use super::rng::SplitMix64;
use super::{InMemory, Split, Targets};

/// What the synthetic data is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    Classification,
    Regression,
}

/// Parameters of a synthetic data set.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticConfig {
    pub task: Task,
    /// Per-sample shape `[C, H, W]`; for regression the feature count is the product.
    pub shape: [usize; 3],
    /// Number of classes (ignored for regression).
    pub classes: usize,
    pub train_size: usize,
    pub test_size: usize,
    /// Standard deviation of the per-value (classification) or per-target (regression) noise.
    pub noise: f32,
    pub seed: u64,
}

impl Default for SyntheticConfig {
    /// MNIST-shaped 10-class classification, 4096 train / 1024 test samples, noise 1.
    fn default() -> Self {
        SyntheticConfig {
            task: Task::Classification,
            shape: [1, 28, 28],
            classes: 10,
            train_size: 4096,
            test_size: 1024,
            noise: 1.0,
            seed: 0,
        }
    }
}

impl SyntheticConfig {
    /// 10-feature linear regression, 4096 train / 1024 test samples, noise 0.1.
    pub fn regression() -> Self {
        SyntheticConfig {
            task: Task::Regression,
            shape: [1, 1, 10],
            classes: 0,
            noise: 0.1,
            ..Self::default()
        }
    }
}

// Stream tags, so that templates, weights and each split's samples never share a stream.
const TAG_TEMPLATE: u64 = 1;
const TAG_WEIGHTS: u64 = 2;
const TAG_SAMPLE: u64 = 3;

fn split_tag(split: Split) -> u64 {
    match split {
        Split::Train => 0,
        Split::Test => 1,
    }
}

/// The class templates (`classes × d` values).
pub fn templates(cfg: &SyntheticConfig) -> Vec<f32> {
    let d: usize = cfg.shape.iter().product();
    let mut out = Vec::with_capacity(cfg.classes * d);
    for c in 0..cfg.classes {
        let mut g = SplitMix64::keyed(&[cfg.seed, TAG_TEMPLATE, c as u64]);
        out.extend((0..d).map(|_| g.normal() as f32));
    }
    out
}

/// The regression weights `w` (length d) and bias `b`.
pub fn linear_weights(cfg: &SyntheticConfig) -> (Vec<f32>, f32) {
    let d: usize = cfg.shape.iter().product();
    let mut g = SplitMix64::keyed(&[cfg.seed, TAG_WEIGHTS]);
    let scale = 1.0 / (d.max(1) as f64).sqrt();
    let w = (0..d).map(|_| (g.normal() * scale) as f32).collect();
    (w, g.normal() as f32)
}

/// Generates the `split` half of the synthetic data set described by `cfg`.
pub fn synthetic(cfg: &SyntheticConfig, split: Split) -> InMemory {
    let n = match split {
        Split::Train => cfg.train_size,
        Split::Test => cfg.test_size,
    };
    let d: usize = cfg.shape.iter().product();
    let mut images = Vec::with_capacity(n * d);
    let stream = |i: usize| SplitMix64::keyed(&[cfg.seed, TAG_SAMPLE, split_tag(split), i as u64]);
    match cfg.task {
        Task::Classification => {
            let t = templates(cfg);
            let classes = cfg.classes.max(1);
            let mut labels = Vec::with_capacity(n);
            for i in 0..n {
                let mut g = stream(i);
                let c = g.below(classes as u64) as usize;
                let tc = &t[c * d..(c + 1) * d];
                images.extend(tc.iter().map(|&v| v + cfg.noise * g.normal() as f32));
                labels.push(c as u32);
            }
            InMemory {
                name: "synthetic-classification".into(),
                shape: cfg.shape,
                images,
                targets: Targets::Classes(labels),
                classes,
            }
        }
        Task::Regression => {
            let (w, b) = linear_weights(cfg);
            let mut values = Vec::with_capacity(n);
            for i in 0..n {
                let mut g = stream(i);
                let start = images.len();
                images.extend((0..d).map(|_| g.normal() as f32));
                let dot: f32 = images[start..].iter().zip(&w).map(|(x, w)| x * w).sum();
                values.push(dot + b + cfg.noise * g.normal() as f32);
            }
            InMemory {
                name: "synthetic-regression".into(),
                shape: cfg.shape,
                images,
                targets: Targets::Values(values),
                classes: 0,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> SyntheticConfig {
        SyntheticConfig {
            shape: [1, 4, 4],
            classes: 3,
            train_size: 300,
            test_size: 60,
            ..SyntheticConfig::default()
        }
    }

    #[test]
    fn deterministic_per_seed_and_split() {
        let cfg = small();
        let a = synthetic(&cfg, Split::Train);
        assert_eq!(a, synthetic(&cfg, Split::Train));
        assert_eq!(
            (a.len(), a.shape, a.classes, a.images.len()),
            (300, [1, 4, 4], 3, 300 * 16)
        );
        let t = synthetic(&cfg, Split::Test);
        assert_eq!(t.len(), 60);
        assert_ne!(&a.images[..16], &t.images[..16]);
        let other = synthetic(
            &SyntheticConfig {
                seed: 1,
                ..cfg.clone()
            },
            Split::Train,
        );
        assert_ne!(a.images, other.images);
        // A bigger train split starts with the same samples (each is a function of its index).
        let big = synthetic(
            &SyntheticConfig {
                train_size: 400,
                ..cfg
            },
            Split::Train,
        );
        assert_eq!(&big.images[..300 * 16], &a.images[..]);
    }

    #[test]
    fn classification_is_learnable_by_nearest_template() {
        let cfg = small();
        let t = templates(&cfg);
        let test = synthetic(&cfg, Split::Test);
        let Targets::Classes(labels) = &test.targets else {
            panic!("classes expected")
        };
        let mut seen = [0usize; 3];
        let mut correct = 0;
        for (i, &l) in labels.iter().enumerate() {
            seen[l as usize] += 1;
            let x = test.sample(i);
            let dist = |c: usize| -> f32 {
                x.iter()
                    .zip(&t[c * 16..(c + 1) * 16])
                    .map(|(a, b)| (a - b).powi(2))
                    .sum()
            };
            let best = (0..3).min_by(|&a, &b| dist(a).total_cmp(&dist(b))).unwrap();
            correct += (best == l as usize) as usize;
        }
        assert!(seen.iter().all(|&s| s >= 5), "{seen:?}");
        assert!(correct >= 48, "{correct}/60 by nearest template");
    }

    #[test]
    fn regression_follows_the_linear_model() {
        let cfg = SyntheticConfig {
            noise: 0.0,
            ..SyntheticConfig::regression()
        };
        let ds = synthetic(&cfg, Split::Train);
        assert_eq!(
            (ds.shape, ds.classes, ds.sample_len(), ds.name.as_str()),
            ([1, 1, 10], 0, 10, "synthetic-regression")
        );
        let (w, b) = linear_weights(&cfg);
        let Targets::Values(y) = &ds.targets else {
            panic!("values expected")
        };
        for (i, &yi) in y.iter().enumerate() {
            let pred: f32 = ds.sample(i).iter().zip(&w).map(|(x, w)| x * w).sum::<f32>() + b;
            assert!((pred - yi).abs() < 1e-5);
        }
        let noisy = synthetic(&SyntheticConfig::regression(), Split::Train);
        assert_eq!(noisy.images, ds.images);
        let Targets::Values(yn) = &noisy.targets else {
            panic!("values expected")
        };
        let resid: f32 =
            yn.iter().zip(y).map(|(a, b)| (a - b).powi(2)).sum::<f32>() / y.len() as f32;
        assert!(
            (resid.sqrt() - 0.1).abs() < 0.01,
            "residual std {}",
            resid.sqrt()
        );
    }
}
