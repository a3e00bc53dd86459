//! The element types of the arrays read from tensor files, what safetensors and NumPy call them,
//! and their little-endian conversion to the `f32` inputs and the class or value targets the
//! engine trains on.
//!
//! Inputs: `uint8` is scaled to [0, 1] (`v / 255` in `f32`, torchvision's `ToTensor`: a `uint8`
//! array is almost always pixels); every other type is converted as it is (`as f32`, rounding to
//! the nearest `f32`). Targets: integer types are class indices, float types values.

/// An element type read from a tensor file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    F16,
    BF16,
    F32,
    F64,
}

/// Every type, in the order messages list them.
pub const ALL: [Dtype; 12] = [
    Dtype::F32,
    Dtype::F64,
    Dtype::F16,
    Dtype::BF16,
    Dtype::U8,
    Dtype::I8,
    Dtype::U16,
    Dtype::I16,
    Dtype::U32,
    Dtype::I32,
    Dtype::U64,
    Dtype::I64,
];

/// The list of supported types for messages: `float32, float64, ...`.
pub fn supported() -> String {
    let names: Vec<&str> = ALL.iter().map(|d| d.name()).collect();
    names.join(", ")
}

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::U8 | Dtype::I8 => 1,
            Dtype::U16 | Dtype::I16 | Dtype::F16 | Dtype::BF16 => 2,
            Dtype::U32 | Dtype::I32 | Dtype::F32 => 4,
            Dtype::U64 | Dtype::I64 | Dtype::F64 => 8,
        }
    }

    /// NumPy's name (`bfloat16` as PyTorch and ml_dtypes call it).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::U8 => "uint8",
            Dtype::I8 => "int8",
            Dtype::U16 => "uint16",
            Dtype::I16 => "int16",
            Dtype::U32 => "uint32",
            Dtype::I32 => "int32",
            Dtype::U64 => "uint64",
            Dtype::I64 => "int64",
            Dtype::F16 => "float16",
            Dtype::BF16 => "bfloat16",
            Dtype::F32 => "float32",
            Dtype::F64 => "float64",
        }
    }

    /// True for the floating-point types (targets of these are values, not classes).
    pub fn is_float(self) -> bool {
        matches!(self, Dtype::F16 | Dtype::BF16 | Dtype::F32 | Dtype::F64)
    }

    /// A safetensors header's `dtype` (`F32`, `BF16`, `U8`, ...); `None` for the others
    /// (`BOOL`, `F8_E4M3`, `C64`, ...).
    pub fn from_safetensors(s: &str) -> Option<Dtype> {
        Some(match s {
            "U8" => Dtype::U8,
            "I8" => Dtype::I8,
            "U16" => Dtype::U16,
            "I16" => Dtype::I16,
            "U32" => Dtype::U32,
            "I32" => Dtype::I32,
            "U64" => Dtype::U64,
            "I64" => Dtype::I64,
            "F16" => Dtype::F16,
            "BF16" => Dtype::BF16,
            "F32" => Dtype::F32,
            "F64" => Dtype::F64,
            _ => return None,
        })
    }

    /// A NumPy type code without its byte order (`f4`, `u1`, `i8`, ...); `None` for the others
    /// (`b1`, `c8`, `U5`, `O`, ...).
    pub fn from_numpy(code: &str) -> Option<Dtype> {
        Some(match code {
            "u1" => Dtype::U8,
            "i1" => Dtype::I8,
            "u2" => Dtype::U16,
            "i2" => Dtype::I16,
            "u4" => Dtype::U32,
            "i4" => Dtype::I32,
            "u8" => Dtype::U64,
            "i8" => Dtype::I64,
            "f2" => Dtype::F16,
            "f4" => Dtype::F32,
            "f8" => Dtype::F64,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// IEEE half precision to `f32`, exactly (subnormals, infinities and NaN included).
pub fn f16_to_f32(h: u16) -> f32 {
    let negative = h & 0x8000 != 0;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let sign = u32::from(negative) << 31;
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: m · 2⁻²⁴, exact in f32.
            let v = m as f32 * (1.0 / 16_777_216.0);
            return if negative { -v } else { v };
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, m) => sign | 0x7fc0_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// bfloat16 (the top half of an `f32`) to `f32`, exactly.
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// Appends the elements of `bytes` (little-endian `dtype`) to `out` as `f32`; `uint8` scaled to
/// [0, 1] when `scale_u8` (inputs), as is otherwise (targets).
pub fn extend_f32(dtype: Dtype, bytes: &[u8], scale_u8: bool, out: &mut Vec<f32>) {
    macro_rules! each {
        ($n:literal, $conv:expr) => {
            out.extend(
                bytes
                    .chunks_exact($n)
                    .map(|b| $conv(<[u8; $n]>::try_from(b).expect("chunks_exact"))),
            )
        };
    }
    match dtype {
        Dtype::U8 if scale_u8 => out.extend(bytes.iter().map(|&b| f32::from(b) / 255.0)),
        Dtype::U8 => out.extend(bytes.iter().map(|&b| f32::from(b))),
        Dtype::I8 => out.extend(bytes.iter().map(|&b| f32::from(b as i8))),
        Dtype::U16 => each!(2, |b| f32::from(u16::from_le_bytes(b))),
        Dtype::I16 => each!(2, |b| f32::from(i16::from_le_bytes(b))),
        Dtype::U32 => each!(4, |b| u32::from_le_bytes(b) as f32),
        Dtype::I32 => each!(4, |b| i32::from_le_bytes(b) as f32),
        Dtype::U64 => each!(8, |b| u64::from_le_bytes(b) as f32),
        Dtype::I64 => each!(8, |b| i64::from_le_bytes(b) as f32),
        Dtype::F16 => each!(2, |b| f16_to_f32(u16::from_le_bytes(b))),
        Dtype::BF16 => each!(2, |b| bf16_to_f32(u16::from_le_bytes(b))),
        Dtype::F32 => each!(4, f32::from_le_bytes),
        Dtype::F64 => each!(8, |b| f64::from_le_bytes(b) as f32),
    }
}

/// The integer at the start of `bytes` (little-endian `dtype`), widened; `None` for float types.
pub fn integer(dtype: Dtype, bytes: &[u8]) -> Option<i128> {
    fn le<const N: usize>(b: &[u8]) -> [u8; N] {
        let mut a = [0; N];
        a.copy_from_slice(&b[..N]);
        a
    }
    Some(match dtype {
        Dtype::U8 => i128::from(bytes[0]),
        Dtype::I8 => i128::from(bytes[0] as i8),
        Dtype::U16 => i128::from(u16::from_le_bytes(le(bytes))),
        Dtype::I16 => i128::from(i16::from_le_bytes(le(bytes))),
        Dtype::U32 => i128::from(u32::from_le_bytes(le(bytes))),
        Dtype::I32 => i128::from(i32::from_le_bytes(le(bytes))),
        Dtype::U64 => i128::from(u64::from_le_bytes(le(bytes))),
        Dtype::I64 => i128::from(i64::from_le_bytes(le(bytes))),
        Dtype::F16 | Dtype::BF16 | Dtype::F32 | Dtype::F64 => return None,
    })
}

/// The index of the first element of `bytes` (little-endian `dtype`) that is not finite once
/// converted to `f32` (NaN, ±inf, or a `float64` beyond `f32`'s range); `None` when all are.
/// Integer types are always finite.
pub fn first_non_finite(dtype: Dtype, bytes: &[u8]) -> Option<usize> {
    fn find<const N: usize>(bytes: &[u8], bad: impl Fn([u8; N]) -> bool) -> Option<usize> {
        bytes
            .chunks_exact(N)
            .position(|b| bad(<[u8; N]>::try_from(b).expect("chunks_exact")))
    }
    match dtype {
        Dtype::F32 => find(bytes, |b| {
            u32::from_le_bytes(b) & 0x7f80_0000 == 0x7f80_0000
        }),
        Dtype::F16 => find(bytes, |b| u16::from_le_bytes(b) & 0x7c00 == 0x7c00),
        Dtype::BF16 => find(bytes, |b| u16::from_le_bytes(b) & 0x7f80 == 0x7f80),
        Dtype::F64 => find(bytes, |b| !(f64::from_le_bytes(b) as f32).is_finite()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        v.iter().flat_map(|&x| f(x)).collect()
    }

    fn f32s(dtype: Dtype, bytes: &[u8], scale: bool) -> Vec<f32> {
        let mut out = vec![-7.0];
        extend_f32(dtype, bytes, scale, &mut out);
        assert_eq!(out[0], -7.0, "appends");
        out.split_off(1)
    }

    #[test]
    fn names_sizes_and_codes() {
        let table = [
            (Dtype::F32, "F32", Some("f4"), 4),
            (Dtype::F64, "F64", Some("f8"), 8),
            (Dtype::F16, "F16", Some("f2"), 2),
            (Dtype::BF16, "BF16", None, 2),
            (Dtype::U8, "U8", Some("u1"), 1),
            (Dtype::I8, "I8", Some("i1"), 1),
            (Dtype::U16, "U16", Some("u2"), 2),
            (Dtype::I16, "I16", Some("i2"), 2),
            (Dtype::U32, "U32", Some("u4"), 4),
            (Dtype::I32, "I32", Some("i4"), 4),
            (Dtype::U64, "U64", Some("u8"), 8),
            (Dtype::I64, "I64", Some("i8"), 8),
        ];
        assert_eq!(table.map(|t| t.0), ALL);
        for (d, st, np, size) in table {
            assert_eq!(Dtype::from_safetensors(st), Some(d));
            if let Some(np) = np {
                assert_eq!(Dtype::from_numpy(np), Some(d));
            }
            assert_eq!(d.size(), size);
            assert_eq!(d.to_string(), d.name());
        }
        for other in ["BOOL", "F8_E4M3", "C64", "f32"] {
            assert_eq!(Dtype::from_safetensors(other), None, "{other}");
        }
        for other in ["b1", "c8", "U5", "O", "f4 "] {
            assert_eq!(Dtype::from_numpy(other), None, "{other}");
        }
        assert_eq!(
            supported(),
            "float32, float64, float16, bfloat16, uint8, int8, uint16, int16, uint32, int32, \
             uint64, int64"
        );
    }

    #[test]
    fn uint8_inputs_are_scaled_like_to_tensor_and_targets_are_not() {
        let px = [0u8, 1, 128, 255];
        assert_eq!(
            f32s(Dtype::U8, &px, true),
            vec![0.0, 1.0 / 255.0, 128.0 / 255.0, 1.0]
        );
        assert_eq!(f32s(Dtype::U8, &px, false), vec![0.0, 1.0, 128.0, 255.0]);
        // torch: torch.tensor([0, 1, 128, 255], dtype=torch.uint8).float().div(255)
        assert_eq!(
            f32s(Dtype::U8, &px, true)
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>(),
            vec![0, 0x3b80_8081, 0x3f00_8081, 0x3f80_0000]
        );
    }

    #[test]
    fn integers_convert_as_they_are() {
        assert_eq!(
            f32s(Dtype::I8, &[0x80, 0xff, 0, 127], true),
            vec![-128.0, -1.0, 0.0, 127.0]
        );
        let u16s = le(&[0u16, 65535, 300], u16::to_le_bytes);
        assert_eq!(f32s(Dtype::U16, &u16s, true), vec![0.0, 65535.0, 300.0]);
        let i16s = le(&[-32768i16, 7], i16::to_le_bytes);
        assert_eq!(f32s(Dtype::I16, &i16s, true), vec![-32768.0, 7.0]);
        let u32s = le(&[u32::MAX, 16_777_217], u32::to_le_bytes);
        // Rounded to the nearest f32 (ties to even).
        assert_eq!(
            f32s(Dtype::U32, &u32s, true),
            vec![4_294_967_296.0, 16_777_216.0]
        );
        let i32s = le(&[-5i32, i32::MIN], i32::to_le_bytes);
        assert_eq!(f32s(Dtype::I32, &i32s, true), vec![-5.0, -2_147_483_648.0]);
        let i64s = le(&[-3i64, 1 << 40, 9], i64::to_le_bytes);
        assert_eq!(
            f32s(Dtype::I64, &i64s, true),
            vec![-3.0, 1_099_511_627_776.0, 9.0]
        );
        let u64s = le(&[u64::MAX, 2], u64::to_le_bytes);
        assert_eq!(
            f32s(Dtype::U64, &u64s, true),
            vec![18_446_744_073_709_551_616.0, 2.0]
        );
        assert_eq!(integer(Dtype::I64, &i64s), Some(-3));
        assert_eq!(integer(Dtype::U64, &u64s), Some(u64::MAX as i128));
        assert_eq!(integer(Dtype::I8, &[0xfe]), Some(-2));
        assert_eq!(integer(Dtype::U8, &[200]), Some(200));
        assert_eq!(integer(Dtype::U16, &u16s[2..]), Some(65535));
        assert_eq!(integer(Dtype::I16, &i16s), Some(-32768));
        assert_eq!(integer(Dtype::U32, &u32s), Some(4_294_967_295));
        assert_eq!(integer(Dtype::I32, &i32s[4..]), Some(i32::MIN as i128));
        assert_eq!(integer(Dtype::F32, &[0; 4]), None);
    }

    #[test]
    fn floats_convert_exactly() {
        let f32v = [1.5f32, -0.0, f32::MIN_POSITIVE / 4.0, 3.4e38];
        let b = le(&f32v, f32::to_le_bytes);
        let got = f32s(Dtype::F32, &b, true);
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            f32v.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        let f64v = [0.1f64, -2.5, 1e-50];
        let b = le(&f64v, f64::to_le_bytes);
        assert_eq!(f32s(Dtype::F64, &b, true), vec![0.1f32, -2.5, 0.0]);
        // float16: 1, -2, the largest (65504), the smallest normal (2^-14), the smallest
        // subnormal (2^-24), a subnormal with several bits (0x03ff = 1023 · 2^-24), -0, 1/3 rounded.
        let halves = [
            0x3c00u16, 0xc000, 0x7bff, 0x0400, 0x0001, 0x03ff, 0x8000, 0x3555,
        ];
        let got = f32s(Dtype::F16, &le(&halves, u16::to_le_bytes), true);
        assert_eq!(
            got,
            vec![
                1.0,
                -2.0,
                65504.0,
                6.103_515_6e-5,
                5.960_464_5e-8,
                1023.0 * 5.960_464_5e-8,
                -0.0,
                0.333_251_95
            ]
        );
        assert!(got[6].is_sign_negative());
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        assert_eq!(f16_to_f32(0xfc00), f32::NEG_INFINITY);
        assert!(f16_to_f32(0x7e00).is_nan());
        assert_eq!(f16_to_f32(0x8001), -5.960_464_5e-8);
        // bfloat16: 1, -2, 3.140625 (0x4049), the smallest subnormal, the largest finite.
        let b16 = [0x3f80u16, 0xc000, 0x4049, 0x0001, 0x7f7f];
        let got = f32s(Dtype::BF16, &le(&b16, u16::to_le_bytes), true);
        assert_eq!(
            got,
            vec![
                1.0,
                -2.0,
                3.140_625,
                f32::from_bits(0x0001_0000),
                f32::from_bits(0x7f7f_0000)
            ]
        );
        assert!(bf16_to_f32(0x7fc0).is_nan());
        assert_eq!(bf16_to_f32(0xff80), f32::NEG_INFINITY);
    }

    #[test]
    fn non_finite_values_are_found() {
        let f = le(&[1.0f32, 2.0, f32::NAN, f32::INFINITY], f32::to_le_bytes);
        assert_eq!(first_non_finite(Dtype::F32, &f), Some(2));
        assert_eq!(first_non_finite(Dtype::F32, &f[..8]), None);
        let f = le(&[f32::NEG_INFINITY], f32::to_le_bytes);
        assert_eq!(first_non_finite(Dtype::F32, &f), Some(0));
        let h = le(&[0x3c00u16, 0x7bff, 0xfc00], u16::to_le_bytes);
        assert_eq!(first_non_finite(Dtype::F16, &h), Some(2));
        let h = le(&[0x7f7fu16, 0x7fc1], u16::to_le_bytes);
        assert_eq!(first_non_finite(Dtype::BF16, &h), Some(1));
        // A float64 beyond f32's range is inf once converted.
        let d = le(&[1e30f64, -1e300], f64::to_le_bytes);
        assert_eq!(first_non_finite(Dtype::F64, &d), Some(1));
        assert_eq!(first_non_finite(Dtype::U8, &[255; 9]), None);
        assert_eq!(first_non_finite(Dtype::I64, &[0xff; 16]), None);
    }
}
