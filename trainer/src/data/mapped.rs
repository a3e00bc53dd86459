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
//!
//! A page fault may still map more than the page it is for: the kernel maps the cached pages
//! around it (fault-around, 64 KiB by default) and whole large folios of the page cache, never
//! beyond the page table the fault is in (the 2 MiB of address space one table maps with 4 KiB
//! pages). [`MappedFile::release_tables`] therefore hands back the whole page-table spans that
//! the bytes read lie in. A fault in a large folio maps all of it (up to 2 MiB), so a reader of
//! scattered samples hands each one's spans back as soon as it is copied out, not once per
//! batch. Handing back only the bytes read, once per batch, left the neighbours mapped: one
//! epoch over a 200 MiB tensor file peaked at 178–231 MiB per replica, against 35 MiB now.

use std::fs::File;
use std::ops::Range;
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

    /// Hands back every page-table span (see the module docs) that the byte `ranges` touch, each
    /// run of adjacent spans in one call.
    pub fn release_tables(&self, ranges: impl IntoIterator<Item = Range<usize>>) {
        let span = table_span();
        let base = self.map.as_ptr() as usize;
        let mut spans: Vec<(usize, usize)> = ranges
            .into_iter()
            .filter(|r| !r.is_empty())
            .map(|r| ((base + r.start) / span, (base + r.end - 1) / span + 1))
            .collect();
        spans.sort_unstable();
        let mut run: Option<(usize, usize)> = None;
        for (a, b) in spans {
            match &mut run {
                Some((_, end)) if a <= *end => *end = (*end).max(b),
                _ => {
                    if let Some(r) = run.replace((a, b)) {
                        self.release_spans(r, span, base);
                    }
                }
            }
        }
        if let Some(r) = run {
            self.release_spans(r, span, base);
        }
    }

    /// Releases spans `first..end` (in units of `span` bytes of address space), cut to the map.
    fn release_spans(&self, (first, end): (usize, usize), span: usize, base: usize) {
        let start = (first * span).saturating_sub(base);
        let stop = (end * span).saturating_sub(base).min(self.map.len());
        if stop > start {
            self.release(start, stop - start);
        }
    }
}

/// The bytes of address space one page table maps: a page of 8-byte entries, each mapping a
/// page (2 MiB with 4 KiB pages).
fn table_span() -> usize {
    static SPAN: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SPAN.get_or_init(|| {
        #[cfg(unix)]
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        #[cfg(not(unix))]
        let page = 4096;
        let page = usize::try_from(page)
            .ok()
            .filter(|&p| p > 0)
            .unwrap_or(4096);
        page * (page / 8)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The resident KiB of the mapping that holds `p` (its `Rss:` line in /proc/self/smaps).
    fn resident_kib(p: *const u8) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = first.split_once('-')
                && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                inside = (a..b).contains(&(p as usize));
            } else if inside && let Some(kib) = line.strip_prefix("Rss:") {
                return kib.trim().trim_end_matches(" kB").parse().unwrap();
            }
        }
        panic!("no mapping holds {p:?}")
    }

    /// Reading one byte in every 100 KiB of a 64 MiB file maps more than those pages (on this
    /// machine's kernel 41 MiB: 64 KiB of fault-around each, of which handing back the pages read
    /// left 39 MiB mapped); handing back the page-table spans of the bytes read leaves nothing.
    #[test]
    fn released_tables_leave_nothing_mapped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.bin");
        // Written a page at a time: the page cache holds small folios, which faults map with
        // their cached neighbours (fault-around).
        let mut f = File::create(&p).unwrap();
        for _ in 0..(64 << 20) / 4096 {
            std::io::Write::write_all(&mut f, &[7u8; 4096]).unwrap();
        }
        drop(f);
        let m = MappedFile::open(&p).unwrap();
        let at = m.bytes().as_ptr();
        let offsets: Vec<usize> = (0..m.len()).step_by(100 << 10).collect();
        let sum: u64 = offsets.iter().map(|&o| u64::from(m.bytes()[o])).sum();
        assert_eq!(sum, 7 * offsets.len() as u64);
        let read = resident_kib(at);
        assert!(read >= 4 * offsets.len() as u64, "{read} KiB");
        m.release_tables(offsets.iter().map(|&o| o..o + 1));
        assert_eq!(resident_kib(at), 0, "{read} KiB before");
    }

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
        m.release_tables([0..1, 5000..5001, 9999..10_000, 3..3]);
        assert_eq!(m.bytes(), bytes.as_slice());
        let missing = MappedFile::open(&dir.path().join("no.bin")).unwrap_err();
        assert!(matches!(missing, Error::Io { .. }), "{missing}");
    }
}
