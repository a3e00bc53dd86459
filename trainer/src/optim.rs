//! Optimizers on flat f32 buffers (all parameters concatenated in name order), with PyTorch's
//! update rules: SGD (momentum, dampening 0, weight decay, nesterov), Adam (L2 weight decay) and
//! AdamW (decoupled weight decay). Working on one flat buffer keeps the step free of allocations
//! and makes the state trivially checkpointable.

use std::ops::Range;

use crate::spec::{OptimizerName, Spec};
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
}

impl Optimizer {
    pub fn new(config: OptimizerConfig, len: usize) -> Optimizer {
        let slots = config.slot_names().iter().map(|_| vec![0.0; len]).collect();
        Optimizer {
            config,
            steps: 0,
            slots,
        }
    }

    /// One update of `params` with (already averaged) `grads` at learning rate `lr`.
    pub fn step(&mut self, params: &mut [f32], grads: &[f32], lr: f64) {
        let all = 0..params.len();
        self.step_parts(params, grads, std::slice::from_ref(&all), lr);
    }

    /// One step that updates only the elements in `parts` (of `params`, `grads` and the state
    /// slots): a rank's shard in the sharded DDP step ([`crate::ddp::Ddp::sync_and_step`]). The
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
        for (((p, g), m), v) in params
            .iter_mut()
            .zip(grads)
            .zip(m[0][at.clone()].iter_mut())
            .zip(v[0][at].iter_mut())
        {
            let g = g + l2 * *p;
            *p *= decay;
            *m = b1 * *m + (1.0 - b1) * g;
            *v = b2 * *v + (1.0 - b2) * g * g;
            let denom = v.sqrt() / bc2_sqrt + eps;
            *p -= step_size * *m / denom;
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
