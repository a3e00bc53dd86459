//! A read-only memory-mapped file whose pages are handed back to the kernel once read: what the
//! token files and the tensor files are read through.
//!
//! Mapping a file costs no memory; the pages a read touches become resident (counted in the
//! process's RSS as file pages) until [`MappedFile::release`] hands them back (`MADV_DONTNEED`).
//! They stay in the page cache (shared, clean, dropped under memory pressure), and the next read
//! maps them again. Readers release what they read after every batch, so a file of any size is
//! read with constant resident memory. The map is advised `MADV_RANDOM`: samples and windows are
//! read at random offsets, and the kernel's read-around of their neighbours would map pages no
//! one asked for.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::error::{Error, Result};

/// A file mapped read only.
#[derive(Debug)]
pub struct MappedFile {
    map: Mmap,
    path: PathBuf,
}

impl MappedFile {
    /// Maps `path` (nothing of it is read) and advises the map `MADV_RANDOM`.
    pub fn open(path: &Path) -> Result<MappedFile> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        // SAFETY: the map is read only and private to its reader; like every reader of a mapped
        // file we rely on the file not being truncated or rewritten while training (the docs say so).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        // Best effort: without it a read maps its neighbours' pages too (read-around).
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Random);
        Ok(MappedFile {
            map,
            path: path.to_path_buf(),
        })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// The file's length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Hands the pages of bytes `[offset, offset + len)` back to the kernel (`MADV_DONTNEED`;
    /// the pages holding the range's first and last bytes are handed back whole). Best effort:
    /// an error changes nothing. Ranges past the end are cut to it.
    pub fn release(&self, offset: usize, len: usize) {
        let offset = offset.min(self.map.len());
        let len = len.min(self.map.len() - offset);
        #[cfg(unix)]
        if len > 0 {
            // SAFETY: the map is read only and file-backed, so dropping its pages loses nothing:
            // a later access (from this thread or another one reading the same pages at the same
            // time) maps the file's unchanged content again, so the bytes any reference into the
            // range sees do not change.
            let _ = unsafe {
                self.map
                    .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len)
            };
        }
        #[cfg(not(unix))]
        let _ = (offset, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_reads_and_releases() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.bin");
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &bytes).unwrap();
        let m = MappedFile::open(&p).unwrap();
        assert_eq!(
            (m.len(), m.is_empty(), m.path()),
            (10_000, false, p.as_path())
        );
        assert_eq!(m.bytes(), bytes.as_slice());
        m.release(4095, 3);
        m.release(9_000, 5_000);
        m.release(20_000, 1);
        // Released pages read the same bytes again.
        assert_eq!(m.bytes(), bytes.as_slice());
        let empty = dir.path().join("e.bin");
        std::fs::write(&empty, []).unwrap();
        let e = MappedFile::open(&empty).unwrap();
        assert!(e.is_empty());
        e.release(0, 10);
        let missing = MappedFile::open(&dir.path().join("no.bin")).unwrap_err();
        assert!(matches!(missing, Error::Io { .. }), "{missing}");
    }
}
