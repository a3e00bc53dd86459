//! File helpers shared by the trainer and the crates built on it.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Appends `line` and a newline to `path` (created if missing) in one write, as the
/// supervisor appends to `events.jsonl`: a reader never sees half a line from this writer.
pub fn append_line(path: &Path, line: &str) -> crate::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| crate::Error::io(path, e))?;
    f.write_all(format!("{line}\n").as_bytes())
        .map_err(|e| crate::Error::io(path, e))
}

/// Replaces `path` with `bytes` atomically: readers see the old content or the new, never a mix,
/// and after a crash the file is one or the other.
///
/// Writes a temporary file in the same folder (`.NAME.tmp-PID-N`, a new `N` for every call, so
/// that concurrent writers of one file never share a temporary), fsyncs it, renames it over
/// `path`, then fsyncs the folder. On failure the temporary file is removed and `path` is left
/// as it was; the error is the failing step's (callers name `path` in theirs). A bare file name
/// is written in the current folder. The folder must exist (a missing folder is
/// [`std::io::ErrorKind::NotFound`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("run.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("run.json")]);
    }

    #[test]
    fn a_missing_folder_is_not_found_and_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("missing").join("out.csv");
        let e = write_atomic(&p, b"x").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert!(!dir.path().join("missing").exists());
    }

    #[test]
    fn a_failed_write_keeps_the_old_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        write_atomic(&p, b"old").unwrap();
        // Renaming a file over a folder fails: the old content stays and no temporary is left.
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        assert!(write_atomic(&sub, b"new").is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }
}
