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
