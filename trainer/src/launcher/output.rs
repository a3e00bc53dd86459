//! The replicas' output: one reader thread per stream writing whole lines to
//! `logs/rank-R.log` (appended) and echoing rank 0's stdout and every rank's stderr (prefixed
//! `[rank R] `).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Longer output lines are cut into pieces of this size.
const MAX_LINE: u64 = 64 * 1024;
/// How long to wait for the output threads once every replica is gone (a process that left the
/// replica's process group may still hold its pipes).
const DRAIN: Duration = Duration::from_secs(2);

/// `out_dir/logs/rank-R.log`.
pub fn log_path(out_dir: &Path, rank: usize) -> PathBuf {
    out_dir.join("logs").join(format!("rank-{rank}.log"))
}

/// Where a stream's lines go besides the log.
#[derive(Clone, Copy)]
pub(super) enum Echo {
    None,
    Stdout,
    StderrPrefixed,
}

/// Copies `stream` line by line to the rank's log (whole lines under the log's lock, so that
/// stdout and stderr never mix within a line) and to the echo.
pub(super) fn pump(
    stream: impl Read + Send + 'static,
    rank: usize,
    name: &str,
    file: Arc<Mutex<File>>,
    log: PathBuf,
    echo: Echo,
) -> Result<JoinHandle<()>> {
    let body = move || {
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        let mut log_failed = false;
        loop {
            line.clear();
            match (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            let written = file
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .write_all(&line);
            if let Err(e) = written
                && !log_failed
            {
                log_failed = true;
                eprintln!("ddp-trainer: cannot write {}: {e}", log.display());
            }
            // Echo failures (a closed terminal or pipe) must not stop the copy to the log.
            match echo {
                Echo::None => {}
                Echo::Stdout => {
                    let mut out = io::stdout().lock();
                    let _ = out.write_all(&line).and_then(|()| out.flush());
                }
                Echo::StderrPrefixed => {
                    let mut prefixed = format!("[rank {rank}] ").into_bytes();
                    prefixed.extend_from_slice(&line);
                    let _ = io::stderr().lock().write_all(&prefixed);
                }
            }
        }
    };
    thread::Builder::new()
        .name(format!("rank-{rank}-{name}"))
        .spawn(body)
        .map_err(|e| {
            Error::Launch(format!(
                "cannot start the {name} reader of rank {rank}: {e}"
            ))
        })
}

/// Joins the output threads; one still blocked after [`DRAIN`] (its pipe is held by a process
/// that escaped the replica's process group) is left behind with a warning.
pub(super) fn drain(readers: Vec<JoinHandle<()>>) {
    let deadline = Instant::now() + DRAIN;
    while readers.iter().any(|r| !r.is_finished()) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    for reader in readers {
        if reader.is_finished() {
            let _ = reader.join();
        } else {
            let name = reader.thread().name().unwrap_or("reader").to_string();
            eprintln!(
                "ddp-trainer: {name} is still open after its replica exited \
                 (a process it started holds it); not waiting for it"
            );
        }
    }
}
