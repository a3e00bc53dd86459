//! Token streams: ids in memory (an encoded text) or in a memory-mapped token file, behind one
//! [`TokenSource`] that copies windows out as `u32`.
//!
//! A token file (`train.bin`, `val.bin`) is a plain array of little-endian ids, `u16` (the default,
//! as GPT data scripts write them) or `u32` ([`TokenDtype`]), with no header. It is mapped, not read
//! ([`MappedFile`](crate::data::mapped::MappedFile)): opening a file of any size costs no memory, and the pages a window reads are the page cache's
//! (shared, clean, dropped under memory pressure). [`TokenSource::map`] checks every id against
//! the vocabulary once, in parallel over rayon's pool, a segment at a time, handing each checked
//! segment's pages back to the kernel (`MADV_DONTNEED`), so the check does not leave the file
//! resident either. [`TokenSource::release_pages`] does the same for the pages windows have read
//! (the training loop calls it after every batch is copied out), and the map is advised
//! `MADV_RANDOM`, so a window's read maps its own pages and not a read-around of its neighbours.
//!
//! Checking speed, measured on a 2-core VM with `cargo test --profile test -p ddp-trainer --lib
//! data::text::tokens -- --ignored --nocapture`: a 1 GiB `u16` file in the page cache is checked
//! at 25–27 GB/s (the same on one thread: the loop runs at memory speed, page faults included);
//! a 4 GiB sparse file read for the first time at 1.2 GB/s (the kernel filling the page cache),
//! VmRSS growing by under 1 MiB.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use rayon::prelude::*;

use crate::data::mapped::MappedFile;
use crate::error::{Error, Result};
pub use crate::spec::TokenDtype;

/// A mapped token file.
#[derive(Debug)]
struct Mapped {
    file: MappedFile,
    dtype: TokenDtype,
}

#[derive(Clone, Debug)]
enum Store {
    Memory(Arc<[u32]>),
    Mapped(Arc<Mapped>),
}

/// A contiguous run of token ids, in memory or mapped from a file. Cloning and
/// [`slice`](Self::slice) share the ids.
#[derive(Clone, Debug)]
pub struct TokenSource {
    store: Store,
    /// First id of this source in the store, and how many.
    start: usize,
    len: usize,
}

/// Bytes checked between two hand-backs of the pages to the kernel.
const SEGMENT: usize = 64 << 20;
/// Bytes one rayon task checks.
const CHUNK: usize = 256 << 10;

impl TokenSource {
    /// Ids held in memory (an encoded text).
    pub fn memory(ids: Vec<u32>) -> Self {
        let len = ids.len();
        TokenSource {
            store: Store::Memory(ids.into()),
            start: 0,
            len,
        }
    }

    /// Maps the token file `path` of `dtype` ids and checks that every id is below `vocab_size`.
    /// Errors name the file: a length that is not a multiple of the id size, or the first id out
    /// of range (its token index and value).
    pub fn map(path: &Path, dtype: TokenDtype, vocab_size: usize) -> Result<Self> {
        let src = Self::map_unchecked(path, dtype)?;
        src.check_ids(vocab_size)?;
        Ok(src)
    }

    /// Maps `path` checking only its length (not the ids; nothing of the file is read).
    pub fn map_unchecked(path: &Path, dtype: TokenDtype) -> Result<Self> {
        // Windows are read at random offsets: the map is advised `MADV_RANDOM` (without it a
        // replica mapped about 0.7 MiB of read-around per window read).
        let file = MappedFile::open(path)?;
        let bytes = file.len();
        if bytes % dtype.size() != 0 {
            return Err(Error::data(
                path,
                format!(
                    "the token file has {bytes} bytes, not a multiple of {} ({dtype} ids); is \
                     dtype = \"{}\" what wrote it?",
                    dtype.size(),
                    match dtype {
                        TokenDtype::U16 => "u32",
                        TokenDtype::U32 => "u16",
                    }
                ),
            ));
        }
        let len = bytes / dtype.size();
        Ok(TokenSource {
            store: Store::Mapped(Arc::new(Mapped { file, dtype })),
            start: 0,
            len,
        })
    }

    /// Number of ids.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapped file, or `None` for ids in memory.
    pub fn path(&self) -> Option<&Path> {
        match &self.store {
            Store::Memory(_) => None,
            Store::Mapped(m) => Some(m.file.path()),
        }
    }

    /// The ids `range` of this source, sharing them. Panics when `range` is out of bounds.
    pub fn slice(&self, range: Range<usize>) -> Self {
        assert!(
            range.start <= range.end && range.end <= self.len,
            "token range {range:?} outside 0..{}",
            self.len
        );
        TokenSource {
            store: self.store.clone(),
            start: self.start + range.start,
            len: range.len(),
        }
    }

    /// Copies ids `[start, start + out.len())` into `out`. Panics when they are out of bounds.
    pub fn read(&self, start: usize, out: &mut [u32]) {
        let n = out.len();
        assert!(
            start <= self.len && n <= self.len - start,
            "tokens {start}..{} outside 0..{}",
            start + n,
            self.len
        );
        let first = self.start + start;
        match &self.store {
            Store::Memory(ids) => out.copy_from_slice(&ids[first..first + n]),
            Store::Mapped(m) => {
                let size = m.dtype.size();
                decode(
                    m.dtype,
                    &m.file.bytes()[first * size..(first + n) * size],
                    out,
                );
            }
        }
    }

    /// The ids `[start, start + n)` as a new vector.
    pub fn to_vec(&self, start: usize, n: usize) -> Vec<u32> {
        let mut out = vec![0; n];
        self.read(start, &mut out);
        out
    }

    /// Checks that every id is below `vocab_size`; the error names the file (or "tokens"), the
    /// token index (in this source), the id and `vocab_size`.
    pub fn check_ids(&self, vocab_size: usize) -> Result<()> {
        let found = match &self.store {
            Store::Memory(ids) => {
                first_at_least(&ids[self.start..self.start + self.len], vocab_size)
            }
            Store::Mapped(m) => self.first_mapped_at_least(m, vocab_size),
        };
        match found {
            None => Ok(()),
            Some((index, id)) => Err(Error::data(
                self.path().unwrap_or(Path::new("tokens")),
                format!(
                    "token {index} has id {id}, not below vocab_size = {vocab_size}; set \
                     vocab_size to the tokenizer's vocabulary size (at least {})",
                    u64::from(id) + 1
                ),
            )),
        }
    }

    /// The first (index, id) of a mapped source with id ≥ `vocab`, checked a segment at a time.
    fn first_mapped_at_least(&self, m: &Mapped, vocab: usize) -> Option<(usize, u32)> {
        if vocab as u64 >= m.dtype.ids() {
            return None;
        }
        let size = m.dtype.size();
        let bytes = &m.file.bytes()[self.start * size..(self.start + self.len) * size];
        let per_segment = SEGMENT / size;
        let per_chunk = CHUNK / size;
        for (s, seg) in bytes.chunks(per_segment * size).enumerate() {
            let hit = seg
                .par_chunks(per_chunk * size)
                .enumerate()
                .find_first(|(_, c)| max_id(m.dtype, c) >= vocab as u32)
                .map(|(c, chunk)| {
                    let mut ids = vec![0; chunk.len() / size];
                    decode(m.dtype, chunk, &mut ids);
                    let (i, id) = first_at_least(&ids, vocab).expect("the chunk holds one");
                    (s * per_segment + c * per_chunk + i, id)
                });
            m.file
                .release(self.start * size + s * per_segment * size, seg.len());
            if hit.is_some() {
                return hit;
            }
        }
        None
    }

    /// Hands the pages of a mapped source that reads have made resident back to the kernel (they
    /// stay in the page cache; the next read maps them again). No effect for ids in memory.
    pub fn release_pages(&self) {
        if let Store::Mapped(m) = &self.store {
            let size = m.dtype.size();
            m.file.release(self.start * size, self.len * size);
        }
    }
}

/// Little-endian ids of `dtype` in `bytes` into `out` (`out.len()` ids).
fn decode(dtype: TokenDtype, bytes: &[u8], out: &mut [u32]) {
    match dtype {
        TokenDtype::U16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = u32::from(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        TokenDtype::U32 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
    }
}

/// The largest little-endian id in `bytes` (0 when empty): a branch-free loop that vectorises.
fn max_id(dtype: TokenDtype, bytes: &[u8]) -> u32 {
    match dtype {
        TokenDtype::U16 => u32::from(
            bytes
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .fold(0, u16::max),
        ),
        TokenDtype::U32 => bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .fold(0, u32::max),
    }
}

/// The first (index, id) with id ≥ `vocab`.
fn first_at_least(ids: &[u32], vocab: usize) -> Option<(usize, u32)> {
    ids.iter()
        .position(|&id| id as usize >= vocab)
        .map(|i| (i, ids[i]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::path::PathBuf;

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn u16_file(ids: &[u16]) -> Vec<u8> {
        ids.iter().flat_map(|i| i.to_le_bytes()).collect()
    }

    #[test]
    fn memory_source_reads_and_slices() {
        let s = TokenSource::memory((0..10).collect());
        assert_eq!((s.len(), s.is_empty(), s.path()), (10, false, None));
        assert_eq!(s.to_vec(7, 3), vec![7, 8, 9]);
        let t = s.slice(2..8);
        assert_eq!(t.len(), 6);
        assert_eq!(t.to_vec(0, 6), vec![2, 3, 4, 5, 6, 7]);
        assert_eq!(t.slice(4..6).to_vec(0, 2), vec![6, 7]);
        assert!(t.slice(6..6).is_empty());
        t.check_ids(8).unwrap();
        assert_eq!(
            t.check_ids(7).unwrap_err().to_string(),
            "tokens: token 5 has id 7, not below vocab_size = 7; set vocab_size to the \
             tokenizer's vocabulary size (at least 8)"
        );
    }

    #[test]
    #[should_panic(expected = "tokens 8..11 outside 0..10")]
    fn reading_past_the_end_panics() {
        TokenSource::memory((0..10).collect()).to_vec(8, 3);
    }

    #[test]
    fn maps_u16_and_u32_files_of_odd_sizes() {
        let dir = tempfile::tempdir().unwrap();
        // 7 ids of u16 (14 bytes, not a multiple of 4 or of a page) with high ids.
        let ids: [u16; 7] = [0, 1, 65535, 300, 7, 40000, 2];
        let p = write(dir.path(), "train.bin", &u16_file(&ids));
        let s = TokenSource::map(&p, TokenDtype::U16, 65536).unwrap();
        assert_eq!(s.len(), 7);
        assert_eq!(s.path(), Some(p.as_path()));
        assert_eq!(s.to_vec(0, 7), ids.map(u32::from).to_vec());
        assert_eq!(s.slice(3..6).to_vec(1, 2), vec![7, 40000]);
        // u32: ids above 65535, 5 ids (20 bytes).
        let ids32: [u32; 5] = [70000, 0, u32::MAX - 1, 5, 123_456_789];
        let bytes: Vec<u8> = ids32.iter().flat_map(|i| i.to_le_bytes()).collect();
        let p32 = write(dir.path(), "val.bin", &bytes);
        let s = TokenSource::map(&p32, TokenDtype::U32, u32::MAX as usize).unwrap();
        assert_eq!(s.to_vec(0, 5), ids32.to_vec());
        // The same bytes read as u16 are 10 ids.
        let s16 = TokenSource::map_unchecked(&p32, TokenDtype::U16).unwrap();
        assert_eq!(s16.len(), 10);
        assert_eq!(s16.to_vec(0, 2), vec![70000 & 0xffff, 70000 >> 16]);
        // An empty file maps to an empty source.
        let e = write(dir.path(), "empty.bin", &[]);
        let s = TokenSource::map(&e, TokenDtype::U16, 10).unwrap();
        assert!(s.is_empty());
        s.release_pages();
    }

    #[test]
    fn bad_lengths_and_ids_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "train.bin", &[1, 0, 2, 0, 3]);
        assert_eq!(
            TokenSource::map(&p, TokenDtype::U16, 10)
                .unwrap_err()
                .to_string(),
            format!(
                "{}: the token file has 5 bytes, not a multiple of 2 (u16 ids); is dtype = \
                 \"u32\" what wrote it?",
                p.display()
            )
        );
        let p = write(dir.path(), "val.bin", &[0; 6]);
        let e = TokenSource::map(&p, TokenDtype::U32, 10).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: the token file has 6 bytes, not a multiple of 4 (u32 ids); is dtype = \
                 \"u16\" what wrote it?",
                p.display()
            )
        );
        assert_eq!(e.exit_code(), crate::error::EXIT_CONFIG);
        let p = write(dir.path(), "ids.bin", &u16_file(&[3, 9, 10, 2, 11]));
        let e = TokenSource::map(&p, TokenDtype::U16, 10).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: token 2 has id 10, not below vocab_size = 10; set vocab_size to the \
                 tokenizer's vocabulary size (at least 11)",
                p.display()
            )
        );
        TokenSource::map(&p, TokenDtype::U16, 12).unwrap();
        let missing = TokenSource::map(&dir.path().join("no.bin"), TokenDtype::U16, 10);
        assert!(matches!(missing, Err(Error::Io { .. })));
    }

    #[test]
    fn the_first_bad_id_is_found_across_chunks_and_segments() {
        let dir = tempfile::tempdir().unwrap();
        // 40 M u16 ids (80 MB: two segments, hundreds of chunks), bad ids late in the second
        // segment and at the very end; the first is reported.
        let n = 40_000_000usize;
        let mut ids: Vec<u16> = (0..n).map(|i| (i % 1000) as u16).collect();
        let first_bad = SEGMENT / 2 + 3 * CHUNK / 2 + 17;
        ids[first_bad] = 1000;
        ids[n - 1] = 5000;
        let p = write(dir.path(), "big.bin", &u16_file(&ids));
        let e = TokenSource::map(&p, TokenDtype::U16, 1000).unwrap_err();
        assert!(
            e.to_string().contains(&format!(
                "token {first_bad} has id 1000, not below vocab_size = 1000"
            )),
            "{e}"
        );
        let s = TokenSource::map(&p, TokenDtype::U16, 5001).unwrap();
        // A slice reports indices relative to itself.
        let tail = s.slice(first_bad + 1..n);
        let e = tail.check_ids(1000).unwrap_err().to_string();
        assert!(
            e.contains(&format!("token {} has id 5000", n - first_bad - 2)),
            "{e}"
        );
        assert_eq!(
            tail.to_vec(n - first_bad - 3, 2),
            vec![((n - 2) % 1000) as u32, 5000]
        );
    }

    fn vm_rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// A 4 GiB (sparse) token file maps, is checked and read at its end without becoming
    /// resident. Ignored by default: it reads 4 GiB through the page cache (a few seconds).
    #[test]
    #[ignore]
    fn a_multi_gigabyte_file_maps_without_becoming_resident() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("train.bin");
        let bytes = 4u64 << 30;
        let f = File::create(&p).unwrap();
        f.set_len(bytes).unwrap();
        // One real id near the end; the rest is a hole of zeros.
        use std::os::unix::fs::FileExt;
        f.write_all_at(&u16_file(&[42, 43]), bytes - 4).unwrap();
        drop(f);
        let before = vm_rss_kib();
        let t = std::time::Instant::now();
        let s = TokenSource::map(&p, TokenDtype::U16, 50).unwrap();
        let took = t.elapsed().as_secs_f64();
        let n = (bytes / 2) as usize;
        assert_eq!(s.len(), n);
        assert_eq!(s.to_vec(n - 3, 3), vec![0, 42, 43]);
        let after = vm_rss_kib();
        println!(
            "4 GiB: mapped and checked in {took:.2} s ({:.2} GB/s), VmRSS {before} -> {after} KiB",
            bytes as f64 / took / 1e9
        );
        assert!(after < before + 128 * 1024, "VmRSS {before} -> {after} KiB");
        s.release_pages();
    }

    /// Id-check throughput on a 1 GiB u16 file in the page cache (run with --ignored --nocapture).
    #[test]
    #[ignore]
    fn check_speed() {
        let dir = tempfile::tempdir().unwrap();
        let n = 1usize << 29;
        let mut bytes: Vec<u8> = (0..n)
            .flat_map(|i| ((i % 50_000) as u16).to_le_bytes())
            .collect();
        // The one bad id is the last: the check reads every id to find it.
        bytes[2 * n - 2..].copy_from_slice(&50_000u16.to_le_bytes());
        let p = write(dir.path(), "train.bin", &bytes);
        drop(bytes);
        let s = TokenSource::map_unchecked(&p, TokenDtype::U16).unwrap();
        for round in 0..3 {
            let t = std::time::Instant::now();
            let e = s.check_ids(50_000).unwrap_err().to_string();
            let dt = t.elapsed().as_secs_f64();
            assert!(e.contains(&format!("token {} has id 50000", n - 1)), "{e}");
            println!(
                "round {round}: {:.2} GB/s on {} threads",
                (2 * n) as f64 / dt / 1e9,
                rayon::current_num_threads()
            );
        }
    }
}
