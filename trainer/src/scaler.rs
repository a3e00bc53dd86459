//! Dynamic loss scaling for `train.precision = "fp16"`, as `torch.amp.GradScaler`: the loss is
//! multiplied by the scale before backward, so that small gradients stay above IEEE half's
//! smallest values where the matrix products round them; the averaged gradients are divided by
//! it again before the optimizer. A step whose gradients are not all finite is skipped (the
//! optimizer neither updates nor counts it) and the scale halves; after `growth_every` finite
//! steps in a row it doubles.
//!
//! This file is the policy only ([`LossScaler::update`]: what the scale becomes after a step);
//! the DDP steps decide a step's finiteness from every rank's gradients together
//! ([`crate::step::ddp`]), so that every replica skips the same steps. The state goes into
//! checkpoints ([`crate::checkpoint`]): a resumed run goes on with the same scale.

/// PyTorch's `GradScaler` defaults.
pub const INIT_SCALE: f64 = 65536.0;
pub const GROWTH_EVERY: u64 = 2000;
const GROWTH_FACTOR: f32 = 2.0;
const BACKOFF_FACTOR: f32 = 0.5;

/// The loss scale and what it has seen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossScaler {
    /// What the loss is multiplied by before backward.
    pub scale: f32,
    /// Finite steps since the scale last changed (`GradScaler`'s growth tracker).
    pub finite_run: u64,
    /// Steps skipped in the run so far (non-finite gradients).
    pub skipped: u64,
    /// Finite steps in a row after which the scale doubles.
    pub growth_every: u64,
}

/// What a step did, as the scaler saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The gradients were finite: the optimizer stepped.
    Stepped,
    /// Some gradient was infinite or NaN on some rank: no update, the scale halved.
    Skipped,
}

impl LossScaler {
    /// A scaler starting at `scale`, doubling after `growth_every` finite steps.
    pub fn new(scale: f64, growth_every: u64) -> LossScaler {
        LossScaler {
            scale: scale as f32,
            finite_run: 0,
            skipped: 0,
            growth_every: growth_every.max(1),
        }
    }

    /// What the averaged gradients are multiplied by before the optimizer (`1 / scale` in f32,
    /// as `GradScaler.unscale_`).
    pub fn inverse(&self) -> f32 {
        (1.0 / self.scale as f64) as f32
    }

    /// After a step whose gradients were `finite` (every rank's, as one): whether it is applied,
    /// and the scale for the next one (`GradScaler.update`).
    pub fn update(&mut self, finite: bool) -> Verdict {
        if !finite {
            self.scale *= BACKOFF_FACTOR;
            self.finite_run = 0;
            self.skipped += 1;
            return Verdict::Skipped;
        }
        self.finite_run += 1;
        if self.finite_run == self.growth_every {
            let grown = self.scale * GROWTH_FACTOR;
            // GradScaler keeps the scale where doubling would overflow f32.
            if grown.is_finite() {
                self.scale = grown;
            }
            self.finite_run = 0;
        }
        Verdict::Stepped
    }

    /// As a checkpoint's metadata and the resume header write it:
    /// `scale:finite_run:skipped:growth_every` (the scale exactly, as Rust prints an f32).
    pub fn encode(&self) -> String {
        format!(
            "{}:{}:{}:{}",
            self.scale, self.finite_run, self.skipped, self.growth_every
        )
    }

    /// The scaler [`LossScaler::encode`] wrote; `None` if `text` is not one.
    pub fn decode(text: &str) -> Option<LossScaler> {
        let f: Vec<&str> = text.split(':').collect();
        let [scale, finite_run, skipped, growth_every] = f[..] else {
            return None;
        };
        let s = LossScaler {
            scale: scale.parse().ok()?,
            finite_run: finite_run.parse().ok()?,
            skipped: skipped.parse().ok()?,
            growth_every: growth_every.parse().ok()?,
        };
        (s.scale.is_finite() && s.scale > 0.0 && s.growth_every > 0).then_some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_exactly_and_refuses_what_it_did_not_write() {
        let mut s = LossScaler::new(3.0e-5, 7);
        s.update(false);
        s.update(true);
        assert_eq!(LossScaler::decode(&s.encode()), Some(s));
        for bad in [
            "",
            "1:2:3",
            "x:0:0:1",
            "0:0:0:1",
            "inf:0:0:1",
            "1:0:0:0",
            "1:0:0:1:5",
        ] {
            assert_eq!(LossScaler::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn halves_on_overflow_and_doubles_after_a_run_of_finite_steps() {
        let mut s = LossScaler::new(INIT_SCALE, 3);
        assert_eq!(s.inverse(), 1.0 / 65536.0);
        assert_eq!(s.update(false), Verdict::Skipped);
        assert_eq!((s.scale, s.skipped), (32768.0, 1));
        for _ in 0..2 {
            assert_eq!(s.update(true), Verdict::Stepped);
        }
        assert_eq!(s.scale, 32768.0, "two finite steps of three: unchanged");
        // A skip restarts the run.
        s.update(false);
        for _ in 0..2 {
            s.update(true);
        }
        assert_eq!((s.scale, s.finite_run), (16384.0, 2));
        s.update(true);
        assert_eq!((s.scale, s.finite_run, s.skipped), (32768.0, 0, 2));
    }

    #[test]
    fn matches_torch_grad_scaler_defaults() {
        // torch.amp.GradScaler(): init_scale 65536, growth 2.0 every 2000, backoff 0.5.
        let mut s = LossScaler::new(INIT_SCALE, GROWTH_EVERY);
        for _ in 0..1999 {
            s.update(true);
        }
        assert_eq!(s.scale, 65536.0);
        s.update(true);
        assert_eq!(s.scale, 131072.0);
    }

    #[test]
    fn never_grows_into_infinity() {
        let mut s = LossScaler::new(f32::MAX as f64, 1);
        s.update(true);
        assert_eq!(s.scale, f32::MAX);
    }
}
