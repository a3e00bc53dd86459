//! Writers of small tensor files for tests, fuzz seeds and examples: `.npy` (as `np.save` writes
//! it), `.npz` (as `np.savez` writes it: stored members with ZIP64 extra fields, or deflated as
//! `np.savez_compressed`) and `.safetensors` (through the `safetensors` crate). Everything is
//! built in memory; these are not for large files.

use std::io::Write;

use super::array::show_shape;
use super::dtype::Dtype;

/// An array to write: element type, shape and little-endian bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Arr {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

macro_rules! constructor {
    ($name:ident, $t:ty, $d:expr) => {
        #[doc = concat!("An array of `", stringify!($t), "` values.")]
        pub fn $name(shape: &[usize], values: &[$t]) -> Arr {
            Arr::new(
                $d,
                shape,
                values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            )
        }
    };
}

impl Arr {
    /// Panics when `data` is not as long as `shape` of `dtype` takes.
    pub fn new(dtype: Dtype, shape: &[usize], data: Vec<u8>) -> Arr {
        assert_eq!(
            data.len(),
            shape.iter().product::<usize>() * dtype.size(),
            "{dtype} {shape:?}"
        );
        Arr {
            dtype,
            shape: shape.to_vec(),
            data,
        }
    }

    constructor!(u8, u8, Dtype::U8);
    constructor!(i8, i8, Dtype::I8);
    constructor!(u16, u16, Dtype::U16);
    constructor!(i16, i16, Dtype::I16);
    constructor!(u32, u32, Dtype::U32);
    constructor!(i32, i32, Dtype::I32);
    constructor!(u64, u64, Dtype::U64);
    constructor!(i64, i64, Dtype::I64);
    constructor!(f32, f32, Dtype::F32);
    constructor!(f64, f64, Dtype::F64);

    /// float16 values given as their bits.
    pub fn f16_bits(shape: &[usize], bits: &[u16]) -> Arr {
        Arr::new(
            Dtype::F16,
            shape,
            bits.iter().flat_map(|v| v.to_le_bytes()).collect(),
        )
    }

    /// bfloat16 values given as their bits.
    pub fn bf16_bits(shape: &[usize], bits: &[u16]) -> Arr {
        Arr::new(
            Dtype::BF16,
            shape,
            bits.iter().flat_map(|v| v.to_le_bytes()).collect(),
        )
    }

    /// The safetensors dtype name (`F32`, `BF16`, ...).
    pub fn safetensors_dtype(&self) -> String {
        format!("{:?}", self.dtype)
    }

    /// NumPy's descr (`<f4`, `|u1`, ...). Panics for bfloat16, which NumPy lacks.
    pub fn descr(&self) -> String {
        let kind = match self.dtype {
            Dtype::BF16 => panic!("NumPy has no bfloat16"),
            d if d.is_float() => 'f',
            d if d.name().starts_with('u') => 'u',
            _ => 'i',
        };
        let order = if self.dtype.size() == 1 { '|' } else { '<' };
        format!("{order}{kind}{}", self.dtype.size())
    }
}

/// An `.npy` file as `np.save` writes `a` (version 1.0).
pub fn npy(a: &Arr) -> Vec<u8> {
    npy_with(
        1,
        &format!(
            "{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
            a.descr(),
            show_shape(&a.shape)
        ),
        &a.data,
    )
}

/// An `.npy` file of format `version` (1, 2 or 3) with the header dict `dict`, padded with
/// spaces and a newline to a multiple of 64 bytes as NumPy does, then `data`.
pub fn npy_with(version: u8, dict: &str, data: &[u8]) -> Vec<u8> {
    let pre = if version == 1 { 10 } else { 12 };
    let mut h = dict.to_string();
    while !(pre + h.len() + 1).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    let mut b = b"\x93NUMPY".to_vec();
    b.extend([version, 0]);
    if version == 1 {
        b.extend((h.len() as u16).to_le_bytes());
    } else {
        b.extend((h.len() as u32).to_le_bytes());
    }
    b.extend(h.as_bytes());
    b.extend(data);
    b
}

/// How an `.npz` stores its members.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Members {
    /// `np.savez`: uncompressed, with ZIP64 extra fields (NumPy opens every member with
    /// `force_zip64=True`).
    Stored,
    /// `np.savez_compressed`.
    Deflated,
}

/// An `.npz` archive holding `members` (name, bytes), e.g. `("x.npy", npy(&x))`.
pub fn npz(members: &[(&str, Vec<u8>)], how: Members) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(match how {
            Members::Stored => zip::CompressionMethod::Stored,
            Members::Deflated => zip::CompressionMethod::Deflated,
        })
        .large_file(how == Members::Stored);
    for (name, bytes) in members {
        zip.start_file(*name, opts).expect("zip member");
        zip.write_all(bytes).expect("zip write");
    }
    zip.finish().expect("zip finish").into_inner()
}

/// An `.npz` as `np.savez(file, **arrays)` writes it.
pub fn savez(arrays: &[(&str, &Arr)]) -> Vec<u8> {
    let members: Vec<(String, Vec<u8>)> = arrays
        .iter()
        .map(|(k, a)| (format!("{k}.npy"), npy(a)))
        .collect();
    let refs: Vec<(&str, Vec<u8>)> = members
        .iter()
        .map(|(n, b)| (n.as_str(), b.clone()))
        .collect();
    npz(&refs, Members::Stored)
}

/// A `.safetensors` file of `tensors` (name, safetensors dtype name, shape, bytes), written by
/// the `safetensors` crate. Panics on a dtype it does not know or a length that does not fit.
pub fn safetensors_with(tensors: &[(&str, &str, &[usize], &[u8])]) -> Vec<u8> {
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|&(name, dtype, shape, data)| {
            let d: safetensors::Dtype =
                serde_json::from_value(serde_json::Value::String(dtype.into()))
                    .unwrap_or_else(|e| panic!("dtype {dtype}: {e}"));
            let view = safetensors::tensor::TensorView::new(d, shape.to_vec(), data)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            (name.to_string(), view)
        })
        .collect();
    safetensors::serialize(views, None).expect("serialize")
}

/// A `.safetensors` file of `arrays` (name, array).
pub fn safetensors(arrays: &[(&str, &Arr)]) -> Vec<u8> {
    let dtypes: Vec<String> = arrays.iter().map(|(_, a)| a.safetensors_dtype()).collect();
    let entries: Vec<(&str, &str, &[usize], &[u8])> = arrays
        .iter()
        .zip(&dtypes)
        .map(|((n, a), d)| (*n, d.as_str(), a.shape.as_slice(), a.data.as_slice()))
        .collect();
    safetensors_with(&entries)
}
