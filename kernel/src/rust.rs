//! Rust cells through evcxr: one [`CommandContext`] for the kernel's life (state persists across
//! cells; a restart of the kernel gives a fresh one), started in the background when the kernel
//! starts so the first Rust cell does not pay for it.
//!
//! evcxr runs each cell in a child process (this executable, turned into evcxr's runtime by
//! [`evcxr::runtime_hook`] first thing in `main`). Its stdout and stderr arrive line by line on
//! two channels while the cell runs; a forwarding thread publishes each line as a `stream`
//! message of the request being executed. Rich output (evcxr's `EVCXR_BEGIN_CONTENT` protocol)
//! and the value of a trailing expression come back at the end.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use evcxr::{CommandContext, EvalCallbacks, EvalContextOutputs};
use jupyter_protocol::{InputRequest, ReplyError};

use crate::compile_errors::{Diagnostic, traceback};
use crate::interrupt::Interrupt;
use crate::log;
use crate::output::{Out, media_of_strings};
use crate::protocol::{reply, reply_error};

/// How long a Rust cell waits for evcxr to have started (its first compilation included).
const START_LIMIT: Duration = Duration::from_secs(600);
/// After a cell, how long stderr lines may trail behind the result (evcxr has no end marker).
const STDERR_GRACE: Duration = Duration::from_millis(30);
/// At most this long for the forwarder to publish what a cell printed.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

type Started = std::result::Result<(CommandContext, EvalContextOutputs), String>;

enum State {
    Starting(mpsc::Receiver<Started>),
    Ready(Box<CommandContext>),
    Failed(String),
}

/// The Rust evaluation context and its output forwarding.
pub struct RustSession {
    state: State,
    /// The request whose outputs the forwarder publishes (`None`: between cells).
    sink: Arc<Mutex<Option<Out>>>,
    /// Clones of evcxr's output channels, to see when the forwarder has taken every line.
    pending: Option<(Receiver<String>, Receiver<String>)>,
}

/// What a Rust cell produced.
pub enum RustOutcome {
    /// Finished; the value (trailing expression, rich content), if any, by MIME type.
    Value(HashMap<String, String>),
    Failed(ReplyError),
}

impl RustSession {
    /// Starts evcxr in the background.
    pub fn start() -> RustSession {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("evcxr-start".into())
            .spawn(move || {
                let started = CommandContext::new().map_err(|e| e.to_string());
                let _ = tx.send(started);
            })
            .expect("spawning a thread");
        RustSession {
            state: State::Starting(rx),
            sink: Arc::default(),
            pending: None,
        }
    }

    /// The context, waiting for it to start if needed.
    fn context(&mut self) -> Result<&mut CommandContext, String> {
        if let State::Starting(rx) = &self.state {
            let started = rx.recv_timeout(START_LIMIT).ok();
            self.settle(started);
        }
        match &mut self.state {
            State::Ready(ctx) => Ok(ctx),
            State::Failed(e) => Err(e.clone()),
            State::Starting(_) => unreachable!("settled above"),
        }
    }

    /// Leaves `Starting` with what the starting thread sent (`None`: nothing, in time).
    fn settle(&mut self, started: Option<Started>) {
        self.state = match started {
            Some(Ok((ctx, outputs))) => {
                self.pending = Some((outputs.stdout.clone(), outputs.stderr.clone()));
                forward(outputs, self.sink.clone());
                State::Ready(Box::new(ctx))
            }
            Some(Err(e)) => State::Failed(e),
            None => State::Failed(format!(
                "evcxr did not start within {} s (it needs rustc and cargo on PATH)",
                START_LIMIT.as_secs()
            )),
        };
    }

    /// The context if it has started (never waits: completion must answer at once).
    fn ready_context(&mut self) -> Option<&mut CommandContext> {
        if let State::Starting(rx) = &self.state {
            match rx.try_recv() {
                Ok(started) => self.settle(Some(started)),
                Err(mpsc::TryRecvError::Empty) => return None,
                Err(mpsc::TryRecvError::Disconnected) => self.settle(None),
            }
        }
        match &mut self.state {
            State::Ready(ctx) => Some(ctx),
            _ => None,
        }
    }

    /// Completions at byte offset `pos` of `code`: the matches and the byte range they replace.
    pub fn complete(&mut self, code: &str, pos: usize) -> Option<(Vec<String>, usize, usize)> {
        let ctx = self.ready_context()?;
        let c = ctx.completions(code, pos).ok()?;
        let matches = c.completions.into_iter().map(|c| c.code).collect();
        Some((matches, c.start_offset, c.end_offset))
    }

    /// What rust-analyzer says about the item at byte offset `pos` (plain text, HTML).
    pub fn hover(&mut self, code: &str, pos: usize) -> Option<(String, String)> {
        let ctx = self.ready_context()?;
        let (plain, html) = ctx.hover_at(code, pos).ok()?;
        (!plain.trim().is_empty()).then_some((plain, html))
    }

    /// Waits until the forwarder has published what evcxr printed, then detaches the cell.
    fn drain(&self) {
        std::thread::sleep(STDERR_GRACE);
        let start = Instant::now();
        if let Some((stdout, stderr)) = &self.pending {
            while !(stdout.is_empty() && stderr.is_empty()) && start.elapsed() < DRAIN_LIMIT {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        // The forwarder holds the lock while it publishes a line.
        *self.sink.lock().unwrap() = None;
    }

    /// Runs `code` (Rust and evcxr commands, from the cell's line `first_line` on), streaming its
    /// output into `out`'s cell.
    pub fn execute(
        &mut self,
        code: &str,
        first_line: usize,
        out: &Out,
        interrupt: &Interrupt,
        allow_stdin: bool,
    ) -> RustOutcome {
        if code.lines().any(|l| l.trim() == ":quit") {
            return RustOutcome::Failed(reply_error(
                "UsageError",
                ":quit would end the kernel; use the notebook's shutdown or restart",
                None,
            ));
        }
        let sink = self.sink.clone();
        let ctx = match self.context() {
            Ok(ctx) => ctx,
            Err(e) => {
                return RustOutcome::Failed(reply_error(
                    "RustContextError",
                    &format!("the Rust context could not start: {e}"),
                    None,
                ));
            }
        };
        *sink.lock().unwrap() = Some(out.clone());
        interrupt.set_rust(Some(ctx.process_handle()));
        let result = ctx.execute_with_callbacks(
            code,
            &mut EvalCallbacks {
                input_reader: &|request| {
                    if allow_stdin {
                        ask_input(out, interrupt, request.prompt, request.is_password)
                    } else {
                        String::new()
                    }
                },
            },
        );
        interrupt.set_rust(None);
        self.drain();
        match result {
            Ok(outputs) => RustOutcome::Value(outputs.content_by_mime_type),
            Err(e) => RustOutcome::Failed(rust_error(e, interrupt.requested(), code, first_line)),
        }
    }
}

/// Publishes evcxr's stdout/stderr lines into the current request's cell.
fn forward(outputs: EvalContextOutputs, sink: Arc<Mutex<Option<Out>>>) {
    std::thread::Builder::new()
        .name("evcxr-output".into())
        .spawn(move || {
            let EvalContextOutputs { stdout, stderr } = outputs;
            loop {
                let (line, is_err) = crossbeam_channel::select! {
                    recv(stdout) -> l => match l { Ok(l) => (l, false), Err(_) => break },
                    recv(stderr) -> l => match l { Ok(l) => (l, true), Err(_) => break },
                };
                let guard = sink.lock().unwrap();
                match guard.as_ref() {
                    Some(out) => out.stream(is_err, &format!("{line}\n")),
                    None => log(&format!("evcxr output outside a cell: {line}")),
                }
            }
        })
        .expect("spawning a thread");
}

fn ask_input(out: &Out, interrupt: &Interrupt, prompt: String, password: bool) -> String {
    // Parented to the execute_request and routed to its client's stdin socket.
    let request = reply(out.parent(), InputRequest { prompt, password });
    let mut answer = out.outbox().ask_input(request);
    loop {
        match answer.try_recv() {
            Ok(v) => return v,
            Err(tokio::sync::oneshot::error::TryRecvError::Closed) => return String::new(),
            Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {}
        }
        if interrupt.requested() {
            return String::new();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// evcxr's error as the cell's error reply; compile errors are shown in the cell's lines (the
/// chunk `code` starts on the cell's line `first_line`).
fn rust_error(e: evcxr::Error, interrupted: bool, code: &str, first_line: usize) -> ReplyError {
    match e {
        evcxr::Error::CompilationErrors(errors) => {
            let evalue = errors
                .first()
                .map(|e| e.message())
                .unwrap_or_else(|| "compilation failed".into());
            let diagnostics: Vec<Diagnostic> = errors.iter().map(Diagnostic::of).collect();
            let traceback = traceback(&diagnostics, code, first_line);
            reply_error("CompilationError", &evalue, Some(traceback))
        }
        evcxr::Error::SubprocessTerminated(m) if interrupted => reply_error(
            "Interrupted",
            &format!(
                "interrupted: evcxr restarted its process ({m}); the variables were lost, \
                 functions, types and :dep dependencies are kept"
            ),
            None,
        ),
        evcxr::Error::SubprocessTerminated(m) => reply_error(
            "SubprocessTerminated",
            &format!(
                "{m}; evcxr restarted its process: the variables were lost, functions, types and :dep dependencies are kept"
            ),
            None,
        ),
        evcxr::Error::TypeRedefinedVariablesLost(vars) => reply_error(
            "TypeRedefinedVariablesLost",
            &format!(
                "a type redefinition lost these variables: {}",
                vars.join(", ")
            ),
            None,
        ),
        evcxr::Error::Message(m) => reply_error("Error", &m, None),
    }
}

/// The cell's value as Jupyter wants it: `text/plain` (with any richer forms) is the
/// `execute_result`; rich content alone is `display_data`; a unit value `()` (a trailing
/// `println!(..)`, a statement without its `;`) is nothing.
pub fn publish_value(content: &HashMap<String, String>, out: &Out) {
    let content = without_unit(content);
    if content.is_empty() {
        return;
    }
    let media = media_of_strings(&content);
    if content.contains_key("text/plain") {
        out.result(media);
    } else {
        out.display_media(media, None);
    }
}

/// `content` without the `text/plain` of a unit value: `()`, or `: () = ()` when evcxr shows
/// types (`:types`).
fn without_unit(content: &HashMap<String, String>) -> HashMap<String, String> {
    content
        .iter()
        .filter(|(mime, text)| {
            !(*mime == "text/plain" && matches!(text.trim(), "()" | ": () = ()"))
        })
        .map(|(m, t)| (m.clone(), t.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(m, t)| (m.to_string(), t.to_string()))
            .collect()
    }

    #[test]
    fn a_unit_value_is_no_result() {
        assert_eq!(
            without_unit(&content(&[("text/plain", "()")])),
            content(&[])
        );
        assert_eq!(
            without_unit(&content(&[("text/plain", ": () = ()")])),
            content(&[])
        );
        assert_eq!(
            without_unit(&content(&[("text/plain", "()"), ("text/html", "<b>x</b>")])),
            content(&[("text/html", "<b>x</b>")])
        );
        assert_eq!(
            without_unit(&content(&[("text/plain", "((), ())")])),
            content(&[("text/plain", "((), ())")])
        );
        assert_eq!(
            without_unit(&content(&[("text/plain", "42")])),
            content(&[("text/plain", "42")])
        );
    }
}
