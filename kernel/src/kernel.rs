//! The kernel's message loop: one exhaustive `match` over [`Request`]s. Cheap requests are
//! answered here at once (kernel_info, is_complete, magic completion and help, history,
//! comm_info, interrupt, shutdown); executing cells, and completing or inspecting Rust, go to the
//! [`executor`](crate::executor) thread in order, so the loop, the heartbeat and interrupts stay
//! responsive while a cell runs.
//!
//! Every request gets `busy` before its reply and `idle` after everything it caused (the
//! executor publishes `idle` for the jobs it takes).

use std::sync::Arc;
use std::sync::mpsc::Sender;

use jupyter_protocol::{
    CodeMirrorMode, CommInfoReply, CompleteReply, HelpLink, HistoryReply, InspectReply,
    InterruptReply, IsCompleteReply, JupyterMessage, KernelInfoReply, LanguageInfo, Media,
    MediaType, ReplyStatus, ShutdownReply, Status,
};

use crate::cell::{Completeness, completeness};
use crate::executor::Job;
use crate::log;
use crate::magics;
use crate::protocol::{Incoming, PROTOCOL_VERSION, Request, broadcast, reply};
use crate::shared::Shared;

/// What the loop does after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// A `shutdown_request` was answered: the kernel ends (a restart is the client starting a
    /// new kernel process: a fresh Rust context, the same workspace and runs).
    Shutdown,
}

/// The message loop's state.
pub struct Kernel {
    shared: Arc<Shared>,
    jobs: Sender<Job>,
    /// IPython's `execution_count`: executions that stored history so far.
    count: usize,
}

impl Kernel {
    pub fn new(shared: Arc<Shared>, jobs: Sender<Job>) -> Kernel {
        Kernel {
            shared,
            jobs,
            count: 0,
        }
    }

    /// Handles one request; a panic while doing so is logged and the request gets `idle`.
    pub fn handle(&mut self, incoming: Incoming) -> Flow {
        let message = incoming.message.clone();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.dispatch(incoming))) {
            Ok(flow) => flow,
            Err(panic) => {
                log(&format!(
                    "internal error while handling {}: {}",
                    message.header.msg_type,
                    crate::panic_message(&panic)
                ));
                self.status(&message, false);
                Flow::Continue
            }
        }
    }

    fn dispatch(&mut self, incoming: Incoming) -> Flow {
        let Incoming {
            channel,
            request,
            message,
        } = incoming;
        let out = &self.shared.outbox;
        let answer = |content: jupyter_protocol::JupyterMessageContent| {
            self.status(&message, true);
            out.reply(channel, reply(&message, content));
            self.status(&message, false);
        };
        match request {
            Request::KernelInfo => answer(kernel_info().into()),
            Request::Execute(request) => {
                let silent = request.silent;
                let store = request.store_history && !silent;
                if store {
                    self.count += 1;
                    self.shared
                        .history
                        .lock()
                        .unwrap()
                        .record(self.count, &request.code);
                }
                self.status(&message, true);
                if !silent {
                    out.publish(broadcast(
                        Some(&message),
                        jupyter_protocol::ExecuteInput {
                            code: request.code.clone(),
                            execution_count: jupyter_protocol::ExecutionCount::new(self.count),
                        },
                    ));
                }
                self.submit(Job::Execute {
                    message,
                    request,
                    count: self.count,
                });
            }
            Request::IsComplete(r) => {
                let reply = match completeness(&r.code, |n| n == magics::MAGIC) {
                    Completeness::Complete => IsCompleteReply::complete(),
                    Completeness::Incomplete(indent) => IsCompleteReply::incomplete(indent),
                    Completeness::Invalid => IsCompleteReply::invalid(),
                };
                answer(reply.into());
            }
            Request::Complete(r) => {
                let (line, line_start, col) = line_at(&r.code, r.cursor_pos);
                let ws = self.shared.workspace();
                match magics::complete::complete(line, col, &ws, self.shared.notebook_dir()) {
                    Some((matches, start, end)) => answer(
                        CompleteReply {
                            matches,
                            cursor_start: line_start + start,
                            cursor_end: line_start + end,
                            ..CompleteReply::default()
                        }
                        .into(),
                    ),
                    None => {
                        self.status(&message, true);
                        self.submit(Job::Complete {
                            message,
                            channel,
                            request: r,
                        });
                    }
                }
            }
            Request::Inspect(r) => {
                let (line, _, _) = line_at(&r.code, r.cursor_pos);
                match magic_help(line) {
                    Some(help) => answer(
                        InspectReply {
                            found: true,
                            data: Media::new(vec![MediaType::Plain(help)]),
                            ..InspectReply::default()
                        }
                        .into(),
                    ),
                    None => {
                        self.status(&message, true);
                        self.submit(Job::Inspect {
                            message,
                            channel,
                            request: r,
                        });
                    }
                }
            }
            Request::History(r) => {
                let history = self.shared.history.lock().unwrap().answer(&r);
                answer(HistoryReply::new(history).into());
            }
            Request::CommInfo => answer(CommInfoReply::default().into()),
            Request::Comm => log("comm messages are not used by this kernel: ignored"),
            Request::Interrupt => {
                self.shared.interrupt.request();
                answer(InterruptReply::new().into());
            }
            Request::Shutdown(r) => {
                answer(
                    ShutdownReply {
                        restart: r.restart,
                        status: ReplyStatus::Ok,
                        error: None,
                    }
                    .into(),
                );
                return Flow::Shutdown;
            }
            Request::Malformed { msg_type, error } => {
                log(&format!("{msg_type}: {error}"));
                if msg_type.ends_with("_request") {
                    answer(crate::protocol::malformed_reply(&msg_type, &error));
                }
            }
            Request::Unknown(t) => log(&format!("ignored a message of unknown type `{t}`")),
            Request::Unexpected(t) => {
                log(&format!("ignored `{t}`: not a request a kernel answers"))
            }
        }
        Flow::Continue
    }

    fn submit(&self, job: Job) {
        if self.jobs.send(job).is_err() {
            log("the executor has stopped: request dropped");
        }
    }

    fn status(&self, parent: &JupyterMessage, busy: bool) {
        let s = if busy { Status::busy() } else { Status::idle() };
        self.shared.outbox.publish(broadcast(Some(parent), s));
    }
}

/// The line of `code` holding char `cursor`: the line, its first char's index, the cursor's
/// column (chars).
pub fn line_at(code: &str, cursor: usize) -> (&str, usize, usize) {
    let mut start_char = 0;
    let mut chars_seen = 0;
    for line in code.split_inclusive('\n') {
        let n = line.chars().count();
        let content = line.strip_suffix('\n').unwrap_or(line);
        if cursor <= chars_seen + content.chars().count() {
            return (content, start_char, cursor - chars_seen);
        }
        chars_seen += n;
        start_char += n;
    }
    ("", start_char, 0)
}

/// The help shown for a magic line (`%ddp`, `%ddp SUB ...`, `%%ddp ...`).
fn magic_help(line: &str) -> Option<String> {
    let t = line.trim_start();
    let rest = t.strip_prefix("%%").or_else(|| t.strip_prefix('%'))?;
    let mut words = rest.split_whitespace();
    if words.next()? != magics::MAGIC {
        return None;
    }
    match words.next() {
        Some(sub) => magics::help(Some(sub)).or_else(|| magics::help(None)),
        None => magics::help(None),
    }
}

/// The `kernel_info_reply`.
pub fn kernel_info() -> KernelInfoReply {
    KernelInfoReply {
        status: ReplyStatus::Ok,
        protocol_version: PROTOCOL_VERSION.to_string(),
        implementation: "ddp-kernel".to_string(),
        implementation_version: env!("CARGO_PKG_VERSION").to_string(),
        language_info: LanguageInfo {
            name: "rust".to_string(),
            version: env!("DDP_KERNEL_RUSTC_VERSION").to_string(),
            mimetype: Some("text/rust".to_string()),
            file_extension: Some(".rs".to_string()),
            pygments_lexer: Some("rust".to_string()),
            codemirror_mode: Some(CodeMirrorMode::Simple("rust".to_string())),
            nbconvert_exporter: None,
        },
        banner: format!(
            "ddp-kernel {}: Rust cells (evcxr) and %ddp magics for data-parallel runs. `%ddp help` lists them.",
            env!("CARGO_PKG_VERSION")
        ),
        help_links: vec![HelpLink {
            text: "evcxr commands (:dep, :vars, ...)".to_string(),
            url: "https://github.com/evcxr/evcxr/blob/main/COMMON.md".to_string(),
        }],
        debugger: false,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_at_finds_the_cursor_line() {
        let code = "let a = 1;\n%ddp sh\nx";
        assert_eq!(line_at(code, 18), ("%ddp sh", 11, 7));
        assert_eq!(line_at(code, 3), ("let a = 1;", 0, 3));
        assert_eq!(line_at("é%dd", 4), ("é%dd", 0, 4));
    }

    #[test]
    fn magic_help_for_lines() {
        assert!(magic_help("%ddp ls").unwrap().contains("%ddp ls"));
        assert!(magic_help("%ddp").unwrap().contains("Usage"));
        assert!(magic_help("let x = 1;").is_none());
        assert!(magic_help("%other").is_none());
    }

    #[test]
    fn kernel_info_says_rust() {
        let k = kernel_info();
        assert_eq!(k.language_info.name, "rust");
        assert_eq!(k.language_info.file_extension.as_deref(), Some(".rs"));
        assert_eq!(k.protocol_version, "5.4");
    }
}
