//! How gradients travel compressed on the ring: 16-bit floats on the wire, f32 everywhere else.
//!
//! A compressed all-reduce ([`crate::dist::Collective::all_reduce_coded`]) sends each partial
//! sum as 16 bits and adds what it receives into f32 accumulators (no 16-bit arithmetic, unlike
//! PyTorch's `bf16_compress_hook`, which sums in bf16); the owner of a segment rounds its sum to
//! 16 bits before the all-gather, so every rank ends with the same bits.

use half::{bf16, f16};

/// A 16-bit float format for the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// bfloat16: f32's range, 8 bits of mantissa.
    Bf16,
    /// IEEE half: 11 bits of mantissa, range ±65504 (larger gradients become infinite).
    F16,
}

impl Codec {
    /// Bytes per value on the wire.
    pub const WIDTH: usize = 2;

    pub fn name(self) -> &'static str {
        match self {
            Codec::Bf16 => "bf16",
            Codec::F16 => "fp16",
        }
    }

    fn encode_one(self, v: f32) -> u16 {
        match self {
            Codec::Bf16 => bf16::from_f32(v).to_bits(),
            Codec::F16 => f16::from_f32(v).to_bits(),
        }
    }

    fn decode_one(self, b: u16) -> f32 {
        match self {
            Codec::Bf16 => bf16::from_bits(b).to_f32(),
            Codec::F16 => f16::from_bits(b).to_f32(),
        }
    }

    /// `src` encoded into `dst` (`2 · src.len()` bytes, little-endian).
    pub fn encode(self, src: &[f32], dst: &mut [u8]) {
        debug_assert_eq!(dst.len(), src.len() * Self::WIDTH);
        for (v, out) in src.iter().zip(dst.chunks_exact_mut(Self::WIDTH)) {
            out.copy_from_slice(&self.encode_one(*v).to_le_bytes());
        }
    }

    /// `src` (encoded) decoded into `dst`.
    pub fn decode(self, src: &[u8], dst: &mut [f32]) {
        for (b, out) in src.chunks_exact(Self::WIDTH).zip(dst.iter_mut()) {
            *out = self.decode_one(u16::from_le_bytes([b[0], b[1]]));
        }
    }

    /// `src` (encoded) decoded and added into `dst` in f32; the sums then times `scale`.
    pub fn decode_add(self, src: &[u8], dst: &mut [f32], scale: Option<f32>) {
        let pairs = src.chunks_exact(Self::WIDTH).zip(dst.iter_mut());
        match scale {
            None => {
                pairs.for_each(|(b, d)| *d += self.decode_one(u16::from_le_bytes([b[0], b[1]])))
            }
            Some(k) => pairs.for_each(|(b, d)| {
                *d = (*d + self.decode_one(u16::from_le_bytes([b[0], b[1]]))) * k
            }),
        }
    }

    /// Each value rounded to what the wire carries.
    pub fn round(self, values: &mut [f32]) {
        values
            .iter_mut()
            .for_each(|v| *v = self.decode_one(self.encode_one(*v)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_keeps_what_16_bits_hold() {
        for codec in [Codec::Bf16, Codec::F16] {
            let values = [0.0f32, 1.0, -2.5, 0.1, 3.0e-3, 1234.5];
            let mut wire = vec![0u8; values.len() * 2];
            codec.encode(&values, &mut wire);
            let mut back = [0f32; 6];
            codec.decode(&wire, &mut back);
            let mut rounded = values;
            codec.round(&mut rounded);
            assert_eq!(back, rounded, "{codec:?}");
            for (a, b) in values.iter().zip(&back) {
                let tol = if codec == Codec::Bf16 { 4e-3 } else { 5e-4 };
                assert!((a - b).abs() <= tol * a.abs(), "{codec:?}: {a} -> {b}");
            }
            let mut acc = [1.0f32; 6];
            codec.decode_add(&wire, &mut acc, Some(0.5));
            assert_eq!(acc[2], (1.0 - 2.5) * 0.5);
        }
        // fp16's range ends at 65504; bf16 keeps f32's.
        let mut big = [1.0e6f32];
        Codec::F16.round(&mut big);
        assert!(big[0].is_infinite());
        let mut big = [1.0e6f32];
        Codec::Bf16.round(&mut big);
        assert!((big[0] - 1.0e6).abs() < 1.0e4);
    }
}
