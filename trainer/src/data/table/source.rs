//! Bytes a table is read from: a file read at offsets by any number of threads at once
//! (`pread`), or bytes in memory (the fuzz targets).

use std::fs::File;
use std::io;
use std::ops::Range;

use memmap2::Mmap;

/// Bytes read by several threads at once, whose pages a reader hands back once it is past them
/// (so a mapped file does not stay in the process's resident memory).
pub trait Source: Sync {
    /// All the bytes.
    fn bytes(&self) -> &[u8];

    /// Hands the pages of `range` back (best effort). Reading them again reads the same bytes.
    fn release(&self, _range: Range<usize>) {}
}

impl Source for &[u8] {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// A file, memory-mapped read-only (no copy into the process: the page cache's pages are
/// mapped, and handed back as the readers pass them).
pub struct FileSource {
    /// None for an empty file (which cannot be mapped).
    map: Option<Mmap>,
}

impl FileSource {
    pub fn new(file: File) -> io::Result<FileSource> {
        if file.metadata()?.len() == 0 {
            return Ok(FileSource { map: None });
        }
        // SAFETY: the map is read only and private to this source; like every reader of a
        // mapped file we rely on the file not being truncated or rewritten while it is read
        // (docs/data.md says so).
        let map = unsafe { Mmap::map(&file) }?;
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Sequential);
        Ok(FileSource { map: Some(map) })
    }
}

impl Source for FileSource {
    fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    fn release(&self, range: Range<usize>) {
        #[cfg(unix)]
        if let Some(map) = &self.map {
            const PAGE: usize = 4096;
            let start = range.start.next_multiple_of(PAGE);
            let end = (range.end & !(PAGE - 1)).min(map.len());
            if end > start {
                // SAFETY: the map is read only and file-backed, so dropping its pages loses
                // nothing: a later access maps the file's unchanged content again, so the bytes
                // any reference into the range reads stay the same.
                let _ = unsafe {
                    map.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        start,
                        end - start,
                    )
                };
            }
        }
        #[cfg(not(unix))]
        let _ = range;
    }
}

/// Bytes handed back every this many bytes read.
pub const RELEASE_EVERY: usize = 4 << 20;

/// A [`Source`] as a stream from the start (for the `csv` crate), handing pages back behind it.
pub struct Stream<'a> {
    src: &'a dyn Source,
    pos: usize,
    released: usize,
}

impl<'a> Stream<'a> {
    pub fn new(src: &'a dyn Source) -> Stream<'a> {
        Stream {
            src,
            pos: 0,
            released: 0,
        }
    }
}

impl io::Read for Stream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let bytes = self.src.bytes();
        let n = buf.len().min(bytes.len() - self.pos);
        buf[..n].copy_from_slice(&bytes[self.pos..self.pos + n]);
        self.pos += n;
        if self.pos - self.released >= RELEASE_EVERY {
            self.src.release(self.released..self.pos);
            self.released = self.pos;
        }
        Ok(n)
    }
}

/// An anonymous in-memory file holding `bytes` (`memfd_create`).
pub fn memory_file(bytes: &[u8]) -> io::Result<File> {
    use std::io::Write;
    use std::os::fd::FromRawFd;
    // SAFETY: a plain system call with a NUL-terminated name.
    let fd = unsafe { libc::memfd_create(c"table".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(bytes)?;
    Ok(file)
}

/// `file` opened anew (a file description of its own: its own offset).
pub fn reopen(file: &File) -> io::Result<File> {
    use std::os::fd::AsRawFd;
    File::open(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// 1 + the number of line feeds before `offset`: the 1-based line that byte is on.
pub fn line_at(src: &dyn Source, offset: usize) -> u64 {
    let bytes = src.bytes();
    let offset = offset.min(bytes.len());
    let line = 1 + bytes[..offset].iter().filter(|&&b| b == b'\n').count() as u64;
    src.release(0..offset);
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn files_are_mapped_and_streamed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.csv");
        let text = b"a,b\n1,2\n\n3,4";
        std::fs::write(&p, text).unwrap();
        let src = FileSource::new(File::open(&p).unwrap()).unwrap();
        assert_eq!(src.bytes(), text);
        src.release(0..text.len());
        assert_eq!(src.bytes(), text);
        let mut s = String::new();
        Stream::new(&src).read_to_string(&mut s).unwrap();
        assert_eq!(s.as_bytes(), text);
        assert_eq!(line_at(&src, 0), 1);
        assert_eq!(line_at(&src, 4), 2);
        assert_eq!(line_at(&src, 9), 4);
        std::fs::write(&p, b"").unwrap();
        let empty = FileSource::new(File::open(&p).unwrap()).unwrap();
        assert_eq!(empty.bytes(), b"");
    }
}
