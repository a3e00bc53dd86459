//! Block-scaled integers: values cut into blocks of [`BLOCK`], each block sent as its scale (an
//! f32: the block's largest magnitude over the largest integer) and one signed integer per value,
//! rounded to the nearest (8 bits: -127..=127; 4 bits: -7..=7, two to a byte, the first value in
//! the low nibble). A value comes back within half a step of what was sent: at most
//! `max|x| / 254` of its block's largest magnitude in 8 bits, `max|x| / 14` in 4 bits
//! ([`Bits::bound`]). Encoding is a pure function of the values, so every rank decoding the same
//! bytes gets the same floats. A block whose largest magnitude is not finite decodes as NaN, so a
//! diverged replica is seen rather than hidden.

/// Values per block.
pub const BLOCK: usize = 64;

/// Bits per value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bits {
    Eight,
    Four,
}

impl Bits {
    /// The largest integer a value is scaled to.
    fn max(self) -> f32 {
        match self {
            Bits::Eight => 127.0,
            Bits::Four => 7.0,
        }
    }

    /// Bytes for the integers of `n` values (without the scales).
    fn value_bytes(self, n: usize) -> usize {
        match self {
            Bits::Eight => n,
            Bits::Four => n.div_ceil(2),
        }
    }

    /// Bytes `n` values take encoded.
    pub fn encoded_len(self, n: usize) -> usize {
        let blocks = n.div_ceil(BLOCK);
        let full = n / BLOCK;
        blocks * 4 + full * self.value_bytes(BLOCK) + self.value_bytes(n - full * BLOCK)
    }

    /// The most a value of a block with largest magnitude `absmax` can come back off by.
    pub fn bound(self, absmax: f32) -> f32 {
        absmax / (2.0 * self.max())
    }
}

/// Appends the encoding of `values` to `out`.
pub fn encode(values: &[f32], bits: Bits, out: &mut Vec<u8>) {
    out.reserve(bits.encoded_len(values.len()));
    let max = bits.max();
    for block in values.chunks(BLOCK) {
        let absmax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let absmax = if block.iter().any(|v| !v.is_finite()) {
            f32::NAN
        } else {
            absmax
        };
        let scale = absmax / max;
        out.extend_from_slice(&scale.to_le_bytes());
        let inverse = if scale > 0.0 && scale.is_finite() {
            1.0 / scale
        } else {
            0.0
        };
        let q = |v: f32| (v * inverse).round().clamp(-max, max) as i8;
        match bits {
            Bits::Eight => out.extend(block.iter().map(|v| q(*v) as u8)),
            Bits::Four => out.extend(block.chunks(2).map(|pair| {
                let lo = q(pair[0]) as u8 & 0x0f;
                let hi = pair.get(1).map_or(0, |v| q(*v) as u8 & 0x0f);
                lo | hi << 4
            })),
        }
    }
}

/// Decodes `dst.len()` values from `bytes` (an [`encode`]d buffer of that many) and adds each,
/// times `weight`, to `dst`. Errors where `bytes` is not that many values' encoding.
pub fn decode_add(
    bytes: &[u8],
    bits: Bits,
    dst: &mut [f32],
    weight: f32,
) -> std::result::Result<(), String> {
    if bytes.len() != bits.encoded_len(dst.len()) {
        return Err(format!(
            "{} bytes where {} values in {}-bit blocks take {}",
            bytes.len(),
            dst.len(),
            match bits {
                Bits::Eight => 8,
                Bits::Four => 4,
            },
            bits.encoded_len(dst.len())
        ));
    }
    let mut at = 0;
    for block in dst.chunks_mut(BLOCK) {
        let scale = f32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        at += 4;
        let w = scale * weight;
        let n = bits.value_bytes(block.len());
        let values = &bytes[at..at + n];
        at += n;
        match bits {
            Bits::Eight => block
                .iter_mut()
                .zip(values)
                .for_each(|(d, q)| *d += (*q as i8) as f32 * w),
            Bits::Four => {
                for (pair, q) in block.chunks_mut(2).zip(values) {
                    // Sign-extend each nibble.
                    let lo = ((q << 4) as i8 >> 4) as f32;
                    let hi = (*q as i8 >> 4) as f32;
                    pair[0] += lo * w;
                    if let Some(d) = pair.get_mut(1) {
                        *d += hi * w;
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2654435761).max(1);
        (0..n)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                let unit = (s % 20001) as f32 / 10000.0 - 1.0;
                // Blocks of very different magnitudes.
                unit * 10f32.powi((i / BLOCK) as i32 % 5 - 3)
            })
            .collect()
    }

    fn round_trip(v: &[f32], bits: Bits) -> Vec<f32> {
        let mut bytes = Vec::new();
        encode(v, bits, &mut bytes);
        assert_eq!(bytes.len(), bits.encoded_len(v.len()));
        let mut out = vec![0.0; v.len()];
        decode_add(&bytes, bits, &mut out, 1.0).unwrap();
        out
    }

    #[test]
    fn every_value_comes_back_within_the_stated_bound_of_its_block() {
        for bits in [Bits::Eight, Bits::Four] {
            for n in [1, 2, 63, 64, 65, 1000, 4097] {
                let v = values(n, n as u32);
                let back = round_trip(&v, bits);
                for (block, got) in v.chunks(BLOCK).zip(back.chunks(BLOCK)) {
                    let absmax = block.iter().fold(0f32, |m, x| m.max(x.abs()));
                    // Half a step, and the rounding of the scale's product.
                    let bound = bits.bound(absmax) * (1.0 + 1e-5);
                    for (x, y) in block.iter().zip(got) {
                        assert!((x - y).abs() <= bound, "{bits:?} n={n}: {x} came back {y}");
                    }
                    // The largest magnitude comes back (nearly) exactly.
                    let i = block.iter().position(|x| x.abs() == absmax).unwrap();
                    assert!((block[i] - got[i]).abs() <= absmax * 1e-6);
                }
            }
        }
    }

    #[test]
    fn sizes_are_a_scale_per_block_and_the_bits_per_value() {
        assert_eq!(Bits::Eight.encoded_len(128), 2 * 4 + 128);
        assert_eq!(Bits::Four.encoded_len(128), 2 * 4 + 64);
        assert_eq!(Bits::Four.encoded_len(65), 2 * 4 + 32 + 1);
        assert_eq!(Bits::Four.encoded_len(0), 0);
        // 4.5 bits a value against f32's 32: 7.1 times fewer bytes.
        let ratio = 32.0 * 6400.0 / (8.0 * Bits::Four.encoded_len(6400) as f64);
        assert!((ratio - 7.11).abs() < 0.01, "{ratio}");
    }

    #[test]
    fn encoding_is_deterministic_zero_blocks_stay_zero_and_non_finite_shows() {
        let v = values(300, 7);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        encode(&v, Bits::Four, &mut a);
        encode(&v, Bits::Four, &mut b);
        assert_eq!(a, b);
        assert!(round_trip(&[0.0; 70], Bits::Four).iter().all(|x| *x == 0.0));
        let mut bad = vec![1.0; 70];
        bad[3] = f32::INFINITY;
        let back = round_trip(&bad, Bits::Eight);
        assert!(back[..64].iter().all(|x| x.is_nan()));
        assert!(back[64..].iter().all(|x| *x == 1.0));
    }

    #[test]
    fn decoding_adds_weighted_and_refuses_a_wrong_length() {
        let v = values(100, 3);
        let mut bytes = Vec::new();
        encode(&v, Bits::Eight, &mut bytes);
        let mut acc = vec![1.0; 100];
        decode_add(&bytes, Bits::Eight, &mut acc, 0.5).unwrap();
        let once = round_trip(&v, Bits::Eight);
        for (a, o) in acc.iter().zip(&once) {
            assert!((a - (1.0 + 0.5 * o)).abs() < 1e-6);
        }
        let e = decode_add(&bytes[..10], Bits::Eight, &mut acc, 1.0).unwrap_err();
        assert!(e.contains("10 bytes where 100 values"), "{e}");
    }
}
