//! Building a cell's crate with cargo (release, offline): progress lines as they come, rustc's
//! diagnostics parsed from cargo's JSON messages (one typed [`Message`] per line, parsed here at
//! the edge), interrupt and a time limit that stop cargo and every rustc it started.
//!
//! Compiled dependencies are shared between cells through cargo's build directory
//! (`CARGO_BUILD_BUILD_DIR`, under the workspace); the binary lands in the crate's own
//! `target/release/`, so each run keeps its own trainer.

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
}

/// A successful build.
#[derive(Debug)]
pub struct Built {
    pub binary: PathBuf,
    pub seconds: f64,
}

/// What a build tells its caller as it goes.
pub trait BuildObserver {
    /// A progress line of cargo (`Compiling candle-core v0.11.1`, `Finished ...`).
    fn progress(&mut self, line: &str);
    /// A warning about the cell, in the cell's terms.
    fn warning(&mut self, rendered: &str);
    /// Whether the user asked to stop (interrupt).
    fn interrupted(&self) -> bool;
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
        .env("CARGO_TERM_PROGRESS_WHEN", "never")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: stopping the build stops every rustc too.
        .process_group(0);
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
                    executable: Some(exe),
                }) if target.name == PACKAGE => binary = Some(exe),
                Ok(_) => {}
                // Not JSON: a build script's stray output; show it as progress.
                Err(_) => observer.progress(&line),
            },
            Ok((Stream::Stderr, line)) => {
                if !line.starts_with("error: could not compile") {
                    observer.progress(&line);
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
            own_copy(&binary)?;
            Ok(Built {
                binary,
                seconds: started.elapsed().as_secs_f64(),
            })
        }
        (true, None) => Err(Error::Build(format!(
            "{described} succeeded but reported no `{PACKAGE}` executable"
        ))),
        (false, _) => Err(Error::Build(format!(
            "{described} failed ({status}):\n{}",
            Vec::from(stderr_tail).join("\n")
        ))),
    }
}

#[derive(Debug, Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

fn read_lines(
    pipe: Option<impl Read + Send + 'static>,
    stream: Stream,
    tx: mpsc::Sender<(Stream, String)>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let Some(pipe) = pipe else { return };
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { return };
            if tx.send((stream, line)).is_err() {
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
