//! Building a cell's crate with cargo (release, offline): progress lines as they come, rustc's
//! diagnostics parsed from cargo's JSON messages (one typed [`Message`] per line, parsed here at
//! the edge), interrupt and a time limit that stop cargo and every rustc it started.
//!
//! Compiled dependencies are shared between cells, and between workspaces, through cargo's build
//! directory (`CARGO_BUILD_BUILD_DIR`, the user's cell cache: `super::shared_cache`); the binary
//! lands in the crate's own `target/release/`, so each run keeps its own trainer.
//!
//! Two builds at once (two kernels, or a kernel and `ddp-kernel install --warm`) are safe: cargo
//! holds an exclusive lock on the build directory (`<build dir>/release/.cargo-lock`, flock) for
//! the whole build, and the second one waits for it, printing `Blocking waiting for file lock on
//! build directory`. That line is passed on, followed by one that names the cache and says why.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::project::{PACKAGE, in_cell_terms};
use crate::error::{Error, Result};

/// How long a build may take (a cold cache compiles candle: minutes on 2 cores).
pub const BUILD_LIMIT: Duration = Duration::from_secs(30 * 60);
/// How often the build looks at interrupts and the time limit.
const POLL: Duration = Duration::from_millis(100);

/// One line of `cargo build --message-format=json` (the kinds the build needs).
#[derive(Debug, Deserialize, PartialEq)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum Message {
    CompilerMessage {
        target: Target,
        message: Diagnostic,
    },
    CompilerArtifact {
        target: Target,
        executable: Option<PathBuf>,
        /// Reused from the build directory (not compiled by this build).
        #[serde(default)]
        fresh: bool,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize, PartialEq)]
pub struct Target {
    pub name: String,
}

#[derive(Debug, Deserialize, PartialEq)]
pub struct Diagnostic {
    pub level: String,
    pub rendered: Option<String>,
}

/// What a build is asked to do.
#[derive(Debug, Clone)]
pub struct BuildRequest<'a> {
    /// The crate (its `Cargo.toml`); the binary goes to its `target/release/`.
    pub crate_dir: &'a Path,
    /// The shared build directory (compiled dependencies).
    pub build_dir: &'a Path,
    /// Features of ddp-trainer (`cuda`).
    pub features: &'a [String],
    pub limit: Duration,
    /// Whether cargo's own count of units done and to do is wanted
    /// ([`BuildObserver::units`]; cargo's progress bar, parsed).
    pub counts: bool,
}

/// A successful build.
#[derive(Debug)]
pub struct Built {
    pub binary: PathBuf,
    pub seconds: f64,
    /// The targets this build compiled (`ddp-cell` alone when the dependencies were reused).
    pub compiled: Vec<String>,
    /// How many compiled units it reused from the build directory.
    pub reused: usize,
}

impl Built {
    /// `N crates compiled, M reused from the cache`.
    pub fn summary(&self) -> String {
        let n = self.compiled.len();
        format!(
            "{n} crate{} compiled, {} reused from the cache",
            if n == 1 { "" } else { "s" },
            self.reused
        )
    }
}

/// The line cargo prints when another build holds the build directory's lock.
pub const LOCK_WAIT: &str = "Blocking waiting for file lock on build directory";

/// What a build tells its caller as it goes.
pub trait BuildObserver {
    /// A progress line of cargo (`Compiling candle-core v0.11.1`, `Finished ...`).
    fn progress(&mut self, line: &str);
    /// A warning about the cell, in the cell's terms.
    fn warning(&mut self, rendered: &str);
    /// Whether the user asked to stop (interrupt).
    fn interrupted(&self) -> bool;
    /// Cargo's count of units (crates and build scripts) done so far, of `total`; only with
    /// [`BuildRequest::counts`].
    fn units(&mut self, _done: usize, _total: usize) {}
}

/// The explanation that follows cargo's [`LOCK_WAIT`] line.
pub fn lock_wait_note(build_dir: &Path) -> String {
    format!(
        "waiting for the build cache {}: another build is using it (a cell in another notebook, \
         or `ddp-kernel install --warm`); this one starts when that one ends",
        build_dir.display()
    )
}

/// `(done, total)` of a segment of cargo's progress bar (`    Building [===>   ] 12/310: ...`).
pub fn progress_counts(segment: &str) -> Option<(usize, usize)> {
    let rest = segment.trim_start().strip_prefix("Building [")?;
    let (_, rest) = rest.split_once("] ")?;
    let counts = rest.split([':', ' ']).next()?;
    let (done, total) = counts.split_once('/')?;
    Some((done.parse().ok()?, total.parse().ok()?))
}

/// The cargo command line of `req` (without the program).
pub fn cargo_args(req: &BuildRequest) -> Vec<String> {
    let mut args = vec![
        "build".to_string(),
        "--release".to_string(),
        "--offline".to_string(),
        "--message-format=json".to_string(),
    ];
    if !req.features.is_empty() {
        args.push("--features".to_string());
        args.push(
            req.features
                .iter()
                .map(|f| format!("ddp-trainer/{f}"))
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    args
}

/// Builds the crate; `Err(Error::Compile)` carries the cell's errors in the cell's terms.
pub fn build(req: &BuildRequest, observer: &mut dyn BuildObserver) -> Result<Built> {
    let started = Instant::now();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(&cargo);
    command
        .args(cargo_args(req))
        .current_dir(req.crate_dir)
        .env("CARGO_TARGET_DIR", req.crate_dir.join("target"))
        .env("CARGO_BUILD_BUILD_DIR", req.build_dir)
        .env("CARGO_TERM_COLOR", "never")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: stopping the build stops every rustc too.
        .process_group(0);
    if req.counts {
        // The bar goes to a pipe: `always` needs a width; its segments end in `\r`.
        command
            .env("CARGO_TERM_PROGRESS_WHEN", "always")
            .env("CARGO_TERM_PROGRESS_WIDTH", "100");
    } else {
        command.env("CARGO_TERM_PROGRESS_WHEN", "never");
    }
    let described = format!(
        "`{} {}` in {}",
        Path::new(&cargo).display(),
        cargo_args(req).join(" "),
        req.crate_dir.display()
    );
    let mut child = command.spawn().map_err(|e| {
        Error::Build(format!(
            "could not start {described}: {e} (is cargo on PATH?)"
        ))
    })?;
    let (tx, rx) = mpsc::channel();
    let readers = [
        read_lines(child.stdout.take(), Stream::Stdout, tx.clone()),
        read_lines(child.stderr.take(), Stream::Stderr, tx),
    ];
    let mut errors = Vec::new();
    let mut binary = None;
    let mut compiled = Vec::new();
    let mut reused = 0;
    let mut stderr_tail: VecDeque<String> = VecDeque::new();
    let outcome = loop {
        if observer.interrupted() {
            stop(&mut child);
            break Err(Error::Build(format!(
                "interrupted: the build was stopped ({described})"
            )));
        }
        if started.elapsed() > req.limit {
            stop(&mut child);
            break Err(Error::Build(format!(
                "the build took more than {} s and was stopped ({described})",
                req.limit.as_secs()
            )));
        }
        match rx.recv_timeout(POLL) {
            Ok((Stream::Stdout, line)) => match serde_json::from_str::<Message>(&line) {
                Ok(Message::CompilerMessage { target, message }) if target.name == PACKAGE => {
                    let rendered = in_cell_terms(message.rendered.as_deref().unwrap_or_default());
                    match message.level.as_str() {
                        "error" | "error: internal compiler error" => errors.push(rendered),
                        _ => observer.warning(&rendered),
                    }
                }
                Ok(Message::CompilerArtifact {
                    target,
                    executable,
                    fresh,
                }) => {
                    if fresh {
                        reused += 1;
                    } else {
                        compiled.push(target.name.clone());
                    }
                    if let Some(exe) = executable.filter(|_| target.name == PACKAGE) {
                        binary = Some(exe);
                    }
                }
                Ok(_) => {}
                // Not JSON: a build script's stray output; show it as progress.
                Err(_) => observer.progress(&line),
            },
            Ok((Stream::Stderr, line)) => {
                if let Some((done, total)) = progress_counts(&line) {
                    observer.units(done, total);
                    continue;
                }
                if line.trim().is_empty() {
                    continue;
                }
                if !line.starts_with("error: could not compile") {
                    observer.progress(&line);
                }
                if line.trim_start().starts_with(LOCK_WAIT) {
                    observer.progress(&lock_wait_note(req.build_dir));
                }
                stderr_tail.push_back(line);
                if stderr_tail.len() > 40 {
                    stderr_tail.pop_front();
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                break child
                    .wait()
                    .map_err(|e| Error::Build(format!("waiting for {described}: {e}")));
            }
        }
    };
    for r in readers {
        let _ = r.join();
    }
    let status = outcome?;
    if !errors.is_empty() {
        let n = errors.len();
        return Err(Error::Compile {
            summary: format!(
                "the cell did not compile: {n} error{} (line numbers are the cell's)",
                if n == 1 { "" } else { "s" }
            ),
            diagnostics: errors,
        });
    }
    match (status.success(), binary) {
        (true, Some(binary)) => {
            let in_cache = cached_copy(&binary, req.build_dir);
            own_copy(&binary)?;
            if let Some(unit) = in_cache {
                forget(&unit, req.build_dir);
            }
            Ok(Built {
                binary,
                seconds: started.elapsed().as_secs_f64(),
                compiled,
                reused,
            })
        }
        (true, None) => Err(Error::Build(format!(
            "{described} succeeded but reported no `{PACKAGE}` executable"
        ))),
        (false, _) => {
            let tail = Vec::from(stderr_tail).join("\n");
            Err(Error::Build(format!(
                "{described} failed ({status}):\n{tail}{}",
                failure_hint(&tail)
            )))
        }
    }
}

/// What to do about a failed build, when cargo's output shows the cause: builds are offline, so
/// crates that are not in cargo's cache yet must be fetched once.
pub fn failure_hint(stderr: &str) -> &'static str {
    if stderr.contains("--offline") || stderr.contains("offline mode") {
        "\nCells are built offline, from the crates in cargo's cache (~/.cargo/registry): fetch \
         them once, online, with `cargo fetch --locked` in the ddp checkout ($DDP_SOURCE_DIR, \
         else the one ddp-kernel was built from), then try again."
    } else {
        ""
    }
}

#[derive(Debug, Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

/// Sends the lines of `pipe`; on stderr a `\r` ends a line too (cargo's progress bar redraws
/// itself after one, without a newline).
fn read_lines(
    pipe: Option<impl Read + Send + 'static>,
    stream: Stream,
    tx: mpsc::Sender<(Stream, String)>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let Some(pipe) = pipe else { return };
        let ends = |b: u8| b == b'\n' || (matches!(stream, Stream::Stderr) && b == b'\r');
        let mut reader = BufReader::new(pipe);
        let mut line = Vec::new();
        loop {
            let buf = match reader.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            let (taken, ended) = match buf.iter().position(|&b| ends(b)) {
                Some(i) => (i + 1, true),
                None if buf.is_empty() => (0, true),
                None => (buf.len(), false),
            };
            let eof = buf.is_empty();
            line.extend_from_slice(&buf[..taken]);
            reader.consume(taken);
            if ended {
                while line.last().is_some_and(|&b| ends(b)) {
                    line.pop();
                }
                if !(eof && line.is_empty()) {
                    let text = String::from_utf8_lossy(&line).into_owned();
                    if tx.send((stream, text)).is_err() {
                        return;
                    }
                }
                line.clear();
            }
            if eof {
                return;
            }
        }
    })
}

/// Stops cargo and the compilers it started (its process group), then reaps it.
fn stop(child: &mut Child) {
    let group = child.id() as libc::pid_t;
    // SAFETY: kill(2) on the build's own process group; no memory is involved.
    unsafe {
        libc::kill(-group, libc::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The file in the build directory's `release/deps/` that `binary` is a hard link of (the
/// cell's unit there: `ddp_cell-HASH`), if any.
fn cached_copy(binary: &Path, build_dir: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(binary).ok()?;
    let prefix = format!("{}-", PACKAGE.replace('-', "_"));
    std::fs::read_dir(build_dir.join("release").join("deps"))
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .find(|e| {
            e.metadata()
                .is_ok_and(|m| m.ino() == meta.ino() && m.dev() == meta.dev())
        })
        .map(|e| e.path())
}

/// Removes the cell's own unit (`deps/ddp_cell-HASH`, its `.d` and `.fingerprint/ddp-cell-HASH`)
/// from the shared build directory once the binary has been copied out: each cell is a unit of
/// its own (`project::cell_version`), which no other build reuses, and its executable is about
/// 100 MB. Best effort: what cannot be removed stays, unused.
fn forget(unit: &Path, build_dir: &Path) {
    let Some(name) = unit.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return;
    };
    let _ = std::fs::remove_file(unit);
    let _ = std::fs::remove_file(unit.with_file_name(format!("{name}.d")));
    if let Some(hash) = name.rsplit('-').next() {
        let fingerprint = build_dir
            .join("release")
            .join(".fingerprint")
            .join(format!("{PACKAGE}-{hash}"));
        let _ = std::fs::remove_dir_all(fingerprint);
    }
}

/// Makes `binary` a file of its own: cargo may hard-link it to the shared build directory, where
/// the next cell's build would replace it.
fn own_copy(binary: &Path) -> Result<()> {
    let tmp = binary.with_extension("copy");
    std::fs::copy(binary, &tmp).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, binary).map_err(|e| Error::io(binary, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_messages_parse_into_the_kinds_the_build_needs() {
        let m: Message = serde_json::from_str(
            r#"{"reason":"compiler-message","package_id":"p","manifest_path":"m","target":{"kind":["bin"],"name":"ddp-cell","src_path":"s"},"message":{"rendered":"error: x\n --> src/main.rs:3:1\n","level":"error","spans":[]}}"#,
        )
        .unwrap();
        assert_eq!(
            m,
            Message::CompilerMessage {
                target: Target {
                    name: "ddp-cell".into()
                },
                message: Diagnostic {
                    level: "error".into(),
                    rendered: Some("error: x\n --> src/main.rs:3:1\n".into())
                }
            }
        );
        let m: Message = serde_json::from_str(
            r#"{"reason":"compiler-artifact","target":{"name":"ddp-cell","kind":["bin"]},"executable":"/c/target/release/ddp-cell","fresh":false}"#,
        )
        .unwrap();
        assert!(
            matches!(m, Message::CompilerArtifact { executable: Some(p), .. } if p == Path::new("/c/target/release/ddp-cell"))
        );
        let m: Message =
            serde_json::from_str(r#"{"reason":"build-script-executed","x":1}"#).unwrap();
        assert_eq!(m, Message::Other);
    }

    #[test]
    fn features_are_the_trainers() {
        let dir = Path::new("/c");
        let req = BuildRequest {
            crate_dir: dir,
            build_dir: dir,
            features: &["cuda".to_string()],
            limit: BUILD_LIMIT,
            counts: false,
        };
        assert_eq!(
            cargo_args(&req),
            [
                "build",
                "--release",
                "--offline",
                "--message-format=json",
                "--features",
                "ddp-trainer/cuda"
            ]
        );
    }
}
