//! `.safetensors` files: an 8-byte little-endian header length `n`, `n` bytes of JSON naming each
//! tensor's `dtype`, `shape` and `data_offsets` (`[begin, end)` in the data that follows the
//! header), then the data. The header is parsed here (not by the `safetensors` crate) so that
//! every error names the tensor and says what to do.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use super::array::{Array, Store, byte_len, show_shape};
use super::dtype::{Dtype, supported};
use crate::error::{Error, Result};

/// Headers above this size are refused (the `safetensors` crate's own limit).
const MAX_HEADER: u64 = 100_000_000;

/// One tensor as the header describes it.
#[derive(Debug, Deserialize)]
struct Entry {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: (usize, usize),
}

/// The tensors of a file by name, and where the data section starts.
pub struct Header {
    entries: BTreeMap<String, Entry>,
    data_start: usize,
}

/// Parses the header of the file `store` holds, checking that every tensor's data is inside the
/// file and as long as its dtype and shape say.
pub fn header(store: &Store) -> Result<Header> {
    let bytes = store.bytes();
    let fail = |msg: String| Error::data(store.path(), msg);
    let bad = |msg: String| Err(fail(msg));
    let Some(len_bytes) = bytes.get(..8) else {
        return bad(format!(
            "truncated: {} bytes, shorter than the 8-byte length that starts a safetensors file",
            bytes.len()
        ));
    };
    let n = u64::from_le_bytes(len_bytes.try_into().expect("8 bytes"));
    if n > MAX_HEADER {
        return bad(format!(
            "not a safetensors file: its first 8 bytes give a header of {n} bytes (at most \
             {MAX_HEADER}); was it written by safetensors (save_file / save_model)?"
        ));
    }
    let data_start = 8 + n as usize;
    let Some(json) = bytes.get(8..data_start) else {
        return bad(format!(
            "truncated: the header is {n} bytes but only {} follow its length; the file was cut \
             short: write or copy it again",
            bytes.len() - 8
        ));
    };
    let mut raw: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(json).map_err(|e| {
            fail(format!(
                "not a safetensors file: its header is not a JSON object of tensors ({e})"
            ))
        })?;
    raw.remove("__metadata__");
    let mut entries = BTreeMap::new();
    for (name, v) in raw {
        let e: Entry = serde_json::from_value(v).map_err(|e| {
            fail(format!(
                "the header's entry for tensor {name:?} is not {{dtype, shape, data_offsets}} ({e})"
            ))
        })?;
        entries.insert(name, e);
    }
    let data = bytes.len() - data_start;
    for (name, e) in &entries {
        let (begin, end) = e.data_offsets;
        if begin > end {
            return bad(format!(
                "tensor {name:?} has data_offsets [{begin}, {end}]: its end is before its start"
            ));
        }
        if let Some(d) = Dtype::from_safetensors(&e.dtype)
            && byte_len(d, &e.shape) != Some(end - begin)
        {
            return bad(format!(
                "tensor {name:?} has {} bytes of data (data_offsets [{begin}, {end}]) but shape \
                 {} of {} takes {}",
                end - begin,
                show_shape(&e.shape),
                e.dtype,
                byte_len(d, &e.shape)
                    .map_or("more than can be addressed".into(), |b| b.to_string())
            ));
        }
    }
    if let Some((name, e)) = entries.iter().max_by_key(|(_, e)| e.data_offsets.1)
        && e.data_offsets.1 > data
    {
        return bad(format!(
            "truncated: tensor {name:?} ends at byte {} of the data but only {data} bytes of \
             data follow the header; the file was cut short: write or copy it again",
            e.data_offsets.1
        ));
    }
    Ok(Header {
        entries,
        data_start,
    })
}

impl Header {
    /// The tensor `name` of `store` (whose header this is); `key` is the spec key that named it.
    pub fn array(&self, store: &Arc<Store>, name: &str, key: &str) -> Result<Array> {
        let bad = |msg: String| Err(Error::data(store.path(), msg));
        let Some(e) = self.entries.get(name) else {
            let names: Vec<String> = self.entries.keys().map(|k| format!("{k:?}")).collect();
            return bad(format!(
                "no tensor {name:?} ({key}): the file holds {}; set data.x_key and data.y_key to \
                 the names of the inputs and the targets",
                if names.is_empty() {
                    "no tensors".into()
                } else {
                    names.join(", ")
                }
            ));
        };
        let Some(dtype) = Dtype::from_safetensors(&e.dtype) else {
            return bad(format!(
                "tensor {name:?} has dtype {}, which is not read: save it as one of {}",
                e.dtype,
                supported()
            ));
        };
        Array::new(
            store.clone(),
            format!("tensor {name:?}"),
            dtype,
            e.shape.clone(),
            self.data_start + e.data_offsets.0,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file with `header` (JSON) and `data` bytes.
    fn file(header: &str, data: &[u8]) -> Arc<Store> {
        let mut b = (header.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(header.as_bytes());
        b.extend_from_slice(data);
        Store::memory(&b, "d.safetensors")
    }

    fn err(store: &Arc<Store>) -> String {
        match header(store) {
            Ok(_) => panic!("no error"),
            Err(e) => e.to_string(),
        }
    }

    const TWO: &str = r#"{"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[2,1],"data_offsets":[0,8]},"y":{"dtype":"I64","shape":[2],"data_offsets":[8,24]}}"#;

    #[test]
    fn reads_tensors_at_their_offsets() {
        let mut data: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        data.extend([7i64, 3].iter().flat_map(|v| v.to_le_bytes()));
        let s = file(TWO, &data);
        let h = header(&s).unwrap();
        let x = h.array(&s, "x", "data.x_key").unwrap();
        assert_eq!(
            (x.dtype, x.shape.clone(), x.label.as_str()),
            (Dtype::F32, vec![2, 1], "tensor \"x\"")
        );
        assert_eq!(x.row(1), &(-2.0f32).to_le_bytes());
        let y = h.array(&s, "y", "data.y_key").unwrap();
        assert_eq!(y.row(0), &7i64.to_le_bytes());
        assert_eq!(
            h.array(&s, "labels", "data.y_key").unwrap_err().to_string(),
            "d.safetensors: no tensor \"labels\" (data.y_key): the file holds \"x\", \"y\"; set \
             data.x_key and data.y_key to the names of the inputs and the targets"
        );
        let empty = file("{}", &[]);
        assert!(
            header(&empty)
                .unwrap()
                .array(&empty, "x", "data.x_key")
                .unwrap_err()
                .to_string()
                .contains("the file holds no tensors;")
        );
    }

    #[test]
    fn bad_headers_are_errors() {
        let short = Store::memory(&[1, 0, 0], "d.safetensors");
        assert_eq!(
            err(&short),
            "d.safetensors: truncated: 3 bytes, shorter than the 8-byte length that starts a \
             safetensors file"
        );
        let huge = Store::memory(&u64::MAX.to_le_bytes(), "d.safetensors");
        assert!(err(&huge).contains(
            "not a safetensors file: its first 8 bytes give a header of 18446744073709551615 bytes"
        ));
        let mut cut = 200u64.to_le_bytes().to_vec();
        cut.extend_from_slice(b"{}");
        assert_eq!(
            err(&Store::memory(&cut, "d.safetensors")),
            "d.safetensors: truncated: the header is 200 bytes but only 2 follow its length; the \
             file was cut short: write or copy it again"
        );
        assert!(err(&file("[1]", &[])).contains("its header is not a JSON object of tensors"));
        assert!(
            err(&file(r#"{"x":{"dtype":"F32"}}"#, &[])).contains(
                "the header's entry for tensor \"x\" is not {dtype, shape, data_offsets}"
            )
        );
        assert_eq!(
            err(&file(
                r#"{"x":{"dtype":"F32","shape":[3],"data_offsets":[4,0]}}"#,
                &[]
            )),
            "d.safetensors: tensor \"x\" has data_offsets [4, 0]: its end is before its start"
        );
        assert_eq!(
            err(&file(
                r#"{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
                &[0; 8]
            )),
            "d.safetensors: tensor \"x\" has 8 bytes of data (data_offsets [0, 8]) but shape \
             (3,) of F32 takes 12"
        );
        // The data is cut short.
        assert_eq!(
            err(&file(TWO, &[0; 20])),
            "d.safetensors: truncated: tensor \"y\" ends at byte 24 of the data but only 20 bytes \
             of data follow the header; the file was cut short: write or copy it again"
        );
        // An unsupported dtype is an error only for the tensors read.
        let s = file(
            r#"{"x":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]},"y":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}"#,
            &[1, 0, 3, 4],
        );
        let h = header(&s).unwrap();
        h.array(&s, "y", "data.y_key").unwrap();
        assert_eq!(
            h.array(&s, "x", "data.x_key").unwrap_err().to_string(),
            "d.safetensors: tensor \"x\" has dtype BOOL, which is not read: save it as one of \
             float32, float64, float16, bfloat16, uint8, int8, uint16, int16, uint32, int32, \
             uint64, int64"
        );
    }
}
