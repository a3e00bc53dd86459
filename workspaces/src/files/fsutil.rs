//! File helpers shared by the crate and by front ends.

use std::path::Path;

use crate::{Error, Result};

/// Replaces `path` with `bytes` atomically: readers see the old content or the new, never a mix,
/// and after a crash the file is one or the other ([`ddp_trainer::fsutil::write_atomic`]: a
/// temporary `.NAME.tmp-PID-N` in the same folder, fsynced and renamed over `path`).
///
/// On failure `path` is left as it was and the error ([`Error::Write`]) names `path`. A bare file
/// name is written in the current folder. The folder must exist (a missing folder is
/// [`std::io::ErrorKind::NotFound`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    ddp_trainer::fsutil::write_atomic(path, bytes).map_err(|source| Error::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// A folder held open to look up its entries' metadata relative to it (`fstatat`): at thousands
/// of run folders much cheaper than resolving each whole path again.
pub struct Folder {
    file: std::fs::File,
}

impl Folder {
    pub fn open(path: &Path) -> Option<Folder> {
        std::fs::File::open(path).ok().map(|file| Folder { file })
    }

    /// The metadata of `rel` (a path relative to the folder; links followed), if it exists.
    pub fn stat(&self, rel: &[u8]) -> Option<libc::stat> {
        use std::os::unix::io::AsRawFd;
        let c = std::ffi::CString::new(rel).ok()?;
        // SAFETY: the folder's descriptor is open while `self` lives, `c` is NUL-terminated and
        // `st` is written by the call.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::fstatat(self.file.as_raw_fd(), c.as_ptr(), &mut st, 0) };
        (rc == 0).then_some(st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_folder_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("missing").join("out.csv");
        let e = write_atomic(&p, b"x").unwrap_err();
        assert!(e.to_string().starts_with(&p.display().to_string()), "{e}");
        assert_eq!(e.exit_code(), 2);
        assert!(!dir.path().join("missing").exists());
    }

    #[test]
    fn a_failed_write_is_a_write_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        // Renaming a file over a folder fails.
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let e = write_atomic(&sub, b"new").unwrap_err();
        assert!(
            matches!(&e, Error::Write { path, .. } if *path == sub),
            "{e:?}"
        );
        assert!(e.to_string().starts_with(&sub.display().to_string()), "{e}");
        assert_eq!(e.exit_code(), 1);
    }
}
