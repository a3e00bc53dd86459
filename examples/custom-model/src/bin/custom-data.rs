//! A data set of your own, with your own loss and metrics, trained by a built-in model: three
//! interleaved spirals of 2-D points (none of the formats ddp reads from files). The engine
//! splits, samples, batches, prefetches and shards it exactly as it does MNIST; the `mlp` takes
//! its input size (2) and class count (3) from it.
//!
//! ```sh
//! cargo build --release -p ddp-custom-model
//! cargo run --release --bin ddp -- run examples/custom-model/custom-data.toml --trainer target/release/custom-data
//! ```

use candle_core::{D, Result, Tensor};
use ddp_trainer::data::{Batch, Dataset, Split, TargetKind};

const CLASSES: usize = 3;

/// `n` points on three spirals, each a pure function of its index and `seed` (every replica and
/// every call sees the same point).
pub struct Spirals {
    n: usize,
    seed: u64,
}

/// A number in [0, 1) from `x` (SplitMix64's finaliser).
fn unit(mut x: u64) -> f32 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((x ^ (x >> 31)) >> 40) as f32 / (1u64 << 24) as f32
}

impl Spirals {
    /// Sample `i`: its class and its point (radius along the arm, a little noise).
    pub fn point(&self, i: usize) -> (u32, [f32; 2]) {
        let class = i % CLASSES;
        let key = self.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i as u64;
        let r = unit(key);
        let angle = r * 4.0 + class as f32 * std::f32::consts::TAU / CLASSES as f32;
        let noise = |k: u64| (unit(key.wrapping_add(k)) - 0.5) * 0.1;
        (
            class as u32,
            [r * angle.cos() + noise(1), r * angle.sin() + noise(2)],
        )
    }
}

impl Dataset for Spirals {
    fn len(&self) -> usize {
        self.n
    }

    fn shape(&self) -> [usize; 3] {
        [1, 1, 2]
    }

    fn target(&self) -> TargetKind {
        TargetKind::Classes(CLASSES)
    }

    fn fill(&self, indices: &[usize], batch: &mut Batch) -> ddp_trainer::Result<()> {
        for &i in indices {
            let (class, xy) = self.point(i);
            batch.x.extend(xy);
            batch.classes.push(class);
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!("spirals ({} points)", self.n)
    }
}

/// 3,000 training points, 600 test points (another seed: points the model never saw).
pub fn dataset(split: Split) -> std::result::Result<Spirals, String> {
    Ok(match split {
        Split::Train => Spirals { n: 3000, seed: 1 },
        Split::Test => Spirals { n: 600, seed: 2 },
    })
}

/// Cross-entropy with label smoothing 0.1 (PyTorch's `CrossEntropyLoss(label_smoothing=0.1)`):
/// the mean over the batch.
pub fn loss(logits: &Tensor, classes: &Tensor) -> Result<Tensor> {
    let eps = 0.1;
    let logp = candle_nn::ops::log_softmax(logits, D::Minus1)?;
    let nll = logp.gather(&classes.unsqueeze(1)?, 1)?.squeeze(1)?.neg()?;
    let uniform = logp.mean(D::Minus1)?.neg()?;
    ((nll * (1.0 - eps))? + (uniform * eps)?)?.mean_all()
}

/// `confidence`: the probability the model gives its chosen class; `top1`: correct predictions
/// (sums over the batch; reported as means).
pub fn metrics(logits: &Tensor, classes: &Tensor) -> Result<Vec<(String, f64)>> {
    let p = candle_nn::ops::softmax(logits, D::Minus1)?;
    let confidence = p.max(D::Minus1)?.sum_all()?.to_scalar::<f32>()? as f64;
    let top1 = logits
        .argmax(D::Minus1)?
        .eq(classes)?
        .to_dtype(candle_core::DType::F32)?
        .sum_all()?
        .to_scalar::<f32>()? as f64;
    Ok(vec![
        ("confidence".into(), confidence),
        ("top1".into(), top1),
    ])
}

fn main() {
    ddp_trainer::Trainer::new()
        .dataset(dataset)
        .loss(loss)
        .metrics(metrics)
        .main()
}
