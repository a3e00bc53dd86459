//! The `[ddp]` table: how the replicas run and talk (backend, devices, gradient buckets,
//! overlap, compression, timeouts, the sync of local steps, elastic membership).

use serde::{Deserialize, Serialize};

use super::{Spec, SyncSpec, defaults};
use crate::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// nccl on CUDA devices, tcp on CPU.
    #[default]
    Auto,
    Tcp,
    Nccl,
}

/// `ddp.bucket_mb`: a size in MiB, or `"auto"`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BucketMb {
    Size(f64),
    /// Picked at start from the link and the model's gradients
    /// (`dist::probe::auto_bucket_bytes`).
    Auto,
}

impl Serialize for BucketMb {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            BucketMb::Size(mb) => s.serialize_f64(*mb),
            BucketMb::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for BucketMb {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = BucketMb;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a size in MiB (25) or \"auto\"")
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<BucketMb, E> {
                Ok(BucketMb::Size(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<BucketMb, E> {
                Ok(BucketMb::Size(v as f64))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<BucketMb, E> {
                Ok(BucketMb::Size(v as f64))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<BucketMb, E> {
                match v {
                    "auto" => Ok(BucketMb::Auto),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(Visit)
    }
}

/// `ddp.compression`: how the gradients travel between the replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// f32.
    #[default]
    None,
    /// bfloat16 on the wire, added in f32.
    Bf16,
    /// IEEE half on the wire, added in f32.
    Fp16,
    /// Low-rank factors (`ddp.powersgd_rank`) with error feedback (PowerSGD).
    Powersgd,
}

impl Compression {
    pub fn is_none(&self) -> bool {
        *self == Compression::None
    }

    /// As the spec writes it.
    pub fn name(&self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Bf16 => "bf16",
            Compression::Fp16 => "fp16",
            Compression::Powersgd => "powersgd",
        }
    }
}

/// `ddp.devices`: "auto", "cpu", or a list of CUDA ordinals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Devices {
    Named(DeviceKeyword),
    Cuda(Vec<usize>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKeyword {
    Auto,
    Cpu,
}

impl Default for Devices {
    fn default() -> Self {
        Devices::Named(DeviceKeyword::Auto)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DdpSpec {
    #[serde(default = "defaults::one_usize")]
    pub replicas: usize,
    #[serde(default)]
    pub backend: Backend,
    #[serde(default)]
    pub devices: Devices,
    /// Largest gradient bucket in MiB, or `"auto"` (picked from the link measured at start).
    #[serde(default = "defaults::bucket_mb")]
    pub bucket_mb: BucketMb,
    #[serde(default = "defaults::timeout_s")]
    pub timeout_s: u64,
    /// SyncBatchNorm: batch statistics over the global batch.
    #[serde(default)]
    pub sync_batchnorm: bool,
    /// Broadcast BatchNorm buffers from rank 0 before every forward (PyTorch DDP default).
    #[serde(default = "defaults::yes")]
    pub broadcast_buffers: bool,
    /// CPU threads per replica (default: cores / local world size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// `tcp` backend: all-reduce through shared memory when every replica runs on one host.
    #[serde(default = "defaults::yes", skip_serializing_if = "defaults::is_yes")]
    pub shared_memory: bool,
    /// Host step in private buffers (ranks on several hosts, or `shared_memory = false`):
    /// all-reduce the gradient buckets while backward runs, the optimizer on every rank.
    #[serde(default = "defaults::yes", skip_serializing_if = "defaults::is_yes")]
    pub overlap: bool,
    /// The overlapped step's gradients on the wire: `none` (f32), `bf16` or `fp16` (16 bits,
    /// added in f32), `powersgd` (low-rank factors).
    #[serde(default, skip_serializing_if = "Compression::is_none")]
    pub compression: Compression,
    /// PowerSGD's rank (`compression = "powersgd"`; default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub powersgd_rank: Option<usize>,
    /// How often the replicas agree, and on what: every step (DDP), or local steps with a sync
    /// every N (`[ddp.sync]`).
    #[serde(default, skip_serializing_if = "SyncSpec::is_every_step")]
    pub sync: SyncSpec,
    /// Keep training when replicas are lost, down to `min_replicas` (`{ min_replicas = N }`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic: Option<Elastic>,
}

/// `ddp.elastic`: the run goes on without a lost replica, re-forming its group from the
/// survivors' memory, while at least `min_replicas` remain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Elastic {
    pub min_replicas: usize,
}

impl Spec {
    /// The rules of `ddp.elastic`: a minimum within the replicas, and the step that keeps the
    /// whole state on every replica (the overlapped one, over the ring).
    pub(super) fn check_elastic(&self) -> Result<()> {
        let Some(e) = self.ddp.elastic else {
            return Ok(());
        };
        let bad = |key: &str, msg: String| Err(self.error(key, msg));
        if e.min_replicas == 0 || e.min_replicas > self.ddp.replicas {
            return bad(
                "ddp.elastic.min_replicas",
                format!(
                    "must be between 1 and ddp.replicas ({}), got {}",
                    self.ddp.replicas, e.min_replicas
                ),
            );
        }
        if !self.ddp.overlap {
            return bad(
                "ddp.elastic",
                "needs ddp.overlap = true: an elastic run keeps the whole optimizer state on \
                 every replica (the overlapped step), so that no replica's loss takes a shard \
                 of it away"
                    .into(),
            );
        }
        if self.ddp.backend == Backend::Nccl {
            return bad(
                "ddp.elastic",
                "re-forms its group over the tcp backend: set ddp.backend = \"tcp\" (or \
                 \"auto\" on CPU replicas)"
                    .into(),
            );
        }
        Ok(())
    }
}

impl DdpSpec {
    /// PowerSGD's rank when none is given.
    pub const POWERSGD_RANK: usize = 4;
}

impl Default for DdpSpec {
    fn default() -> Self {
        toml::from_str("").expect("ddp defaults")
    }
}
