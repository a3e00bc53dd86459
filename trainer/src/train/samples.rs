//! Sample tasks (classification, regression): the train, validation and test sets of a spec,
//! the model built for their shape, the per-step working set that trains a micro-batch of them ([`Loop`]), their loss and their
//! all-reduced evaluation.

use std::sync::Arc;
use std::time::Instant;

use candle_core::backprop::GradStore;
use candle_core::{Device, Tensor};
use rayon::prelude::*;

use crate::step::batch_parts;

use crate::data::{
    self, Augment, Batch, BatchRows, DataRecord, Loader, OpenContext, SharedDataset, Split, Subset,
    TargetKind,
};
use crate::dist::ReduceOp;
use crate::models::{Arch, BnMode, Network, serially};
use crate::objective;
use crate::report::Evaluation;
use crate::spec::{DataName, Spec};
use crate::step::comm::{CollectiveStats, Route, SharedCollective, with_comm};
use crate::step::overlap::{Hook, Session};
use crate::{Error, Result};

/// The train, validation and test sets of a spec, and the record of a user's data.
pub struct Splits {
    pub train: SharedDataset,
    pub val: SharedDataset,
    pub test: SharedDataset,
    /// What `data.json` records (users' own data only).
    pub record: Option<DataRecord>,
}

/// Opens the data of `spec`: its format's training and test parts, limited by
/// `data.limit_train`/`limit_test`, the training part split into train and validation.
pub fn load_data(spec: &Spec, ctx: &OpenContext) -> Result<Splits> {
    let d = &spec.data;
    let in_memory = |split: Split| -> Result<SharedDataset> {
        let dir = || d.path.clone().unwrap_or_default();
        let ds = match d.name {
            DataName::Mnist => data::load_mnist(&dir(), split)?,
            DataName::FashionMnist => data::load_fashion_mnist(&dir(), split)?,
            DataName::Cifar10 => data::load_cifar10(&dir(), split)?,
            _ => data::synthetic(&synthetic_config(spec), split),
        };
        Ok(Arc::new(ds))
    };
    let (full, test, record) = match d.name {
        DataName::Mnist | DataName::FashionMnist | DataName::Cifar10 | DataName::Synthetic => {
            (in_memory(Split::Train)?, in_memory(Split::Test)?, None)
        }
        DataName::ImageFolder
        | DataName::Csv
        | DataName::Parquet
        | DataName::Tensors
        | DataName::Custom => {
            let parts = match d.name {
                DataName::ImageFolder => data::images::open(spec, ctx)?,
                DataName::Csv | DataName::Parquet => data::table::open(spec, ctx)?,
                DataName::Tensors => data::tensors::open(spec, ctx)?,
                _ => data::custom::open(spec)?,
            };
            (parts.train, parts.test, Some(parts.record))
        }
        DataName::Text | DataName::Tokens => {
            return Err(Error::Model(
                "language-model data (data.name = \"text\" or \"tokens\") has no sample splits: it is loaded by `lm::LmData`".into(),
            ));
        }
    };
    let limit = |ds: SharedDataset, n: Option<usize>| -> SharedDataset {
        match n {
            Some(n) if n < ds.len() => Arc::new(Subset::first(ds, n)),
            _ => ds,
        }
    };
    let full = limit(full, d.limit_train);
    let test = limit(test, d.limit_test);
    let (train, val): (SharedDataset, SharedDataset) = if d.val_fraction == 0.0 {
        (full.clone(), Arc::new(Subset::new(full, Vec::new())))
    } else {
        let (t, v) = data::split::split_indices(full.len(), d.val_fraction, spec.train.seed);
        (
            Arc::new(Subset::new(full.clone(), t)),
            Arc::new(Subset::new(full, v)),
        )
    };
    Ok(Splits {
        train,
        val,
        test,
        record,
    })
}

/// The model of `spec` for data shaped like `train`, with synchronised BatchNorm statistics
/// when `ddp.sync_batchnorm` asks for them.
pub(super) fn build_network(
    spec: &Spec,
    train: &SharedDataset,
    device: &Device,
    comm: &SharedCollective,
    route: &Arc<Route>,
) -> Result<Network> {
    let bn = if spec.ddp.sync_batchnorm {
        BnMode::Sync(Arc::new(CollectiveStats::new(comm.clone(), route.clone())))
    } else {
        BnMode::Local
    };
    let arch = Arch {
        name: spec.model.name,
        input: train.shape(),
        outputs: train.target().outputs(),
        hidden: spec.model.hidden.clone(),
    };
    Network::build(&arch, device, bn, spec.train.seed)
}

/// The random crop + flip of `data.augment`, padding with black as the data normalises it:
/// CIFAR-10's per-channel figures, an own data set's recorded mean and std (`(0 − mean) / std`),
/// IDX digits' −1 ((0 − 0.5) / 0.5), or 0.
pub(super) fn augmenter(spec: &Spec, splits: &Splits) -> Option<Augment> {
    if !spec.augment() {
        return None;
    }
    if spec.data.name == DataName::Cifar10 {
        return Some(Augment::cifar10(spec.train.seed));
    }
    let fill = match (&splits.record, spec.data.name) {
        (
            Some(DataRecord {
                normalize: Some(n), ..
            }),
            _,
        ) => n.mean.iter().zip(&n.std).map(|(m, s)| -m / s).collect(),
        (_, DataName::Mnist | DataName::FashionMnist) => vec![-1.0],
        _ => vec![0.0],
    };
    Some(Augment::new(spec.train.seed, 4, true, fill))
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

/// The per-step working set: reused batch buffers, the sampler's indices, and how batches are
/// filled and trained.
pub(super) struct Loop {
    pub(super) rank: usize,
    /// The micro-batch trained next.
    pub(super) batch: Batch,
    /// A batch as the data set filled it, before augmentation.
    pub(super) raw: Batch,
    pub(super) indices: Vec<usize>,
    pub(super) augment: Option<Augment>,
    /// Most parts a batch is trained in, side by side (see [`batch_parts`]).
    pub(super) parts: usize,
}

impl Loop {
    /// Takes the next micro-batch from `loader` into [`Loop::batch`], augmented for its position
    /// (epoch, micro-step) where augmentation is on. Returns its number of samples.
    pub(super) fn next_batch(
        &mut self,
        loader: &mut Loader,
        epoch: usize,
        micro_step: u64,
    ) -> Result<usize> {
        // Augmented batches are filled into `raw` first, then written into `batch`.
        let filled = match self.augment {
            Some(_) => &mut self.raw,
            None => &mut self.batch,
        };
        if !loader.next_into(filled)? {
            return Err(Error::Model(
                "the epoch's batches ran out before its steps".into(),
            ));
        }
        let Some(aug) = self.augment.as_mut() else {
            return Ok(self.batch.len);
        };
        aug.set_position(epoch as u64, self.rank, micro_step);
        let (raw, out) = (&self.raw, &mut self.batch);
        let d: usize = raw.shape.iter().product();
        out.x.resize(raw.x.len(), 0.0);
        for (pos, (src, dst)) in raw
            .x
            .chunks_exact(d)
            .zip(out.x.chunks_exact_mut(d))
            .enumerate()
        {
            aug.apply(pos, raw.shape, src, dst);
        }
        out.classes.clone_from(&raw.classes);
        out.values.clone_from(&raw.values);
        (out.len, out.shape) = (raw.len, raw.shape);
        Ok(out.len)
    }

    /// Forward + backward of the micro-batch in [`Loop::batch`]; returns its loss and the
    /// gradients of its parts, each already scaled by its share of the batch (their sum is the
    /// batch's gradient).
    /// With `session`, each gradient goes to it as soon as backward has it final; backward
    /// starts from the loss times `loss_scale` (fp16's, [`crate::scaler`]; the loss returned is
    /// not scaled).
    pub(super) fn forward_backward(
        &self,
        net: &Network,
        session: Option<&Session>,
        loss_scale: f32,
    ) -> Result<(f32, Vec<GradStore>)> {
        let len = self.batch.len;
        let ranges = batch_parts::part_ranges(len, self.parts);
        let parts = ranges.len();
        if let [all] = ranges.as_slice() {
            let hook = Hook {
                session,
                part: 0,
                parts,
                loss_scale,
            };
            let (loss, grads) = part_loss_and_grads(net, self.batch.rows(all.clone()), len, hook)?;
            return Ok((loss, vec![grads]));
        }
        let batch = &self.batch;
        // One part per thread of the pool, each with its kernels unsplit; results in part order,
        // so the gradients are summed in the same order on every run.
        let parts: Vec<Result<(f32, GradStore)>> = ranges
            .into_par_iter()
            .enumerate()
            .map(|(part, rows)| {
                let hook = Hook {
                    session,
                    part,
                    parts,
                    loss_scale,
                };
                serially(|| part_loss_and_grads(net, batch.rows(rows), len, hook))
            })
            .collect();
        let mut loss = 0f32;
        let mut grads = Vec::with_capacity(parts.len());
        for part in parts {
            let (l, g) = part?;
            loss += l;
            grads.push(g);
        }
        Ok((loss, grads))
    }
}

/// The batches of `indices` from `ds`, `batch_size` at a time, filled ahead by `workers`
/// threads where the data set is costly (two batches per worker, PyTorch's `prefetch_factor`).
pub(super) fn loader(
    ds: &SharedDataset,
    indices: Vec<usize>,
    batch_size: usize,
    workers: usize,
) -> Loader {
    Loader::new(ds.clone(), indices, batch_size, workers, 2 * workers.max(1))
}

/// Training loss and gradients of `part` of a batch of `batch_len` samples, both scaled by the
/// part's share of the batch (nothing scaled when the part is the whole batch).
fn part_loss_and_grads(
    net: &Network,
    part: BatchRows,
    batch_len: usize,
    hook: Hook<'_, '_>,
) -> Result<(f32, GradStore)> {
    // Backward in the forward pass's precision, on this part's thread.
    let _precision = net.autocast()?;
    let (loss, ..) = batch_loss(net, part, true)?;
    if part.len == batch_len {
        let grads = hook.backward(&loss)?;
        return Ok((loss.to_scalar::<f32>()?, grads));
    }
    let share = part.len as f64 / batch_len as f64;
    let grads = hook.backward(&(&loss * share)?)?;
    Ok((loss.to_scalar::<f32>()? * share as f32, grads))
}

/// The loss of one batch in evaluation or training mode, and its outputs and targets.
fn batch_loss(net: &Network, batch: BatchRows, train: bool) -> Result<(Tensor, Tensor, Tensor)> {
    let [c, h, w] = batch.shape;
    let x = Tensor::from_slice(batch.x, (batch.len, c, h, w), &net.device)?;
    let out = net.forward(&x, train)?;
    let y = objective::targets(&batch, &net.device)?;
    Ok((objective::loss(&out, &y)?, out, y))
}

/// Evaluates this rank's shard (every world-th sample from `rank`) and all-reduces
/// (loss sum, correct, count), so the figures do not depend on the world size.
pub(super) fn evaluate(
    net: &Network,
    ds: &SharedDataset,
    rank: usize,
    world: usize,
    batch_size: usize,
    workers: usize,
    comm: &SharedCollective,
) -> Result<Evaluation> {
    let t0 = Instant::now();
    let shard: Vec<usize> = (rank..ds.len()).step_by(world).collect();
    let mut loader = loader(ds, shard.clone(), batch_size, workers);
    let mut batch = Batch::new();
    let (mut loss_sum, mut correct) = (0f64, 0f64);
    let mut sums: Vec<(String, f64)> = Vec::new();
    // Batches of the training size: a forward pass keeps its whole graph (every activation)
    // until its loss is dropped, so a larger evaluation batch raised the peak memory above
    // training's (ResNet-18, 128 test images at once: 1.13 GB against 0.56 GB).
    let mut scored = true;
    while loader.next_into(&mut batch)? {
        let (loss, out, y) = batch_loss(net, batch.rows(0..batch.len), false)?;
        loss_sum += loss.to_scalar::<f32>()? as f64 * batch.len as f64;
        match objective::correct(&out, &y)? {
            Some(c) => correct += c,
            None => scored = false,
        }
        objective::add_sums(&mut sums, objective::metric_sums(&out, &y)?)?;
    }
    // Every rank adds the metrics up in the order of the first rank that has any.
    let names: Vec<String> = sums.iter().map(|s| s.0.clone()).collect();
    let all = with_comm(comm, |c| c.all_gather_bytes(names.join("\n").as_bytes()))?;
    let names: Vec<String> = all
        .iter()
        .find(|b| !b.is_empty())
        .map(|b| {
            String::from_utf8_lossy(b)
                .split('\n')
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let mut totals = vec![
        loss_sum as f32,
        correct as f32,
        shard.len() as f32,
        scored as u8 as f32,
    ];
    for name in &names {
        totals.push(
            sums.iter()
                .find(|s| &s.0 == name)
                .map_or(0.0, |s| s.1 as f32),
        );
    }
    with_comm(comm, |c| c.all_reduce(&mut totals, ReduceOp::Sum))?;
    let n = totals[2] as usize;
    let per_sample = |v: f32| v as f64 / n.max(1) as f64;
    // Accuracy where every rank could score its batches (classes with [B, classes] outputs).
    let all_scored = totals[3] as usize == world;
    Ok(Evaluation {
        loss: per_sample(totals[0]),
        accuracy: (matches!(ds.target(), TargetKind::Classes(_)) && all_scored)
            .then(|| per_sample(totals[1])),
        samples: n,
        samples_per_sec: n as f64 / t0.elapsed().as_secs_f64().max(1e-9),
        metrics: names
            .into_iter()
            .zip(&totals[4..])
            .map(|(k, &v)| (k, per_sample(v)))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::parts::Normalization;

    #[test]
    fn augmentation_pads_with_the_datas_own_black() {
        let text = |data: &str| {
            format!("name = \"a\"\n[model]\nname = \"mnist-cnn\"\n[data]\n{data}\naugment = true\n")
        };
        let spec =
            |data: &str| Spec::parse_at(&text(data), std::path::Path::new("a.toml"), &[]).unwrap();
        let empty: SharedDataset = Arc::new(data::synthetic(
            &synthetic_config(&spec("name = \"synthetic\"")),
            Split::Test,
        ));
        let splits = |record: Option<DataRecord>| Splits {
            train: empty.clone(),
            val: empty.clone(),
            test: empty.clone(),
            record,
        };
        let fill = |s: &Spec, r: Option<DataRecord>| augmenter(s, &splits(r)).unwrap().fill;
        let folder = spec("name = \"image-folder\"\npath = \"p\"");
        let record = DataRecord {
            normalize: Some(Normalization {
                mean: vec![0.5, 0.25],
                std: vec![0.5, 0.5],
                computed: true,
            }),
            ..DataRecord::default()
        };
        assert_eq!(fill(&folder, Some(record)), vec![-1.0, -0.5]);
        assert_eq!(fill(&folder, Some(DataRecord::default())), vec![0.0]);
        assert_eq!(
            fill(&spec("name = \"mnist\"\npath = \"p\""), None),
            vec![-1.0]
        );
        let cifar = spec("name = \"cifar10\"\npath = \"p\"");
        assert_eq!(fill(&cifar, None), Augment::cifar10(1).fill);
        let off = Spec::parse_at(
            &text("name = \"image-folder\"\npath = \"p\"")
                .replace("augment = true", "augment = false"),
            std::path::Path::new("a.toml"),
            &[],
        )
        .unwrap();
        assert!(augmenter(&off, &splits(None)).is_none());
    }
}
