//! `[ddp.sync]`: how often the replicas agree, and on what. Every step (DDP: the gradients
//! averaged before each optimizer step, the default), or local steps with a sync every
//! `every` steps: the weights averaged (local SGD, PyTorch's `PostLocalSGDOptimizer`), the
//! change of the weights averaged as a pseudo-gradient for an outer Nesterov step (DiLoCo), or
//! that one fragment of the model at a time, overlapped with the steps after it (Streaming
//! DiLoCo). [`SyncSpec::local`] resolves the keys into what the step runs ([`LocalSync`]).

use serde::{Deserialize, Serialize};

use super::{Backend, Compression, Devices, Precision, Spec};
use crate::Result;

/// `ddp.sync.method`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SyncMethod {
    /// DDP: the gradients all-reduced every step.
    #[default]
    EveryStep,
    /// Local SGD: each replica steps on its own, the weights averaged every `every` steps.
    Average,
    /// DiLoCo: local steps, then the averaged change of the weights is the gradient of an outer
    /// SGD step with Nesterov momentum.
    Diloco,
    /// Streaming DiLoCo: DiLoCo one fragment of the model at a time, each fragment's sync sent
    /// during the `delay` steps after it began.
    Streaming,
}

impl SyncMethod {
    /// As the spec writes it.
    pub fn name(&self) -> &'static str {
        match self {
            SyncMethod::EveryStep => "every_step",
            SyncMethod::Average => "average",
            SyncMethod::Diloco => "diloco",
            SyncMethod::Streaming => "streaming",
        }
    }

    fn has_outer_optimizer(&self) -> bool {
        matches!(self, SyncMethod::Diloco | SyncMethod::Streaming)
    }
}

/// `ddp.sync.encoding`: how a sync's values travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SyncEncoding {
    #[default]
    F32,
    /// bfloat16, added in f32.
    Bf16,
    /// 8-bit integers with an f32 scale per block of values (`dist::quant`).
    Int8,
    /// 4-bit integers with an f32 scale per block of values (`dist::quant`).
    Int4,
}

impl SyncEncoding {
    /// As the spec writes it.
    pub fn name(&self) -> &'static str {
        match self {
            SyncEncoding::F32 => "f32",
            SyncEncoding::Bf16 => "bf16",
            SyncEncoding::Int8 => "int8",
            SyncEncoding::Int4 => "int4",
        }
    }

    /// Whether a value comes back other than it was sent.
    pub fn is_lossy(&self) -> bool {
        *self != SyncEncoding::F32
    }
}

/// `[ddp.sync]` as written: every key but `method` is optional, so that a key that does not
/// apply to the method is refused rather than ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SyncSpec {
    #[serde(default)]
    pub method: SyncMethod,
    /// Inner steps between two syncs (H).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<u64>,
    /// Synchronous (every-step) steps before the local steps begin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_steps: Option<u64>,
    /// The outer optimizer's learning rate (DiLoCo's 0.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outer_lr: Option<f64>,
    /// The outer optimizer's Nesterov momentum (DiLoCo's 0.9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outer_momentum: Option<f64>,
    /// Streaming: how many fragments the model is cut into (at parameter boundaries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fragments: Option<usize>,
    /// Streaming: the steps a fragment's sync travels during before it is applied (tau).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<u64>,
    /// Streaming: how much of its own fragment a replica keeps when the synced one arrives
    /// (alpha; 0 takes the synced fragment whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixing: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<SyncEncoding>,
    /// Each replica adds what the encoding lost to its next sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_feedback: Option<bool>,
}

impl SyncSpec {
    pub fn is_every_step(&self) -> bool {
        *self == SyncSpec::default()
    }

    /// The local steps' sync as the step runs it; `None` for every-step DDP. Call on a checked
    /// spec ([`Spec::check_sync`]).
    pub fn local(&self) -> Option<LocalSync> {
        let outer = self.method.has_outer_optimizer();
        let streaming = self.method == SyncMethod::Streaming;
        Some(LocalSync {
            method: self.method,
            every: match self.method {
                SyncMethod::EveryStep => return None,
                _ => self.every.unwrap_or(1),
            },
            warmup_steps: self.warmup_steps.unwrap_or(0),
            outer_lr: if outer {
                self.outer_lr.unwrap_or(LocalSync::OUTER_LR)
            } else {
                1.0
            },
            outer_momentum: if outer {
                self.outer_momentum.unwrap_or(LocalSync::OUTER_MOMENTUM)
            } else {
                0.0
            },
            fragments: self.fragments.filter(|_| streaming).unwrap_or(1),
            delay: if streaming {
                self.delay.unwrap_or(LocalSync::DELAY)
            } else {
                0
            },
            mixing: if streaming {
                self.mixing.unwrap_or(LocalSync::MIXING)
            } else {
                0.0
            },
            encoding: self.encoding.unwrap_or_default(),
            error_feedback: self.error_feedback.unwrap_or(false),
        })
    }
}

/// Local steps with a sync every `every` steps, resolved from `[ddp.sync]`. Model averaging is
/// the outer step with learning rate 1 and no momentum; DiLoCo is streaming with one fragment,
/// no delay and no mixing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LocalSync {
    pub method: SyncMethod,
    pub every: u64,
    pub warmup_steps: u64,
    pub outer_lr: f64,
    pub outer_momentum: f64,
    pub fragments: usize,
    pub delay: u64,
    pub mixing: f64,
    pub encoding: SyncEncoding,
    pub error_feedback: bool,
}

impl LocalSync {
    /// DiLoCo's outer learning rate and Nesterov momentum (arXiv 2311.08105).
    pub const OUTER_LR: f64 = 0.7;
    pub const OUTER_MOMENTUM: f64 = 0.9;
    /// Streaming DiLoCo's delay and mixing factor (arXiv 2501.18512).
    pub const DELAY: u64 = 1;
    pub const MIXING: f64 = 0.5;
}

impl Spec {
    /// The rules of `[ddp.sync]`: each key only with a method it applies to and within range,
    /// and none of what needs every step's collectives (fp16's agreed skips, SyncBatchNorm,
    /// gradient compression) or this build runs every step only (the GPU step).
    pub(super) fn check_sync(&self) -> Result<()> {
        let s = &self.ddp.sync;
        let m = s.method;
        let bad = |key: &str, msg: String| Err(self.error(key, msg));
        let set = [
            ("every", s.every.is_some()),
            ("warmup_steps", s.warmup_steps.is_some()),
            ("outer_lr", s.outer_lr.is_some()),
            ("outer_momentum", s.outer_momentum.is_some()),
            ("fragments", s.fragments.is_some()),
            ("delay", s.delay.is_some()),
            ("mixing", s.mixing.is_some()),
            ("encoding", s.encoding.is_some()),
            ("error_feedback", s.error_feedback.is_some()),
        ];
        let applies = |key: &str| match key {
            "outer_lr" | "outer_momentum" => m.has_outer_optimizer(),
            "fragments" | "delay" | "mixing" => m == SyncMethod::Streaming,
            _ => m != SyncMethod::EveryStep,
        };
        if let Some((key, _)) = set.iter().find(|(k, on)| *on && !applies(k)) {
            let which = match *key {
                "outer_lr" | "outer_momentum" => "\"diloco\" or \"streaming\"",
                "fragments" | "delay" | "mixing" => "\"streaming\"",
                _ => "\"average\", \"diloco\" or \"streaming\"",
            };
            return bad(
                &format!("ddp.sync.{key}"),
                format!(
                    "does not apply to ddp.sync.method = \"{}\": it is for {which}; leave it out \
                     or set the method",
                    m.name()
                ),
            );
        }
        if m == SyncMethod::EveryStep {
            return Ok(());
        }
        let Some(every) = s.every else {
            return bad(
                "ddp.sync.every",
                format!(
                    "ddp.sync.method = \"{}\" needs the steps between two syncs (50 is a good \
                     start; DiLoCo's paper uses 500)",
                    m.name()
                ),
            );
        };
        if every == 0 {
            return bad("ddp.sync.every", "must be at least 1 step".into());
        }
        if let Some(lr) = s.outer_lr
            && !(lr.is_finite() && lr > 0.0)
        {
            return bad(
                "ddp.sync.outer_lr",
                format!("must be a positive number, got {lr} (DiLoCo's is 0.7)"),
            );
        }
        if let Some(mu) = s.outer_momentum
            && !(0.0..1.0).contains(&mu)
        {
            return bad(
                "ddp.sync.outer_momentum",
                format!("must be in [0, 1), got {mu} (DiLoCo's is 0.9)"),
            );
        }
        if let Some(mix) = s.mixing
            && !(0.0..=1.0).contains(&mix)
        {
            return bad(
                "ddp.sync.mixing",
                format!("must be in [0, 1], got {mix} (0 takes the synced fragment whole)"),
            );
        }
        if m == SyncMethod::Streaming {
            let Some(f) = s.fragments else {
                return bad(
                    "ddp.sync.fragments",
                    "ddp.sync.method = \"streaming\" needs the number of fragments the model is \
                     synced in (e.g. the number of layers, or 4)"
                        .into(),
                );
            };
            if f == 0 || f as u64 > every {
                return bad(
                    "ddp.sync.fragments",
                    format!(
                        "must be between 1 and ddp.sync.every ({every}): each fragment syncs \
                         once every {every} steps, at its own step; got {f}"
                    ),
                );
            }
            let gap = every / f as u64;
            let delay = s.delay.unwrap_or(LocalSync::DELAY);
            if delay >= gap {
                return bad(
                    "ddp.sync.delay",
                    format!(
                        "must be below ddp.sync.every / ddp.sync.fragments ({every} / {f} = {gap} \
                         steps): a fragment's sync arrives before the next fragment's begins; got \
                         {delay}"
                    ),
                );
            }
        }
        if s.error_feedback == Some(true) && !s.encoding.unwrap_or_default().is_lossy() {
            return bad(
                "ddp.sync.error_feedback",
                "adds back what a lossy encoding lost: set ddp.sync.encoding to \"bf16\", \
                 \"int8\" or \"int4\" with it"
                    .into(),
            );
        }
        let method = format!("ddp.sync.method = \"{}\"", m.name());
        if self.train.precision == Precision::Fp16 {
            return bad(
                "train.precision",
                format!(
                    "\"fp16\" skips a step on every replica at once, which {method}'s local \
                     steps do not agree on: use \"bf16\" (no loss scale needed) or \"f32\""
                ),
            );
        }
        if self.ddp.sync_batchnorm {
            return bad(
                "ddp.sync_batchnorm",
                format!(
                    "reduces batch statistics across the replicas every step, which {method} \
                     does not talk in: set ddp.sync_batchnorm = false"
                ),
            );
        }
        if self.ddp.compression != Compression::None {
            return bad(
                "ddp.compression",
                format!(
                    "is how every step's gradients travel; with {method} the syncs' values \
                     travel as ddp.sync.encoding says: set ddp.compression = \"none\""
                ),
            );
        }
        if self.ddp.backend == Backend::Nccl || matches!(self.ddp.devices, Devices::Cuda(_)) {
            return bad(
                "ddp.sync.method",
                format!(
                    "{method} runs the host step (CPU replicas, tcp backend) in this build: set \
                     ddp.devices = \"cpu\" or ddp.sync.method = \"every_step\""
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const CNN: &str = r#"
name = "c"
[model]
name = "mnist-cnn"
[data]
name = "mnist"
path = "d"
[ddp]
replicas = 2
"#;

    fn check(overrides: &[&str]) -> Result<Spec, String> {
        let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        Spec::parse(CNN, Path::new("s.toml"), &o).map_err(|e| e.to_string())
    }

    #[test]
    fn every_step_is_the_default_and_resolves_to_no_local_steps() {
        let s = check(&[]).unwrap();
        assert_eq!(s.ddp.sync.method, SyncMethod::EveryStep);
        assert_eq!(s.ddp.sync.local(), None);
        assert!(
            !s.to_toml().contains("[ddp.sync]"),
            "the default is not written"
        );
    }

    #[test]
    fn each_method_resolves_with_its_defaults() {
        let avg = check(&["ddp.sync.method=\"average\"", "ddp.sync.every=8"]).unwrap();
        let l = avg.ddp.sync.local().unwrap();
        assert_eq!((l.every, l.outer_lr, l.outer_momentum), (8, 1.0, 0.0));
        assert_eq!((l.fragments, l.delay, l.mixing), (1, 0, 0.0));
        let d = check(&["ddp.sync.method=\"diloco\"", "ddp.sync.every=50"]).unwrap();
        let l = d.ddp.sync.local().unwrap();
        assert_eq!((l.outer_lr, l.outer_momentum), (0.7, 0.9));
        assert_eq!(l.encoding, SyncEncoding::F32);
        let s = check(&[
            "ddp.sync.method=\"streaming\"",
            "ddp.sync.every=40",
            "ddp.sync.fragments=4",
            "ddp.sync.encoding=\"int4\"",
        ])
        .unwrap();
        let l = s.ddp.sync.local().unwrap();
        assert_eq!((l.fragments, l.delay, l.mixing), (4, 1, 0.5));
        assert_eq!(l.encoding, SyncEncoding::Int4);
        // Written back as given, and read again the same.
        let again = Spec::parse(&s.to_toml(), Path::new("s.toml"), &[]).unwrap();
        assert_eq!(again.ddp.sync, s.ddp.sync);
    }

    #[test]
    fn keys_outside_their_method_and_out_of_range_are_refused_naming_the_key() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["ddp.sync.every=5"],
                "s.toml: ddp.sync.every: does not apply to ddp.sync.method = \"every_step\"",
            ),
            (
                &[
                    "ddp.sync.method=\"average\"",
                    "ddp.sync.every=5",
                    "ddp.sync.outer_lr=0.7",
                ],
                "ddp.sync.outer_lr: does not apply to ddp.sync.method = \"average\": it is for \"diloco\" or \"streaming\"",
            ),
            (
                &[
                    "ddp.sync.method=\"diloco\"",
                    "ddp.sync.every=5",
                    "ddp.sync.fragments=2",
                ],
                "ddp.sync.fragments: does not apply to ddp.sync.method = \"diloco\"",
            ),
            (
                &["ddp.sync.method=\"diloco\""],
                "ddp.sync.every: ddp.sync.method = \"diloco\" needs",
            ),
            (
                &["ddp.sync.method=\"diloco\"", "ddp.sync.every=0"],
                "ddp.sync.every: must be at least 1",
            ),
            (
                &[
                    "ddp.sync.method=\"diloco\"",
                    "ddp.sync.every=5",
                    "ddp.sync.outer_momentum=1",
                ],
                "ddp.sync.outer_momentum: must be in [0, 1), got 1",
            ),
            (
                &[
                    "ddp.sync.method=\"diloco\"",
                    "ddp.sync.every=5",
                    "ddp.sync.outer_lr=-1",
                ],
                "ddp.sync.outer_lr: must be a positive number",
            ),
            (
                &["ddp.sync.method=\"streaming\"", "ddp.sync.every=8"],
                "ddp.sync.fragments: ddp.sync.method = \"streaming\" needs",
            ),
            (
                &[
                    "ddp.sync.method=\"streaming\"",
                    "ddp.sync.every=8",
                    "ddp.sync.fragments=9",
                ],
                "ddp.sync.fragments: must be between 1 and ddp.sync.every (8)",
            ),
            (
                &[
                    "ddp.sync.method=\"streaming\"",
                    "ddp.sync.every=8",
                    "ddp.sync.fragments=4",
                    "ddp.sync.delay=2",
                ],
                "ddp.sync.delay: must be below ddp.sync.every / ddp.sync.fragments (8 / 4 = 2 steps)",
            ),
            (
                &[
                    "ddp.sync.method=\"streaming\"",
                    "ddp.sync.every=8",
                    "ddp.sync.fragments=2",
                    "ddp.sync.mixing=1.5",
                ],
                "ddp.sync.mixing: must be in [0, 1], got 1.5",
            ),
            (
                &[
                    "ddp.sync.method=\"average\"",
                    "ddp.sync.every=5",
                    "ddp.sync.error_feedback=true",
                ],
                "ddp.sync.error_feedback: adds back what a lossy encoding lost",
            ),
            (
                &[
                    "ddp.sync.method=\"average\"",
                    "ddp.sync.every=5",
                    "ddp.sync.encoding=\"int3\"",
                ],
                "ddp.sync.encoding",
            ),
            (
                &[
                    "ddp.sync.method=\"diloco\"",
                    "ddp.sync.every=5",
                    "train.precision=\"fp16\"",
                ],
                "train.precision: \"fp16\" skips a step on every replica at once",
            ),
            (
                &[
                    "ddp.sync.method=\"diloco\"",
                    "ddp.sync.every=5",
                    "ddp.sync_batchnorm=true",
                ],
                "ddp.sync_batchnorm: reduces batch statistics",
            ),
            (
                &[
                    "ddp.sync.method=\"diloco\"",
                    "ddp.sync.every=5",
                    "ddp.compression=\"bf16\"",
                ],
                "ddp.compression: is how every step's gradients travel",
            ),
            (
                &[
                    "ddp.sync.method=\"diloco\"",
                    "ddp.sync.every=5",
                    "ddp.devices=[0]",
                ],
                "ddp.sync.method: ddp.sync.method = \"diloco\" runs the host step",
            ),
        ];
        for (overrides, want) in cases {
            let e = check(overrides).unwrap_err();
            assert!(e.contains(want), "{overrides:?}: {e}");
        }
    }
}
