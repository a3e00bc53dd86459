//! Learning-rate schedules: constant, step (StepLR per epoch), cosine (CosineAnnealingLR per epoch,
//! T_max = epochs), optional linear warm-up per optimizer step, and `lr_scaling = "linear"`.

use crate::spec::{LrScaling, SchedulerKind, Spec};

#[derive(Debug, Clone)]
pub struct Schedule {
    base_lr: f64,
    kind: SchedulerKind,
    step_size: usize,
    gamma: f64,
    min_lr: f64,
    epochs: usize,
    warmup_steps: u64,
}

impl Schedule {
    /// `steps_per_epoch` is the number of optimizer steps per epoch (for the warm-up length).
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
            warmup_steps: (s.warmup_epochs * steps_per_epoch as f64).round() as u64,
        }
    }

    /// The learning rate for the optimizer step `global_step` (0-based) in epoch `epoch` (0-based).
    pub fn lr(&self, epoch: usize, global_step: u64) -> f64 {
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
}
