//! The data of sample tasks (classification, regression): the train, validation and test sets
//! of a spec, the loss of a batch and the evaluation of a set over all ranks.

use std::time::Instant;

use candle_core::{DType, Tensor};

use crate::data::{self, Batch, BatchRows, Dataset, Split, Targets};
use crate::ddp::{SharedCollective, with_comm};
use crate::dist::ReduceOp;
use crate::models::Network;
use crate::report::Evaluation;
use crate::spec::{DataName, Spec};
use crate::{Error, Result};

/// The train, validation and test sets of a spec.
pub struct Splits {
    pub train: Dataset,
    pub val: Dataset,
    pub test: Dataset,
}

pub fn load_data(spec: &Spec) -> Result<Splits> {
    let d = &spec.data;
    let load = |split: Split| -> Result<Dataset> {
        let dir = || d.path.clone().unwrap_or_default();
        match d.name {
            DataName::Mnist => data::load_mnist(&dir(), split),
            DataName::FashionMnist => data::load_fashion_mnist(&dir(), split),
            DataName::Cifar10 => data::load_cifar10(&dir(), split),
            DataName::Synthetic => Ok(data::synthetic(&synthetic_config(spec), split)),
            DataName::Text | DataName::Tokens => Err(Error::Model(
                "language-model data (data.name = \"text\" or \"tokens\") is not trained by this loop yet".into(),
            )),
        }
    };
    let limit = |ds: Dataset, n: Option<usize>| match n {
        Some(n) if n < ds.len() => ds.subset(&(0..n).collect::<Vec<_>>()),
        _ => ds,
    };
    let full = limit(load(Split::Train)?, d.limit_train);
    let test = limit(load(Split::Test)?, d.limit_test);
    let (train, val) = data::train_val_split(&full, d.val_fraction, spec.train.seed)?;
    Ok(Splits { train, val, test })
}

fn synthetic_config(spec: &Spec) -> data::SyntheticConfig {
    let d = &spec.data;
    data::SyntheticConfig {
        task: match d.task {
            crate::spec::SyntheticTask::Classification => data::Task::Classification,
            crate::spec::SyntheticTask::Regression => data::Task::Regression,
        },
        shape: d
            .shape
            .unwrap_or_else(|| crate::models::expected_input(spec.model.name)),
        classes: d.classes,
        train_size: d.train_size,
        test_size: d.test_size,
        noise: d.noise,
        seed: spec.train.seed,
    }
}

/// Loss and (sum-reduced) correct count of one batch in evaluation or training mode.
pub(super) fn batch_loss(
    net: &Network,
    batch: BatchRows,
    train: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    let [c, h, w] = batch.shape;
    let x = Tensor::from_slice(batch.x, (batch.len, c, h, w), &net.device)?;
    let out = net.forward(&x, train)?;
    if batch.values.is_empty() {
        let y = Tensor::from_slice(batch.classes, batch.len, &net.device)?;
        let loss = candle_nn::loss::cross_entropy(&out, &y)?;
        let correct = if train {
            None
        } else {
            Some(out.argmax(1)?.eq(&y)?.to_dtype(DType::F32)?.sum_all()?)
        };
        Ok((loss, correct))
    } else {
        let y = Tensor::from_slice(batch.values, (batch.len, 1), &net.device)?;
        Ok((candle_nn::loss::mse(&out, &y)?, None))
    }
}

/// Evaluates this rank's shard (every world-th sample from `rank`) and all-reduces
/// (loss sum, correct, count), so the figures do not depend on the world size.
pub(super) fn evaluate(
    net: &Network,
    ds: &Dataset,
    rank: usize,
    world: usize,
    batch_size: usize,
    comm: &SharedCollective,
) -> Result<Evaluation> {
    let t0 = Instant::now();
    let shard: Vec<usize> = (rank..ds.len()).step_by(world).collect();
    let mut batch = Batch::new();
    let (mut loss_sum, mut correct) = (0f64, 0f64);
    // Batches of the training size: a forward pass keeps its whole graph (every activation)
    // until its loss is dropped, so a larger evaluation batch raised the peak memory above
    // training's (ResNet-18, 128 test images at once: 1.13 GB against 0.56 GB).
    for idx in shard.chunks(batch_size.max(1)) {
        ds.gather(idx, &mut batch, None);
        let (loss, c) = batch_loss(net, batch.rows(0..batch.len), false)?;
        loss_sum += loss.to_scalar::<f32>()? as f64 * idx.len() as f64;
        if let Some(c) = c {
            correct += c.to_scalar::<f32>()? as f64;
        }
    }
    let mut totals = [loss_sum as f32, correct as f32, shard.len() as f32];
    with_comm(comm, |c| c.all_reduce(&mut totals, ReduceOp::Sum))?;
    let n = totals[2] as usize;
    Ok(Evaluation {
        loss: totals[0] as f64 / n.max(1) as f64,
        accuracy: matches!(ds.targets, Targets::Classes(_))
            .then(|| totals[1] as f64 / n.max(1) as f64),
        samples: n,
        samples_per_sec: n as f64 / t0.elapsed().as_secs_f64().max(1e-9),
    })
}
