//! Learning-rate schedules: constant, step (StepLR per epoch), cosine (per optimizer step over
//! `train.steps` where that is set, else CosineAnnealingLR per epoch with T_max = epochs),
//! optional linear warm-up per optimizer step, and `lr_scaling = "linear"`.

use crate::spec::{LrScaling, SchedulerKind, Spec};

#[derive(Debug, Clone)]
pub struct Schedule {
    base_lr: f64,
    kind: SchedulerKind,
    step_size: usize,
    gamma: f64,
    min_lr: f64,
    epochs: usize,
    /// `train.steps` where the cosine decays per step over them.
    cosine_steps: Option<u64>,
    warmup_steps: u64,
}

impl Schedule {
    /// `steps_per_epoch` is the number of optimizer steps per epoch (for a warm-up given in
    /// epochs).
    pub fn new(spec: &Spec, world_size: usize, steps_per_epoch: u64) -> Schedule {
        let s = &spec.train.scheduler;
        let scale = match spec.train.lr_scaling {
            LrScaling::None => 1.0,
            LrScaling::Linear => world_size as f64,
        };
        Schedule {
            base_lr: spec.train.lr * scale,
            kind: s.kind,
            step_size: s.step_size.max(1),
            gamma: s.gamma,
            min_lr: s.min_lr,
            epochs: spec.train.epochs,
            cosine_steps: spec.train.steps.filter(|_| s.kind == SchedulerKind::Cosine),
            warmup_steps: s
                .warmup_steps
                .unwrap_or((s.warmup_epochs * steps_per_epoch as f64).round() as u64),
        }
    }

    /// The learning rate for the optimizer step `global_step` (0-based) in epoch `epoch` (0-based).
    pub fn lr(&self, epoch: usize, global_step: u64) -> f64 {
        if let Some(total) = self.cosine_steps {
            return self.cosine_per_step(global_step, total);
        }
        let decayed = match self.kind {
            SchedulerKind::Constant | SchedulerKind::LinearWarmup => self.base_lr,
            SchedulerKind::Step => self.base_lr * self.gamma.powi((epoch / self.step_size) as i32),
            SchedulerKind::Cosine => {
                let t = epoch.min(self.epochs) as f64 / self.epochs.max(1) as f64;
                self.min_lr
                    + (self.base_lr - self.min_lr) * (1.0 + (std::f64::consts::PI * t).cos()) / 2.0
            }
        };
        if global_step < self.warmup_steps {
            decayed * (global_step + 1) as f64 / self.warmup_steps as f64
        } else {
            decayed
        }
    }

    /// The per-step cosine of the GPT recipes (nanoGPT's `get_lr`): a linear warm-up to the base
    /// rate over `warmup_steps`, then a cosine down to `min_lr` at step `total`, `min_lr` after.
    fn cosine_per_step(&self, step: u64, total: u64) -> f64 {
        let warmup = self.warmup_steps;
        if step < warmup {
            return self.base_lr * (step + 1) as f64 / warmup as f64;
        }
        let t = ((step - warmup) as f64 / (total - warmup).max(1) as f64).min(1.0);
        self.min_lr + 0.5 * (1.0 + (std::f64::consts::PI * t).cos()) * (self.base_lr - self.min_lr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn spec(extra: &[&str]) -> Spec {
        let text =
            "name='t'\n[model]\nname='mlp'\n[data]\nname='synthetic'\n[train]\nepochs=4\nlr=0.1\n";
        let o: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Spec::parse(text, Path::new("t.toml"), &o).unwrap()
    }

    #[test]
    fn step_lr_per_epoch_with_linear_scaling() {
        let s = Schedule::new(
            &spec(&[
                "train.scheduler.kind=\"step\"",
                "train.scheduler.gamma=0.7",
                "train.lr_scaling=\"linear\"",
            ]),
            2,
            10,
        );
        let lrs: Vec<f64> = (0..3).map(|e| s.lr(e, 100)).collect();
        for (a, b) in lrs.iter().zip([0.2, 0.14, 0.098]) {
            assert!((a - b).abs() < 1e-12, "{lrs:?}");
        }
    }

    #[test]
    fn cosine_and_warmup() {
        let s = Schedule::new(
            &spec(&[
                "train.scheduler.kind=\"cosine\"",
                "train.scheduler.warmup_epochs=0.5",
            ]),
            1,
            10,
        );
        assert!((s.lr(0, 0) - 0.1 / 5.0).abs() < 1e-12);
        assert!((s.lr(0, 4) - 0.1).abs() < 1e-12);
        assert!((s.lr(2, 50) - 0.05).abs() < 1e-12);
        assert!(s.lr(4, 80).abs() < 1e-12);
    }

    /// Each `(step, lr)` against the schedule; the epoch must not matter.
    fn pin(s: &Schedule, want: &[(u64, f64)]) {
        for &(step, lr) in want {
            for epoch in [0, 3, 100] {
                let got = s.lr(epoch, step);
                assert!(
                    (got - lr).abs() <= 1e-15 * lr.max(1e-3),
                    "step {step}: {got} vs {lr}"
                );
            }
        }
    }

    #[test]
    fn cosine_per_step_matches_the_gpt_recipe() {
        // The baby GPT: lr 1e-3, warm-up 100, cosine to 1e-4 at step 2000. The values are
        // torch_gpt.py's lr_at(step) (Python floats), printed with repr().
        let s = Schedule::new(
            &spec(&[
                "train.lr=1e-3",
                "train.steps=2000",
                "train.epochs=1",
                "train.scheduler.kind=\"cosine\"",
                "train.scheduler.warmup_steps=100",
                "train.scheduler.min_lr=1e-4",
            ]),
            2,
            10,
        );
        pin(
            &s,
            &[
                (0, 1e-05),
                (1, 2e-05),
                (49, 0.0005),
                (99, 0.001),
                (100, 0.001),
                (101, 0.0009999993848585915),
                (500, 0.0009051132292283772),
                (1000, 0.0005871607054625496),
                (1050, 0.00055),
                (1999, 0.00010000061514140841),
                (2000, 0.0001),
                (2500, 0.0001),
            ],
        );
    }

    #[test]
    fn cosine_per_step_without_warmup_and_with_warmup_to_the_end() {
        // lr_at with lr 0.1, min_lr 0, warmup 0, iters 10.
        let s = Schedule::new(
            &spec(&[
                "train.steps=10",
                "train.epochs=1",
                "train.scheduler.kind=\"cosine\"",
            ]),
            1,
            3,
        );
        pin(
            &s,
            &[
                (0, 0.1),
                (3, 0.07938926261462366),
                (5, 0.05),
                (9, 0.0024471741852423235),
            ],
        );
        assert_eq!(s.lr(0, 10), 0.0);
        assert_eq!(s.lr(0, 11), 0.0);
        // lr_at with lr 0.1, min_lr 0.01, warmup 10, iters 10: the base rate at step 10, the
        // floor after.
        let s = Schedule::new(
            &spec(&[
                "train.steps=10",
                "train.epochs=1",
                "train.scheduler.kind=\"cosine\"",
                "train.scheduler.warmup_steps=10",
                "train.scheduler.min_lr=0.01",
            ]),
            1,
            3,
        );
        pin(&s, &[(9, 0.1), (10, 0.1), (11, 0.01)]);
    }

    #[test]
    fn steps_leave_the_other_kinds_and_warmup_steps_work_per_epoch_too() {
        // Without train.steps the cosine stays per epoch; warmup_steps counts steps for any kind.
        let s = Schedule::new(
            &spec(&[
                "train.scheduler.kind=\"cosine\"",
                "train.scheduler.warmup_steps=4",
            ]),
            1,
            10,
        );
        assert!((s.lr(0, 0) - 0.1 / 4.0).abs() < 1e-12);
        assert!((s.lr(0, 3) - 0.1).abs() < 1e-12);
        assert!((s.lr(2, 50) - 0.05).abs() < 1e-12);
        // A step schedule ignores train.steps.
        let s = Schedule::new(
            &spec(&[
                "train.steps=10",
                "train.epochs=1",
                "train.scheduler.kind=\"step\"",
            ]),
            1,
            10,
        );
        assert!((s.lr(1, 5) - 0.01).abs() < 1e-15);
    }
}
