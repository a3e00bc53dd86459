//! A sync's values on the wire: this rank's pseudo-gradients encoded as `ddp.sync.encoding` says
//! ([`payload`], on the training thread, with what the encoding lost kept for error feedback),
//! then averaged over the ranks ([`exchange`], on whichever thread sends), the average the same
//! bits on every rank.
//!
//! f32 and bf16 go through the ring's all-reduce (bf16: 16 bits a value on the wire, added in
//! f32, the result rounded to bf16 on every rank alike). The block-scaled integers
//! ([`crate::dist::quant`]) cannot be added on the way, so every rank's encoded values are
//! all-gathered and each rank decodes and adds them in rank order: what every rank gets is the
//! same, and each value is quantized once. That sends `(W - 1)` times a rank's encoded bytes
//! where the all-reduce sends `2 (W - 1) / W` times: the same for two ranks.

use crate::dist::codec::Codec;
use crate::dist::quant::{self, Bits};
use crate::dist::{Collective, ReduceOp};
use crate::spec::SyncEncoding;
use crate::{Error, Result};

/// One slice of this rank's values, encoded for the wire.
pub(super) enum Payload {
    F32(Vec<f32>),
    Bf16(Vec<f32>),
    Blocks {
        bits: Bits,
        bytes: Vec<u8>,
        n: usize,
    },
}

/// `values` as `encoding` sends them; with `lost`, what the encoding loses of each value is
/// written there (the value minus what the others will decode).
pub(super) fn payload(values: &[f32], encoding: SyncEncoding, lost: Option<&mut [f32]>) -> Payload {
    match encoding {
        SyncEncoding::F32 => {
            if let Some(l) = lost {
                l.fill(0.0);
            }
            Payload::F32(values.to_vec())
        }
        SyncEncoding::Bf16 => {
            if let Some(l) = lost {
                l.copy_from_slice(values);
                let mut sent = values.to_vec();
                Codec::Bf16.round(&mut sent);
                l.iter_mut().zip(&sent).for_each(|(l, s)| *l -= s);
            }
            Payload::Bf16(values.to_vec())
        }
        SyncEncoding::Int8 | SyncEncoding::Int4 => {
            let bits = if encoding == SyncEncoding::Int8 {
                Bits::Eight
            } else {
                Bits::Four
            };
            let mut bytes = Vec::new();
            quant::encode(values, bits, &mut bytes);
            if let Some(l) = lost {
                l.copy_from_slice(values);
                quant::decode_add(&bytes, bits, l, -1.0).expect("this rank's own encoding");
            }
            Payload::Blocks {
                bits,
                bytes,
                n: values.len(),
            }
        }
    }
}

/// The average over the ranks of every rank's `payload`, and the bytes this rank sent for it.
pub(super) fn exchange(c: &mut dyn Collective, payload: Payload) -> Result<(Vec<f32>, u64)> {
    let w = c.world_size();
    match payload {
        Payload::F32(mut v) => {
            c.all_reduce(&mut v, ReduceOp::Avg)?;
            let sent = ring_bytes(v.len() * 4, w);
            Ok((v, sent))
        }
        Payload::Bf16(mut v) => {
            c.all_reduce_coded(&mut v, ReduceOp::Avg, Codec::Bf16)?;
            let sent = ring_bytes(v.len() * 2, w);
            Ok((v, sent))
        }
        Payload::Blocks { bits, bytes, n } => {
            let all = c.all_gather_bytes(&bytes)?;
            let mut avg = vec![0.0; n];
            let weight = 1.0 / w as f32;
            for (rank, theirs) in all.iter().enumerate() {
                quant::decode_add(theirs, bits, &mut avg, weight).map_err(|e| {
                    Error::Model(format!("rank {rank}'s sync does not decode: {e}"))
                })?;
            }
            Ok((avg, (w as u64 - 1) * bytes.len() as u64))
        }
    }
}

/// Bytes each of `w` ranks sends in a ring all-reduce of a buffer of `bytes` (a reduce-scatter
/// and an all-gather, each `(w - 1) / w` of it).
pub(super) fn ring_bytes(bytes: usize, w: usize) -> u64 {
    let w = w as u64;
    bytes as u64 * 2 * (w - 1) / w
}
