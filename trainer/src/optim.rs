//! Optimizers on flat f32 buffers (all parameters concatenated in name order), with PyTorch's
//! update rules: SGD (momentum, dampening 0, weight decay, nesterov), Adam (L2 weight decay) and
//! AdamW (decoupled weight decay). Working on one flat buffer keeps the step free of allocations
//! and makes the state trivially checkpointable.
//!
//! SGD's and Adam's weight decay apply to every parameter, as in PyTorch without parameter
//! groups. AdamW's applies to tensors of rank ≥ 2 only (matrices, embeddings, convolution
//! kernels; not biases and normalisation weights), as the GPT recipes group it, unless
//! `train.decay_all` ([`Optimizer::from_spec`]). Gradient clipping to a global norm
//! (`train.grad_clip`, [`clip_coef`]) needs the norm over every rank's shard: the DDP steps apply
//! it ([`crate::step::ddp::Ddp::sync_and_step`], [`crate::step::device`]).

use std::ops::Range;

use crate::scaler::{self, LossScaler};
use crate::spec::{OptimizerName, Precision, Spec};
use crate::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OptimizerConfig {
    Sgd {
        momentum: f64,
        nesterov: bool,
        weight_decay: f64,
    },
    Adam {
        beta1: f64,
        beta2: f64,
        eps: f64,
        weight_decay: f64,
    },
    AdamW {
        beta1: f64,
        beta2: f64,
        eps: f64,
        weight_decay: f64,
    },
}

impl OptimizerConfig {
    pub fn from_spec(spec: &Spec) -> OptimizerConfig {
        let t = &spec.train;
        let wd = spec.weight_decay();
        let [beta1, beta2] = t.betas;
        match t.optimizer {
            OptimizerName::Sgd => OptimizerConfig::Sgd {
                momentum: t.momentum,
                nesterov: t.nesterov,
                weight_decay: wd,
            },
            OptimizerName::Adam => OptimizerConfig::Adam {
                beta1,
                beta2,
                eps: t.eps,
                weight_decay: wd,
            },
            OptimizerName::Adamw => OptimizerConfig::AdamW {
                beta1,
                beta2,
                eps: t.eps,
                weight_decay: wd,
            },
        }
    }

    /// Names of the per-parameter state slots, each as long as the flat parameter buffer.
    pub fn slot_names(&self) -> &'static [&'static str] {
        match self {
            OptimizerConfig::Sgd { momentum, .. } if *momentum != 0.0 => &["momentum_buffer"],
            OptimizerConfig::Sgd { .. } => &[],
            OptimizerConfig::Adam { .. } | OptimizerConfig::AdamW { .. } => {
                &["exp_avg", "exp_avg_sq"]
            }
        }
    }
}

pub struct Optimizer {
    pub config: OptimizerConfig,
    /// Number of steps taken (Adam's bias correction uses it).
    pub steps: u64,
    /// One flat buffer per slot of [`OptimizerConfig::slot_names`].
    pub slots: Vec<Vec<f32>>,
    /// The global L2 norm that the DDP step clips the averaged gradients to before each update
    /// (`train.grad_clip`); `None`: no clipping.
    pub grad_clip: Option<f64>,
    /// fp16's dynamic loss scale (`train.precision = "fp16"`): the DDP steps divide the averaged
    /// gradients by it and skip the steps whose gradients are not finite; `None`: no scaling.
    pub scaler: Option<LossScaler>,
    /// AdamW: the elements its decoupled weight decay applies to, sorted, disjoint and not
    /// adjacent; `None`: all of them.
    decay_only: Option<Vec<Range<usize>>>,
}

impl Optimizer {
    /// An optimizer over `len` elements that decays all of them and clips nothing.
    pub fn new(config: OptimizerConfig, len: usize) -> Optimizer {
        let slots = config.slot_names().iter().map(|_| vec![0.0; len]).collect();
        Optimizer {
            config,
            steps: 0,
            slots,
            grad_clip: None,
            scaler: None,
            decay_only: None,
        }
    }

    /// The optimizer `spec` asks for, over parameters of `shapes` (in the flat buffers' order):
    /// AdamW decays the tensors of rank ≥ 2 only unless `train.decay_all`; gradients are clipped
    /// to `train.grad_clip`; fp16 (`train.precision`) scales the loss dynamically.
    pub fn from_spec<'a>(spec: &Spec, shapes: impl IntoIterator<Item = &'a [usize]>) -> Optimizer {
        let config = OptimizerConfig::from_spec(spec);
        let shapes: Vec<&[usize]> = shapes.into_iter().collect();
        let len = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
        let mut opt = Optimizer::new(config, len);
        opt.grad_clip = spec.train.grad_clip;
        if spec.train.precision == Precision::Fp16 {
            opt.scaler = Some(LossScaler::new(
                spec.train.loss_scale.unwrap_or(scaler::INIT_SCALE),
                spec.train
                    .loss_scale_growth_every
                    .unwrap_or(scaler::GROWTH_EVERY),
            ));
        }
        if matches!(config, OptimizerConfig::AdamW { .. }) && !spec.train.decay_all {
            opt = opt.decaying_only(matrix_ranges(shapes));
        }
        opt
    }

    /// This optimizer with AdamW's weight decay on the elements of `ranges` only (sorted and
    /// disjoint).
    pub fn decaying_only(mut self, ranges: Vec<Range<usize>>) -> Optimizer {
        let mut merged: Vec<Range<usize>> = Vec::with_capacity(ranges.len());
        for r in ranges.into_iter().filter(|r| !r.is_empty()) {
            match merged.last_mut() {
                Some(last) if last.end == r.start => last.end = r.end,
                Some(last) => {
                    assert!(last.end < r.start, "decay ranges out of order: {r:?}");
                    merged.push(r);
                }
                None => merged.push(r),
            }
        }
        self.decay_only = Some(merged);
        self
    }

    /// The elements AdamW's weight decay applies to; `None`: all of them.
    pub fn decaying(&self) -> Option<&[Range<usize>]> {
        self.decay_only.as_deref()
    }

    /// One update of `params` with (already averaged) `grads` at learning rate `lr`.
    pub fn step(&mut self, params: &mut [f32], grads: &[f32], lr: f64) {
        let all = 0..params.len();
        self.step_parts(params, grads, std::slice::from_ref(&all), lr);
    }

    /// One step that updates only the elements in `parts` (of `params`, `grads` and the state
    /// slots): a rank's shard in the sharded DDP step ([`crate::step::ddp::Ddp::sync_and_step`]). The
    /// other elements, state included, are left as they are; each element's update is the one
    /// [`Optimizer::step`] makes, bit for bit.
    pub fn step_parts(
        &mut self,
        params: &mut [f32],
        grads: &[f32],
        parts: &[Range<usize>],
        lr: f64,
    ) {
        assert_eq!(
            params.len(),
            grads.len(),
            "optimizer: params and grads differ in length"
        );
        self.begin_step();
        for part in parts {
            self.update(
                &mut params[part.clone()],
                &grads[part.clone()],
                part.clone(),
                lr,
            );
        }
    }

    /// Counts a step whose elements then come piece by piece through [`Optimizer::update`] (the
    /// DDP step in shared buffers hands over each block as soon as it is reduced).
    pub fn begin_step(&mut self) {
        self.steps += 1;
    }

    /// Updates `params` from `grads` (both the elements `at` of the flat buffers, as is the state
    /// the slots keep for them) in step `self.steps`: after [`Optimizer::begin_step`], the
    /// update [`Optimizer::step`] makes there, bit for bit.
    pub fn update(&mut self, params: &mut [f32], grads: &[f32], at: Range<usize>, lr: f64) {
        assert!(
            params.len() == at.len() && grads.len() == at.len(),
            "optimizer: {} params and {} grads for elements {at:?}",
            params.len(),
            grads.len()
        );
        match self.config {
            OptimizerConfig::Sgd {
                momentum,
                nesterov,
                weight_decay,
            } => {
                let (lr, mom, wd) = (lr as f32, momentum as f32, weight_decay as f32);
                if self.slots.is_empty() {
                    for (p, g) in params.iter_mut().zip(grads) {
                        *p -= lr * (g + wd * *p);
                    }
                    return;
                }
                let first = self.steps == 1;
                let buf = &mut self.slots[0][at];
                for ((p, g), b) in params.iter_mut().zip(grads).zip(buf.iter_mut()) {
                    let d = g + wd * *p;
                    *b = if first { d } else { mom * *b + d };
                    let upd = if nesterov { d + mom * *b } else { *b };
                    *p -= lr * upd;
                }
            }
            OptimizerConfig::Adam {
                beta1,
                beta2,
                eps,
                weight_decay,
            }
            | OptimizerConfig::AdamW {
                beta1,
                beta2,
                eps,
                weight_decay,
            } => {
                let decoupled = matches!(self.config, OptimizerConfig::AdamW { .. });
                let hyper = [beta1, beta2, eps, weight_decay];
                self.adam(params, grads, at, lr, hyper, decoupled)
            }
        }
    }

    /// Adam (`decoupled`: AdamW) on elements `at`; `hyper` is beta1, beta2, eps, weight decay.
    fn adam(
        &mut self,
        params: &mut [f32],
        grads: &[f32],
        at: Range<usize>,
        lr: f64,
        hyper: [f64; 4],
        decoupled: bool,
    ) {
        let [b1, b2, eps, wd] = hyper;
        let t = self.steps as i32;
        let bc1 = 1.0 - b1.powi(t);
        let bc2 = 1.0 - b2.powi(t);
        let step_size = (lr / bc1) as f32;
        let bc2_sqrt = bc2.sqrt() as f32;
        let (b1, b2, eps, wd) = (b1 as f32, b2 as f32, eps as f32, wd as f32);
        let decay = if decoupled { 1.0 - lr as f32 * wd } else { 1.0 };
        let l2 = if decoupled { 0.0 } else { wd };
        let (m, v) = self.slots.split_at_mut(1);
        let (m, v) = (&mut m[0][at.clone()], &mut v[0][at.clone()]);
        // Runs of elements with and without the decoupled decay (all with it unless masked).
        let mut i = at.start;
        while i < at.end {
            let (end, decayed) = match &self.decay_only {
                Some(mask) if decoupled => decay_run(mask, i, at.end),
                _ => (at.end, true),
            };
            let run = i - at.start..end - at.start;
            let decay = if decayed { decay } else { 1.0 };
            for (((p, g), m), v) in params[run.clone()]
                .iter_mut()
                .zip(&grads[run.clone()])
                .zip(m[run.clone()].iter_mut())
                .zip(v[run].iter_mut())
            {
                let g = g + l2 * *p;
                *p *= decay;
                *m = b1 * *m + (1.0 - b1) * g;
                *v = b2 * *v + (1.0 - b2) * g * g;
                let denom = v.sqrt() / bc2_sqrt + eps;
                *p -= step_size * *m / denom;
            }
            i = end;
        }
    }

    /// Restores state saved from an optimizer of the same configuration and size.
    pub fn restore(
        &mut self,
        steps: u64,
        slots: Vec<Vec<f32>>,
        source: &std::path::Path,
    ) -> Result<()> {
        let want = self.config.slot_names().len();
        let len = self.slots.first().map(Vec::len);
        if slots.len() != want || slots.iter().any(|s| Some(s.len()) != len) {
            return Err(Error::Checkpoint {
                path: source.to_path_buf(),
                msg: format!(
                    "optimizer state has {} slot(s) of lengths {:?}, this optimizer needs {want} of length {:?}",
                    slots.len(),
                    slots.iter().map(Vec::len).collect::<Vec<_>>(),
                    len
                ),
            });
        }
        self.steps = steps;
        self.slots = slots;
        Ok(())
    }
}

/// From element `i`, the end (at most `end`) of the run of elements that are all in `mask` or
/// all outside it, and whether they are in it.
fn decay_run(mask: &[Range<usize>], i: usize, end: usize) -> (usize, bool) {
    let next = mask.partition_point(|r| r.end <= i);
    match mask.get(next) {
        Some(r) if r.start <= i => (r.end.min(end), true),
        Some(r) => (r.start.min(end), false),
        None => (end, false),
    }
}

/// The flat ranges of the tensors of rank ≥ 2 among tensors of `shapes` laid end to end.
pub fn matrix_ranges<'a>(shapes: impl IntoIterator<Item = &'a [usize]>) -> Vec<Range<usize>> {
    let mut at = 0;
    let mut ranges = Vec::new();
    for shape in shapes {
        let n: usize = shape.iter().product();
        if shape.len() >= 2 {
            ranges.push(at..at + n);
        }
        at += n;
    }
    ranges
}

/// The sum of the squares of `values`, in f64: one rank's part of the squared global norm. Eight
/// independent partial sums, added in order at the end: one running f64 sum is a chain of
/// dependent additions (a sixth of the baby GPT's optimizer step went to it).
pub fn sum_of_squares(values: &[f32]) -> f64 {
    let mut lanes = [0f64; 8];
    let chunks = values.chunks_exact(8);
    let tail: f64 = chunks
        .remainder()
        .iter()
        .map(|&g| g as f64 * g as f64)
        .sum();
    for c in chunks {
        for (l, &g) in lanes.iter_mut().zip(c) {
            *l += g as f64 * g as f64;
        }
    }
    lanes.iter().sum::<f64>() + tail
}

/// PyTorch's `clip_grad_norm_` factor for gradients of global L2 norm `total_norm` clipped to
/// `max_norm`: `max_norm / (total_norm + 1e-6)` where that is below 1, else `None` (the
/// gradients stay as they are).
pub fn clip_coef(total_norm: f64, max_norm: f64) -> Option<f32> {
    let coef = max_norm / (total_norm + 1e-6);
    (coef < 1.0).then_some(coef as f32)
}

/// Multiplies `grads` by `coef` (a [`clip_coef`]).
pub fn scale(grads: &mut [f32], coef: f32) {
    grads.iter_mut().for_each(|g| *g *= coef);
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values computed with torch 2.15 (torch.optim.*, one scalar parameter p=1.0, grads
    // 0.5 then -0.25, lr 0.1), see the comment on each case.
    fn run(config: OptimizerConfig) -> Vec<f32> {
        let mut o = Optimizer::new(config, 1);
        let mut p = [1.0f32];
        let mut out = vec![];
        for g in [0.5f32, -0.25] {
            o.step(&mut p, &[g], 0.1);
            out.push(p[0]);
        }
        out
    }

    fn close(a: &[f32], b: &[f32]) {
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-6, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn sgd_plain_and_momentum_and_nesterov() {
        close(
            &run(OptimizerConfig::Sgd {
                momentum: 0.0,
                nesterov: false,
                weight_decay: 0.0,
            }),
            &[0.95, 0.975],
        );
        // buf1 = 0.5, p = 0.95; buf2 = 0.9*0.5 - 0.25 = 0.2, p = 0.93
        close(
            &run(OptimizerConfig::Sgd {
                momentum: 0.9,
                nesterov: false,
                weight_decay: 0.0,
            }),
            &[0.95, 0.93],
        );
        // nesterov: upd1 = 0.5 + 0.9*0.5 = 0.95 → 0.905; buf2 = 0.2, upd2 = -0.25 + 0.18 = -0.07 → 0.912
        close(
            &run(OptimizerConfig::Sgd {
                momentum: 0.9,
                nesterov: true,
                weight_decay: 0.0,
            }),
            &[0.905, 0.912],
        );
        // weight decay 0.1: d1 = 0.6 → 0.94; d2 = -0.25 + 0.094 = -0.156 → 0.9556
        close(
            &run(OptimizerConfig::Sgd {
                momentum: 0.0,
                nesterov: false,
                weight_decay: 0.1,
            }),
            &[0.94, 0.9556],
        );
    }

    #[test]
    fn adam_matches_pytorch() {
        // torch.optim.Adam([p], lr=0.1): [0.9000000357627869, 0.8566...]
        let got = run(OptimizerConfig::Adam {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        });
        // step 1: m̂ = g, v̂ = g² → p -= 0.1 * sign(g)
        assert!((got[0] - 0.9).abs() < 1e-6, "{got:?}");
        // step 2 by hand: m = 0.045 - 0.025 = 0.02; v = 0.999*0.00025 + 0.001*0.0625 = 0.00031225
        let m = 0.02f64 / (1.0 - 0.81);
        let v = 0.000_312_25f64 / (1.0 - 0.999f64.powi(2));
        let want = 0.9 - 0.1 * m / (v.sqrt() + 1e-8);
        assert!((got[1] as f64 - want).abs() < 1e-6, "{got:?} vs {want}");
    }

    #[test]
    fn adamw_decays_decoupled() {
        let got = run(OptimizerConfig::AdamW {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.5,
        });
        // step 1: p = 1 * (1 - 0.1*0.5) - 0.1 = 0.85
        assert!((got[0] - 0.85).abs() < 1e-6, "{got:?}");
    }

    #[test]
    fn parts_update_only_their_elements_bit_for_bit() {
        let configs = [
            OptimizerConfig::Sgd {
                momentum: 0.0,
                nesterov: false,
                weight_decay: 0.01,
            },
            OptimizerConfig::Sgd {
                momentum: 0.9,
                nesterov: true,
                weight_decay: 0.01,
            },
            OptimizerConfig::Adam {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.01,
            },
            OptimizerConfig::AdamW {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.01,
            },
        ];
        let n = 10;
        let grads = |k: usize| -> Vec<f32> {
            (0..n)
                .map(|i| ((i * 7 + k * 3) % 11) as f32 * 0.1 - 0.5)
                .collect()
        };
        for config in configs {
            let mut whole = Optimizer::new(config, n);
            let mut sharded = Optimizer::new(config, n);
            let mut p_whole: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 1.0).collect();
            let mut p_sharded = p_whole.clone();
            // Two ranks' shards (0..4 and 4..10) in turn, the way each rank updates its own.
            let shards = [0..4, 4..n];
            for k in 0..3 {
                let g = grads(k);
                whole.step(&mut p_whole, &g, 0.1);
                let before = p_sharded.clone();
                sharded.step_parts(&mut p_sharded, &g, std::slice::from_ref(&shards[0]), 0.1);
                assert_eq!(p_sharded[4..], before[4..], "{config:?}: outside the part");
                sharded.steps -= 1;
                sharded.step_parts(&mut p_sharded, &g, std::slice::from_ref(&shards[1]), 0.1);
                assert!(p_sharded == p_whole, "{config:?}, step {k}");
                assert!(sharded.slots == whole.slots, "{config:?}, step {k}");
            }
            assert_eq!(sharded.steps, 3);
        }
    }

    /// An AdamW spec, with `extra` overrides.
    fn adamw_spec(extra: &[&str]) -> Spec {
        let text = "name='t'\n[model]\nname='mlp'\n[data]\nname='synthetic'\n[train]\noptimizer='adamw'\nlr=0.1\nweight_decay=0.5\n";
        let o: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Spec::parse(text, std::path::Path::new("t.toml"), &o).unwrap()
    }

    /// A bias, a matrix, a LayerNorm weight, an embedding and a conv kernel, end to end.
    const SHAPES: [&[usize]; 5] = [&[3], &[2, 3], &[3], &[4, 2], &[1, 1, 2, 1]];

    /// The elements of [`SHAPES`] that are matrices (rank ≥ 2).
    fn is_matrix(i: usize) -> bool {
        (3..9).contains(&i) || (12..22).contains(&i)
    }

    #[test]
    fn adamw_decays_matrices_only_also_where_a_shard_cuts_them() {
        let opt = Optimizer::from_spec(&adamw_spec(&[]), SHAPES);
        // The matrix, then the embedding and the kernel (adjacent: one range).
        assert_eq!(opt.decaying(), Some(&[3..9, 12..22][..]));
        let n = 22;
        assert_eq!(opt.slots[0].len(), n);
        let start: Vec<f32> = (0..n).map(|i| 1.0 + i as f32 * 0.125).collect();
        // Zero gradients: Adam's step is 0 / (0 + eps) = 0, so only the decay moves anything.
        let mut whole = Optimizer::from_spec(&adamw_spec(&[]), SHAPES);
        let mut p = start.clone();
        whole.step(&mut p, &[0.0; 22], 0.1);
        let decay = 1.0 - 0.1f32 * 0.5;
        for i in 0..n {
            let want = if is_matrix(i) {
                start[i] * decay
            } else {
                start[i]
            };
            assert_eq!(p[i], want, "element {i}");
        }
        // With gradients, shards cutting the matrix (at 5) and the bias after it (at 10) update
        // their elements as the whole step does, bit for bit.
        let mut sharded = Optimizer::from_spec(&adamw_spec(&[]), SHAPES);
        let mut q = start.clone();
        let mut p = start.clone();
        let mut whole = Optimizer::from_spec(&adamw_spec(&[]), SHAPES);
        for k in 0..3 {
            let g: Vec<f32> = (0..n)
                .map(|i| ((i * 5 + k) % 7) as f32 * 0.1 - 0.3)
                .collect();
            whole.step(&mut p, &g, 0.1);
            sharded.step_parts(&mut q, &g, &[0..5, 5..10, 10..n], 0.1);
            assert!(p == q, "step {k}");
        }
        // train.decay_all: every element decays, wherever the shards cut.
        let mut all = Optimizer::from_spec(&adamw_spec(&["train.decay_all=true"]), SHAPES);
        assert_eq!(all.decaying(), None);
        let mut p = start.clone();
        all.step_parts(&mut p, &[0.0; 22], &[0..5, 5..n], 0.1);
        for i in 0..n {
            assert_eq!(p[i], start[i] * decay, "element {i}");
        }
    }

    #[test]
    fn sgd_and_adam_decay_every_tensor() {
        for name in ["sgd", "adam"] {
            let spec = adamw_spec(&[&format!("train.optimizer=\"{name}\"")]);
            let mut opt = Optimizer::from_spec(&spec, SHAPES);
            assert_eq!(opt.decaying(), None, "{name}");
            // With zero gradients, the L2 term alone: every element moves.
            let mut p = vec![1.0f32; 22];
            opt.step(&mut p, &[0.0; 22], 0.1);
            assert!(p.iter().all(|&x| x < 1.0), "{name}: {p:?}");
        }
    }

    #[test]
    fn from_spec_takes_grad_clip() {
        assert_eq!(
            Optimizer::from_spec(&adamw_spec(&[]), SHAPES).grad_clip,
            None
        );
        let opt = Optimizer::from_spec(&adamw_spec(&["train.grad_clip=1.0"]), SHAPES);
        assert_eq!(opt.grad_clip, Some(1.0));
    }

    #[test]
    fn clipping_matches_torch_clip_grad_norm() {
        // torch 2.15: a = [[0.5, -1.25], [2.0, 0.125]], b = [3.0, -0.75, 1.5] as .grad,
        // torch.nn.utils.clip_grad_norm_([a, b], 1.0) returns 4.200074195861816 and leaves
        // these gradients (f32, printed as Python floats).
        let torch = [
            0.11904548853635788f64,
            -0.2976137101650238,
            0.4761819541454315,
            0.02976137213408947,
            0.7142729163169861,
            -0.17856822907924652,
            0.35713645815849304,
        ];
        let mut g = [0.5f32, -1.25, 2.0, 0.125, 3.0, -0.75, 1.5];
        // One part per rank, summed: the squared global norm.
        let norm = (sum_of_squares(&g[..3]) + sum_of_squares(&g[3..])).sqrt();
        assert!((norm - 4.200074195861816).abs() < 1e-6, "{norm}");
        let coef = clip_coef(norm, 1.0).unwrap();
        scale(&mut g, coef);
        for (&ours, theirs) in g.iter().zip(torch) {
            assert!(
                (ours as f64 - theirs).abs() <= f32::EPSILON as f64 * theirs.abs(),
                "{g:?} vs {torch:?}"
            );
        }
        // Within the bound (10.0 here; and exactly at it) nothing changes.
        assert_eq!(clip_coef(norm, 10.0), None);
        assert_eq!(clip_coef(1.0, 1.0 + 1e-6), None);
    }

    #[test]
    fn restore_checks_shape() {
        let mut o = Optimizer::new(
            OptimizerConfig::Adam {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
            },
            3,
        );
        let e = o
            .restore(5, vec![vec![0.0; 3]], std::path::Path::new("s"))
            .unwrap_err();
        assert!(e.to_string().contains("1 slot(s)"), "{e}");
        o.restore(
            5,
            vec![vec![1.0; 3], vec![2.0; 3]],
            std::path::Path::new("s"),
        )
        .unwrap();
        assert_eq!(o.steps, 5);
    }
}
