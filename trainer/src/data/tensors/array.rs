//! A typed view of one array in a tensor file: its element type, its shape (the leading dimension
//! is the sample, a "row"), and where its bytes start in the file, which is mapped ([`Store`]).
//! Rows are read straight out of the map, and the pages they were read from handed back.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::dtype::Dtype;
use crate::data::mapped::MappedFile;
use crate::error::{Error, Result};

/// The bytes of a tensor file: mapped, or held in memory (what the fuzz targets read).
#[derive(Debug)]
pub enum Store {
    Mapped(MappedFile),
    Memory { bytes: Vec<u8>, path: PathBuf },
}

impl Store {
    /// Maps `path`.
    pub fn map(path: &Path) -> Result<Arc<Store>> {
        Ok(Arc::new(Store::Mapped(MappedFile::open(path)?)))
    }

    /// `bytes` read as if they were the file `path` (named in messages).
    pub fn memory(bytes: &[u8], path: &str) -> Arc<Store> {
        Arc::new(Store::Memory {
            bytes: bytes.to_vec(),
            path: PathBuf::from(path),
        })
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Store::Mapped(m) => m.bytes(),
            Store::Memory { bytes, .. } => bytes,
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            Store::Mapped(m) => m.path(),
            Store::Memory { path, .. } => path,
        }
    }

    /// Hands back the pages that reading bytes `ranges` may have mapped (see
    /// [`MappedFile::release_tables`]; nothing for bytes in memory).
    pub fn release(&self, ranges: impl IntoIterator<Item = Range<usize>>) {
        if let Store::Mapped(m) = self {
            m.release_tables(ranges);
        }
    }
}

/// One array of a file: `shape[0]` rows of `shape[1..]` elements of `dtype`, little-endian, in
/// C order, from byte `offset` of its [`Store`].
#[derive(Clone, Debug)]
pub struct Array {
    store: Arc<Store>,
    /// How messages name it: `tensor "x"`, `member "x.npy"`, `x.npy`.
    pub label: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    offset: usize,
    /// Bytes per row.
    row_bytes: usize,
}

impl Array {
    /// The array `label` of `store`; the error (naming the file) says when its shape has no
    /// leading dimension, when its size overflows, or when its bytes run past the end of the file.
    pub fn new(
        store: Arc<Store>,
        label: String,
        dtype: Dtype,
        shape: Vec<usize>,
        offset: usize,
    ) -> Result<Array> {
        let bad = |msg: String| Err(Error::data(store.path(), msg));
        if shape.is_empty() {
            return bad(format!(
                "{label} is a scalar (shape ()): its leading dimension must be the samples"
            ));
        }
        let Some(total) = byte_len(dtype, &shape) else {
            return bad(format!(
                "{label} has shape {} of {dtype}: more bytes than can be addressed",
                show_shape(&shape)
            ));
        };
        let row_bytes = byte_len(dtype, &shape[1..]).expect("a factor of the total");
        let len = store.bytes().len();
        if offset.checked_add(total).is_none_or(|end| end > len) {
            return bad(format!(
                "truncated: {label} ({} of {dtype}, {total} bytes from byte {offset}) runs past \
                 the end of the file ({len} bytes); the file was cut short: write or copy it again",
                show_shape(&shape)
            ));
        }
        Ok(Array {
            store,
            label,
            dtype,
            shape,
            offset,
            row_bytes,
        })
    }

    /// The file the array is in.
    pub fn path(&self) -> &Path {
        self.store.path()
    }

    /// Number of rows (samples).
    pub fn rows(&self) -> usize {
        self.shape[0]
    }

    /// Elements per row.
    pub fn row_len(&self) -> usize {
        self.shape[1..].iter().product()
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// The bytes of rows `rows`. Panics when they are out of bounds.
    pub fn rows_bytes(&self, rows: Range<usize>) -> &[u8] {
        &self.store.bytes()[self.byte_range(rows)]
    }

    /// The bytes of row `i`. Panics when it is out of bounds.
    pub fn row(&self, i: usize) -> &[u8] {
        self.rows_bytes(i..i + 1)
    }

    fn byte_range(&self, rows: Range<usize>) -> Range<usize> {
        assert!(
            rows.start <= rows.end && rows.end <= self.rows(),
            "rows {rows:?} outside 0..{}",
            self.rows()
        );
        self.offset + rows.start * self.row_bytes..self.offset + rows.end * self.row_bytes
    }

    /// Hands back the pages that reading rows `rows` may have mapped.
    pub fn release(&self, rows: Range<usize>) {
        self.store.release([self.byte_range(rows)]);
    }

    /// Hands back the pages that reading the rows `indices` may have mapped.
    pub fn release_rows(&self, indices: &[usize]) {
        self.store
            .release(indices.iter().map(|&i| self.byte_range(i..i + 1)));
    }
}

/// Bytes of `shape` elements of `dtype`; `None` on overflow.
pub fn byte_len(dtype: Dtype, shape: &[usize]) -> Option<usize> {
    shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
}

/// `(3, 28, 28)`, as NumPy prints shapes and `.npy` headers hold them (`(5,)`, `()`).
pub fn show_shape(shape: &[usize]) -> String {
    match shape {
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(n: usize) -> Arc<Store> {
        Store::memory(&(0..n).map(|i| i as u8).collect::<Vec<_>>(), "m.bin")
    }

    #[test]
    fn rows_are_read_from_the_offset() {
        let a = Array::new(store(64), "x".into(), Dtype::U16, vec![3, 2, 2], 10).unwrap();
        assert_eq!((a.rows(), a.row_len(), a.row_bytes()), (3, 4, 8));
        assert_eq!(a.row(1), &[18, 19, 20, 21, 22, 23, 24, 25]);
        assert_eq!(a.rows_bytes(2..3), &(26..34).collect::<Vec<u8>>()[..]);
        assert_eq!(a.path(), Path::new("m.bin"));
        a.release(0..3);
        a.release_rows(&[2, 0, 2]);
        let empty_rows = Array::new(store(4), "e".into(), Dtype::F32, vec![5, 0], 4).unwrap();
        assert_eq!((empty_rows.rows(), empty_rows.row_bytes()), (5, 0));
        empty_rows.release_rows(&[4]);
    }

    #[test]
    fn bad_arrays_are_errors_naming_the_file() {
        let e = |shape: Vec<usize>, offset| {
            Array::new(store(64), "tensor \"x\"".into(), Dtype::F32, shape, offset)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            e(vec![], 0),
            "m.bin: tensor \"x\" is a scalar (shape ()): its leading dimension must be the samples"
        );
        assert_eq!(
            e(vec![4, 4], 4),
            "m.bin: truncated: tensor \"x\" ((4, 4) of float32, 64 bytes from byte 4) runs past \
             the end of the file (64 bytes); the file was cut short: write or copy it again"
        );
        assert_eq!(
            e(vec![usize::MAX, 2], 0),
            format!(
                "m.bin: tensor \"x\" has shape ({}, 2) of float32: more bytes than can be addressed",
                usize::MAX
            )
        );
        assert!(e(vec![1], usize::MAX).contains("truncated"));
        assert_eq!(show_shape(&[5]), "(5,)");
        assert_eq!(show_shape(&[]), "()");
        assert_eq!(show_shape(&[2, 3]), "(2, 3)");
    }

    #[test]
    fn released_pages_of_a_mapped_file_read_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.bin");
        let bytes: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 256) as u8).collect();
        std::fs::write(&p, &bytes).unwrap();
        let a = Array::new(
            Store::map(&p).unwrap(),
            "x".into(),
            Dtype::U8,
            vec![500, 100],
            0,
        )
        .unwrap();
        let before: Vec<u8> = a.rows_bytes(0..500).to_vec();
        a.release_rows(&[499, 0, 1, 2, 40, 41, 300]);
        assert_eq!(a.rows_bytes(0..500), before.as_slice());
        assert_eq!(a.row(41), &bytes[4100..4200]);
    }
}
