//! `.npz` files (NumPy's `np.savez`): a zip archive with one `.npy` member per array, named
//! `KEY.npy` after the keyword it was saved under (`np.savez(f, x=..., y=...)`). `np.savez`
//! stores its members uncompressed, so each array is mapped where its bytes lie inside the
//! archive, ZIP64 archives (members over 4 GiB) included. A compressed member
//! (`np.savez_compressed`) cannot be mapped and is an error saying to save with `np.savez`.

use std::io::Cursor;
use std::sync::Arc;

use zip::{CompressionMethod, ZipArchive};

use super::array::{Array, Store};
use super::npy;
use crate::error::{Error, Result};

/// The members of an archive.
pub struct Members<'a> {
    zip: ZipArchive<Cursor<&'a [u8]>>,
}

/// Reads the archive's directory.
pub fn members(store: &Store) -> Result<Members<'_>> {
    let zip = ZipArchive::new(Cursor::new(store.bytes())).map_err(|e| {
        Error::data(
            store.path(),
            format!(
                "cannot read it as a zip archive ({e}): an .npz file is one (np.savez writes it); \
                 if it was cut short, save or copy it again"
            ),
        )
    })?;
    Ok(Members { zip })
}

impl Members<'_> {
    /// The array saved as `name` (the member `name.npy`, or `name` itself) of `store` (whose
    /// directory this is); `key` is the spec key that named it.
    pub fn array(&mut self, store: &Arc<Store>, name: &str, key: &str) -> Result<Array> {
        let bad = |msg: String| Err(Error::data(store.path(), msg));
        let member = format!("{name}.npy");
        let Some(index) = self
            .zip
            .index_for_name(&member)
            .or_else(|| self.zip.index_for_name(name))
        else {
            let names: Vec<String> = self
                .zip
                .file_names_raw()
                .map(|n| {
                    let n = String::from_utf8_lossy(n);
                    format!("{:?}", n.strip_suffix(".npy").unwrap_or(&n))
                })
                .collect();
            return bad(format!(
                "no array {name:?} ({key}; the member {member}): the archive holds {}; set \
                 data.x_key and data.y_key to the names the arrays were saved under \
                 (np.savez(file, x=inputs, y=targets))",
                if names.is_empty() {
                    "no arrays".into()
                } else {
                    names.join(", ")
                }
            ));
        };
        let f = self.zip.by_index_raw(index).map_err(|e| {
            Error::data(store.path(), format!(
                "cannot find the data of member {member:?} ({e}): the archive is damaged; save it \
                 again with np.savez"
            ))
        })?;
        let label = format!("member {:?}", String::from_utf8_lossy(f.name_raw()));
        if f.encrypted() {
            return bad(format!(
                "{label} is encrypted: save the arrays with np.savez"
            ));
        }
        if f.compression() != CompressionMethod::Stored {
            return bad(format!(
                "{label} is compressed ({}): a compressed member cannot be memory-mapped; save \
                 the arrays with np.savez, not np.savez_compressed",
                f.compression()
            ));
        }
        let (size, start) = (f.compressed_size(), f.data_start().unwrap_or(u64::MAX));
        if f.size() != size {
            return bad(format!(
                "{label} is stored uncompressed but its directory entry gives {size} stored \
                 bytes and {} uncompressed: the archive is damaged; save it again with np.savez",
                f.size()
            ));
        }
        let len = store.bytes().len();
        let end = start.saturating_add(size);
        if end > len as u64 {
            return bad(format!(
                "truncated: {label} ({size} bytes from byte {start}) runs past the end of the \
                 file ({len} bytes); the file was cut short: save or copy it again"
            ));
        }
        let (start, end) = (start as usize, end as usize);
        let h = npy::header(&store.bytes()[start..end], Some(&label), store.path())?;
        Array::new(
            store.clone(),
            label,
            h.dtype,
            h.shape,
            start + h.data_offset,
        )
    }
}
