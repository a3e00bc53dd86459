//! Bytes a table is read from: a file read at offsets by any number of threads at once
//! (`pread`), or bytes in memory (the fuzz targets).

use std::fs::File;
use std::io;

/// Bytes readable at any offset from several threads at once.
pub trait Source: Sync {
    /// The number of bytes.
    fn size(&self) -> u64;

    /// Reads into `buf` from `offset`; returns how many bytes were read (0 at the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;

    /// Reads until `buf` is full or the end; returns how many bytes were read.
    fn read_full(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            match self.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    }
}

/// A file and its size when opened.
pub struct FileSource {
    file: File,
    size: u64,
}

impl FileSource {
    pub fn new(file: File) -> io::Result<FileSource> {
        let size = file.metadata()?.len();
        Ok(FileSource { file, size })
    }
}

impl Source for FileSource {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(&self.file, buf, offset)
    }
}

impl Source for &[u8] {
    fn size(&self) -> u64 {
        self.len() as u64
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = (offset as usize).min(self.len());
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

/// A [`Source`] as a stream from the start (for the `csv` crate).
pub struct Stream<'a> {
    src: &'a dyn Source,
    pos: u64,
}

impl<'a> Stream<'a> {
    pub fn new(src: &'a dyn Source) -> Stream<'a> {
        Stream { src, pos: 0 }
    }
}

impl io::Read for Stream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.src.read_at(buf, self.pos)?;
        self.pos += n as u64;
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
pub fn line_at(src: &dyn Source, offset: u64) -> io::Result<u64> {
    let mut buf = vec![0u8; 1 << 20];
    let (mut pos, mut line) = (0u64, 1u64);
    while pos < offset {
        let want = ((offset - pos) as usize).min(buf.len());
        let n = src.read_full(&mut buf[..want], pos)?;
        if n == 0 {
            break;
        }
        line += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        pos += n as u64;
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn bytes_read_at_offsets_and_as_a_stream() {
        let b: &[u8] = b"a,b\n1,2\n\n3,4";
        let mut buf = [0u8; 4];
        assert_eq!(b.read_full(&mut buf, 9).unwrap(), 3);
        assert_eq!(&buf[..3], b"3,4");
        assert_eq!(b.read_at(&mut buf, 99).unwrap(), 0);
        let mut s = String::new();
        Stream::new(&b).read_to_string(&mut s).unwrap();
        assert_eq!(s.as_bytes(), b);
        assert_eq!(line_at(&b, 0).unwrap(), 1);
        assert_eq!(line_at(&b, 4).unwrap(), 2);
        assert_eq!(line_at(&b, 9).unwrap(), 4);
    }
}
