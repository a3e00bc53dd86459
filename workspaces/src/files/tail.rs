//! Following one append-only text file line by line (`tail -F` semantics), pure std.
//!
//! A [`LineTailer`] keeps an open handle, the byte offset it has consumed up to and the bytes of
//! an unterminated last line. Each [`LineTailer::poll`] returns the complete lines written since
//! the previous call, so every line is returned exactly once and in file order.
//!
//! Layout:
//! - [`TailFrom`]: where a tailer starts (full history, or only what is written after creation).
//! - [`LineTailer`]: the state machine; `poll` handles a file that does not exist yet, truncation
//!   in place, replacement by a new inode (atomic rename, log rotation), CRLF and invalid UTF-8.
//! - Splitting bytes into lines (`LineTailer::consume`), bounded by `read_per_poll` and
//!   `max_line` so a huge file or a huge line never has to fit in memory at once.
//!
//! Limits inherent to tailing by offset: a file truncated and then regrown past the old offset
//! between two polls is not seen as truncated (the bytes before the old offset are skipped); on
//! non-unix platforms a replacement is only noticed when the new file is shorter than the offset.
use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Where a new [`LineTailer`] starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailFrom {
    /// Everything in the file, history included.
    Start,
    /// Only what is written after the tailer is created. If the file then ends in the middle of a
    /// line, the rest of that line is dropped too (it would only be a fragment). A file that does
    /// not exist when the tailer is created, or that is later replaced, is read from its start.
    End,
    /// The last `n` lines already in the file (an unterminated last line counts as one), then
    /// what follows: `tail -n N -F`. Found by reading backwards from the end, so the cost does
    /// not grow with the file (at most [`MAX_BACKLOG_BYTES`] are scanned; a backlog longer than
    /// that starts at a line boundary within it). A file that does not exist yet is read from
    /// its start.
    LastLines(usize),
}

/// How far back [`TailFrom::LastLines`] scans for line starts.
pub const MAX_BACKLOG_BYTES: u64 = 16 * 1024 * 1024;

/// Bytes read from the file per `read` call.
const CHUNK: usize = 64 * 1024;
/// Default bound on the bytes one `poll` reads; the rest is left for the next call.
pub const DEFAULT_READ_PER_POLL: usize = 4 * 1024 * 1024;
/// Default bound on one line: a longer line is returned in pieces of this many bytes.
pub const DEFAULT_MAX_LINE: usize = 64 * 1024 * 1024;

/// Identity of a file (device, inode) so a replacement under the same path is noticed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId(u64, u64);

#[cfg(unix)]
fn file_id(meta: &std::fs::Metadata) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    Some(FileId(meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn file_id(_meta: &std::fs::Metadata) -> Option<FileId> {
    None
}

/// Follows one file: see the module docs.
#[derive(Debug)]
pub struct LineTailer {
    path: PathBuf,
    /// The open file and its identity; `None` while the file does not exist.
    file: Option<(File, Option<FileId>)>,
    /// Bytes of the open file consumed so far (complete lines plus `partial`).
    offset: u64,
    /// Bytes of the unterminated last line.
    partial: Vec<u8>,
    /// Drop bytes up to the next '\n' (a `TailFrom::End` start in the middle of a line).
    skip_to_newline: bool,
    /// Whether the last `poll` reached the end of the file.
    caught_up: bool,
    read_per_poll: usize,
    max_line: usize,
}

impl LineTailer {
    /// A tailer for `path`, which need not exist yet. With [`TailFrom::End`] the current end of
    /// the file is recorded now, so lines written between `new` and the first `poll` are returned.
    pub fn new(path: impl Into<PathBuf>, from: TailFrom) -> Self {
        let mut tailer = LineTailer {
            path: path.into(),
            file: None,
            offset: 0,
            partial: Vec::new(),
            skip_to_newline: false,
            caught_up: false,
            read_per_poll: DEFAULT_READ_PER_POLL,
            max_line: DEFAULT_MAX_LINE,
        };
        // A file that cannot be opened now is treated as created later: read from its start.
        if let Ok(file) = File::open(&tailer.path) {
            match from {
                TailFrom::Start => {}
                TailFrom::End => {
                    if let Some((len, ends_mid_line)) = end_position(&file) {
                        tailer.offset = len;
                        tailer.skip_to_newline = ends_mid_line;
                    }
                }
                TailFrom::LastLines(n) => {
                    if let Some((start, mid_line)) = backlog_start(&file, n) {
                        tailer.offset = start;
                        tailer.skip_to_newline = mid_line;
                    }
                }
            }
            let id = file.metadata().ok().and_then(|m| file_id(&m));
            tailer.file = Some((file, id));
        }
        tailer
    }

    /// Changes the bounds on the bytes read by one `poll` and on the length of one line
    /// (both at least 1).
    pub fn with_limits(mut self, read_per_poll: usize, max_line: usize) -> Self {
        self.read_per_poll = read_per_poll.max(1);
        self.max_line = max_line.max(1);
        self
    }

    /// The followed path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of the current file consumed so far (including a buffered partial line).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Whether the last `poll` read up to the end of the file; `false` when it stopped at the
    /// `read_per_poll` bound and more is already waiting (call `poll` again).
    pub fn caught_up(&self) -> bool {
        self.caught_up
    }

    /// Whether the file is open (it existed at some point and has not been dropped).
    pub fn is_open(&self) -> bool {
        self.file.is_some()
    }

    /// The complete lines written since the last call, without their '\n' (or "\r\n"); an
    /// unterminated last line stays buffered until its newline arrives. Returns nothing while the
    /// file does not exist. Reads at most `read_per_poll` bytes (see [`LineTailer::caught_up`]).
    pub fn poll(&mut self) -> Result<Vec<String>> {
        let mut lines = Vec::new();
        let mut budget = self.read_per_poll;
        self.caught_up = false;
        if self.file.is_none() && !self.open_current()? {
            self.caught_up = true;
            return Ok(lines);
        }
        // Replaced by a new inode (atomic rename, rotation): finish the old file, then restart.
        let current = match std::fs::metadata(&self.path) {
            Ok(meta) => file_id(&meta),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io(&self.path, e)),
        };
        let open_id = self.file.as_ref().and_then(|(_, id)| *id);
        if current.is_some() && current != open_id {
            if !self.read_available(&mut budget, &mut lines)? {
                return Ok(lines);
            }
            // The old inode is finished: its unterminated last line is complete.
            if !self.partial.is_empty() && !self.skip_to_newline {
                let bytes = std::mem::take(&mut self.partial);
                lines.push(bytes_to_line(bytes));
            }
            self.file = None;
            if !self.open_current()? {
                self.caught_up = true;
                return Ok(lines);
            }
        }
        self.caught_up = self.read_available(&mut budget, &mut lines)?;
        Ok(lines)
    }

    /// Opens `path` as a new file read from its start; `false` if it does not exist.
    fn open_current(&mut self) -> Result<bool> {
        match File::open(&self.path) {
            Ok(file) => {
                let id = file.metadata().ok().and_then(|m| file_id(&m));
                self.file = Some((file, id));
                self.offset = 0;
                self.partial.clear();
                self.skip_to_newline = false;
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io(&self.path, e)),
        }
    }

    /// Reads the open file from `offset` to its end or until `budget` is spent, appending the
    /// complete lines; `true` when the end was reached. A file shorter than `offset` was
    /// truncated in place: it is read again from its start.
    fn read_available(&mut self, budget: &mut usize, lines: &mut Vec<String>) -> Result<bool> {
        let Some((mut file, id)) = self.file.take() else {
            return Ok(true);
        };
        let result = self.read_from(&mut file, budget, lines);
        self.file = Some((file, id));
        result
    }

    fn read_from(
        &mut self,
        file: &mut std::fs::File,
        budget: &mut usize,
        lines: &mut Vec<String>,
    ) -> Result<bool> {
        let len = file.metadata().map_err(|e| Error::io(&self.path, e))?.len();
        if len < self.offset {
            self.offset = 0;
            self.partial.clear();
            self.skip_to_newline = false;
        }
        if len == self.offset {
            return Ok(true);
        }
        file.seek(SeekFrom::Start(self.offset))
            .map_err(|e| Error::io(&self.path, e))?;
        let mut buf = vec![0u8; CHUNK.min(*budget)];
        while *budget > 0 {
            let want = buf.len().min(*budget);
            let n = match file.read(&mut buf[..want]) {
                Ok(0) => return Ok(true),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io(&self.path, e)),
            };
            self.offset += n as u64;
            *budget -= n;
            self.consume(&buf[..n], lines);
        }
        Ok(false)
    }

    /// Splits `bytes` into lines, continuing the buffered partial line.
    fn consume(&mut self, mut bytes: &[u8], lines: &mut Vec<String>) {
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|&b| b == b'\n');
            let (piece, rest) = match newline {
                Some(i) => (&bytes[..i], &bytes[i + 1..]),
                None => (bytes, &[][..]),
            };
            if self.skip_to_newline {
                self.skip_to_newline = newline.is_none();
            } else {
                // Longer than `max_line`: hand out full pieces of `max_line` bytes.
                let mut piece = piece;
                while self.partial.len() + piece.len() > self.max_line {
                    let take = self.max_line - self.partial.len();
                    self.partial.extend_from_slice(&piece[..take]);
                    piece = &piece[take..];
                    let full = std::mem::take(&mut self.partial);
                    lines.push(String::from_utf8_lossy(&full).into_owned());
                }
                self.partial.extend_from_slice(piece);
                if newline.is_some() {
                    let bytes = std::mem::take(&mut self.partial);
                    lines.push(bytes_to_line(bytes));
                }
            }
            bytes = rest;
        }
    }
}

/// The length of `file` and whether its last byte is not a newline.
fn end_position(file: &File) -> Option<(u64, bool)> {
    let len = file.metadata().ok()?.len();
    if len == 0 {
        return Some((0, false));
    }
    let mut last = [0u8; 1];
    let mut reader = file;
    reader.seek(SeekFrom::Start(len - 1)).ok()?;
    reader.read_exact(&mut last).ok()?;
    Some((len, last[0] != b'\n'))
}

/// Where the last `n` lines of `file` start, scanning backwards at most [`MAX_BACKLOG_BYTES`];
/// the flag says the position is inside a line (the scan limit was hit), so the rest of that line
/// is to be skipped.
fn backlog_start(file: &File, n: usize) -> Option<(u64, bool)> {
    let len = file.metadata().ok()?.len();
    if n == 0 {
        let (len, mid) = end_position(file)?;
        return Some((len, mid));
    }
    let floor = len.saturating_sub(MAX_BACKLOG_BYTES);
    let mut reader = file;
    let mut pos = len;
    // A final '\n' ends the last line; it does not start one.
    let mut skip_final = true;
    let mut newlines = 0usize;
    let mut buf = vec![0u8; CHUNK];
    while pos > floor {
        let take = ((pos - floor) as usize).min(CHUNK);
        let at = pos - take as u64;
        reader.seek(SeekFrom::Start(at)).ok()?;
        reader.read_exact(&mut buf[..take]).ok()?;
        for i in (0..take).rev() {
            if buf[i] != b'\n' {
                skip_final = false;
                continue;
            }
            if std::mem::take(&mut skip_final) {
                continue;
            }
            newlines += 1;
            if newlines == n {
                return Some((at + i as u64 + 1, false));
            }
        }
        pos = at;
    }
    Some((floor, floor > 0))
}

/// One line's bytes (without '\n') as text: a trailing '\r' is dropped, invalid UTF-8 replaced.
fn bytes_to_line(mut bytes: Vec<u8>) -> String {
    if bytes.last() == Some(&b'\r') {
        bytes.pop();
    }
    match String::from_utf8(bytes) {
        Ok(line) => line,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::io::Write;

    fn append(path: &Path, bytes: &[u8]) {
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(bytes).unwrap();
    }

    fn strings(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn partial_lines_are_held_until_their_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let mut t = LineTailer::new(&path, TailFrom::Start);
        append(&path, b"one\ntw");
        assert_eq!(t.poll().unwrap(), strings(&["one"]));
        assert_eq!(t.offset(), 6);
        assert!(t.caught_up());
        append(&path, b"o");
        assert!(t.poll().unwrap().is_empty());
        append(&path, b"\nthree\nfour\n");
        assert_eq!(t.poll().unwrap(), strings(&["two", "three", "four"]));
        assert!(t.poll().unwrap().is_empty());
    }

    #[test]
    fn start_gives_history_and_end_skips_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        append(&path, b"old1\nold2\n");
        let mut from_start = LineTailer::new(&path, TailFrom::Start);
        let mut from_end = LineTailer::new(&path, TailFrom::End);
        append(&path, b"new\n");
        assert_eq!(
            from_start.poll().unwrap(),
            strings(&["old1", "old2", "new"])
        );
        assert_eq!(from_end.poll().unwrap(), strings(&["new"]));
    }

    #[test]
    fn end_in_the_middle_of_a_line_drops_that_fragment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        append(&path, b"old\nhalf");
        let mut t = LineTailer::new(&path, TailFrom::End);
        append(&path, b"-rest");
        assert!(t.poll().unwrap().is_empty());
        append(&path, b"\nnew\n");
        assert_eq!(t.poll().unwrap(), strings(&["new"]));
    }

    #[test]
    fn end_on_a_missing_file_reads_it_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("late.log");
        let mut t = LineTailer::new(&path, TailFrom::End);
        assert!(t.poll().unwrap().is_empty());
        assert!(!t.is_open());
        append(&path, b"first\nsecond\n");
        assert_eq!(t.poll().unwrap(), strings(&["first", "second"]));
        assert!(t.is_open());
    }

    #[test]
    fn late_file_is_picked_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/late.log");
        let mut t = LineTailer::new(&path, TailFrom::Start);
        assert!(t.poll().unwrap().is_empty());
        assert!(t.caught_up());
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        append(&path, b"hello\n");
        assert_eq!(t.poll().unwrap(), strings(&["hello"]));
    }

    #[test]
    fn truncation_restarts_from_zero() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        append(&path, b"aaaa\nbbbb\npart");
        let mut t = LineTailer::new(&path, TailFrom::Start);
        assert_eq!(t.poll().unwrap(), strings(&["aaaa", "bbbb"]));
        // Truncate in place (same inode) and write something shorter than the old offset.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(0).unwrap();
        drop(f);
        append(&path, b"c\n");
        assert_eq!(t.poll().unwrap(), strings(&["c"]));
        append(&path, b"d\n");
        assert_eq!(t.poll().unwrap(), strings(&["d"]));
    }

    #[cfg(unix)]
    #[test]
    fn replacement_by_rename_finishes_old_file_then_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.json");
        append(&path, b"v1 line\n");
        let mut t = LineTailer::new(&path, TailFrom::Start);
        assert_eq!(t.poll().unwrap(), strings(&["v1 line"]));
        // More data lands in the old inode (no newline at the end), then a new, longer version
        // is renamed over it: the old tail is delivered first, then the new file from its start.
        append(&path, b"v1 tail");
        let tmp = dir.path().join("run.json.tmp");
        append(
            &tmp,
            b"v2 first line, longer than the old file\nv2 second\n",
        );
        std::fs::rename(&tmp, &path).unwrap();
        assert_eq!(
            t.poll().unwrap(),
            strings(&[
                "v1 tail",
                "v2 first line, longer than the old file",
                "v2 second"
            ])
        );
        assert!(t.poll().unwrap().is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn deleted_then_recreated_file_is_read_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        append(&path, b"x\n");
        let mut t = LineTailer::new(&path, TailFrom::Start);
        assert_eq!(t.poll().unwrap(), strings(&["x"]));
        std::fs::remove_file(&path).unwrap();
        assert!(t.poll().unwrap().is_empty());
        append(&path, b"y\n");
        assert_eq!(t.poll().unwrap(), strings(&["y"]));
    }

    #[test]
    fn crlf_and_invalid_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        append(&path, b"dos\r\nbad \xff byte\n\r\n\ninner\rcr\n");
        let mut t = LineTailer::new(&path, TailFrom::Start);
        assert_eq!(
            t.poll().unwrap(),
            strings(&["dos", "bad \u{fffd} byte", "", "", "inner\rcr"])
        );
    }

    #[test]
    fn crlf_split_across_polls() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let mut t = LineTailer::new(&path, TailFrom::Start);
        append(&path, b"abc\r");
        assert!(t.poll().unwrap().is_empty());
        append(&path, b"\n");
        assert_eq!(t.poll().unwrap(), strings(&["abc"]));
    }

    #[test]
    fn huge_line_is_assembled_across_chunks_and_polls() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let huge: Vec<u8> = (0..3 * CHUNK + 17).map(|i| b'a' + (i % 26) as u8).collect();
        let mut content = huge.clone();
        content.extend_from_slice(b"\nafter\n");
        append(&path, &content);
        // Each poll reads at most 100 000 bytes: the line needs several polls.
        let mut t = LineTailer::new(&path, TailFrom::Start).with_limits(100_000, DEFAULT_MAX_LINE);
        let mut got = Vec::new();
        let mut polls = 0;
        loop {
            got.extend(t.poll().unwrap());
            polls += 1;
            if t.caught_up() {
                break;
            }
            assert!(t.offset() <= polls * 100_000);
        }
        assert_eq!(polls, 2);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].as_bytes(), &huge[..]);
        assert_eq!(got[1], "after");
    }

    #[test]
    fn line_longer_than_max_line_is_split() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        append(&path, b"abcdefghij\nxy\n");
        let mut t = LineTailer::new(&path, TailFrom::Start).with_limits(3, 4);
        let mut got = Vec::new();
        for _ in 0..10 {
            got.extend(t.poll().unwrap());
        }
        assert!(t.caught_up());
        assert_eq!(got, strings(&["abcd", "efgh", "ij", "xy"]));
    }

    #[test]
    fn last_lines_starts_n_lines_before_the_end_then_follows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let body: String = (0..200_000).map(|i| format!("line {i}\n")).collect();
        append(&path, body.as_bytes());
        let mut t = LineTailer::new(&path, TailFrom::LastLines(3));
        assert_eq!(
            t.poll().unwrap(),
            strings(&["line 199997", "line 199998", "line 199999"])
        );
        append(&path, b"next\n");
        assert_eq!(t.poll().unwrap(), strings(&["next"]));
        // More lines asked than the file has: all of them.
        let mut all = LineTailer::new(&path, TailFrom::LastLines(1_000_000));
        let mut n = 0;
        loop {
            n += all.poll().unwrap().len();
            if all.caught_up() {
                break;
            }
        }
        assert_eq!(n, 200_001);
        // Zero lines is `End`.
        let mut none = LineTailer::new(&path, TailFrom::LastLines(0));
        assert!(none.poll().unwrap().is_empty());
    }

    #[test]
    fn last_lines_counts_an_unterminated_line_and_blank_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        append(&path, b"a\n\nb\nprogress 10%");
        let mut t = LineTailer::new(&path, TailFrom::LastLines(2));
        assert_eq!(t.poll().unwrap(), strings(&["b"]));
        append(&path, b" 20%\n");
        assert_eq!(t.poll().unwrap(), strings(&["progress 10% 20%"]));
        let mut t = LineTailer::new(&path, TailFrom::LastLines(3));
        assert_eq!(t.poll().unwrap(), strings(&["", "b", "progress 10% 20%"]));
        // A file created after the tailer is read from its start.
        let late = dir.path().join("late.log");
        let mut t = LineTailer::new(&late, TailFrom::LastLines(1));
        append(&late, b"x\ny\n");
        assert_eq!(t.poll().unwrap(), strings(&["x", "y"]));
    }
}
