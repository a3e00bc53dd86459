//! The executor thread: runs cells (magics and Rust, in the cell's order), and completes and
//! inspects Rust, one job at a time off the message loop. Each job ends with its reply and
//! `idle`; a panic inside a job becomes an error reply, never a dead kernel.

use std::sync::Arc;
use std::sync::mpsc::Receiver;

use jupyter_protocol::{
    CompleteReply, ExecuteRequest, InspectReply, JupyterMessage, Media, MediaType, ReplyError,
    ReplyStatus, Status,
};

use crate::cell::{Segment, segments};
use crate::magics::{self, MAGIC};
use crate::output::Out;
use crate::protocol::{Channel, broadcast, execute_reply, reply, reply_error};
use crate::rust::{RustOutcome, RustSession, publish_value};
use crate::shared::Shared;
use crate::{log, panic_message};

/// Work for the executor.
pub enum Job {
    Execute {
        message: JupyterMessage,
        request: ExecuteRequest,
        /// The execution count reported for this request.
        count: usize,
    },
    Complete {
        message: JupyterMessage,
        channel: Channel,
        request: jupyter_protocol::CompleteRequest,
    },
    Inspect {
        message: JupyterMessage,
        channel: Channel,
        request: jupyter_protocol::InspectRequest,
    },
}

/// Starts the executor thread (and evcxr, in the background); it ends when `jobs` closes.
pub fn spawn(shared: Arc<Shared>, jobs: Receiver<Job>) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("executor".into())
        .spawn(move || {
            let mut rust = RustSession::start();
            while let Ok(job) = jobs.recv() {
                run_job(job, &shared, &mut rust);
            }
        })
        .expect("spawning the executor thread")
}

fn run_job(job: Job, shared: &Shared, rust: &mut RustSession) {
    let outbox = &shared.outbox;
    match job {
        Job::Execute {
            message,
            request,
            count,
        } => {
            shared.interrupt.begin();
            let out = Out::new(outbox.clone(), message.clone(), count, request.silent);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_cell(&request, shared, rust, &out)
            }))
            .unwrap_or_else(|panic| {
                Err(reply_error(
                    "InternalError",
                    &format!("ddp-kernel failed on this cell: {}", panic_message(&panic)),
                    None,
                ))
            });
            if let Err(e) = &result {
                out.error(e);
            }
            outbox.reply(
                Channel::Shell,
                reply(&message, execute_reply(count, result.err())),
            );
            idle(shared, &message);
        }
        Job::Complete {
            message,
            channel,
            request,
        } => {
            let code = &request.code;
            let content = answer(
                || match rust.complete(code, byte_offset(code, request.cursor_pos)) {
                    Some((matches, start, end)) => CompleteReply {
                        matches,
                        cursor_start: char_offset(code, start),
                        cursor_end: char_offset(code, end),
                        ..CompleteReply::default()
                    },
                    None => CompleteReply {
                        cursor_start: request.cursor_pos,
                        cursor_end: request.cursor_pos,
                        ..CompleteReply::default()
                    },
                },
                |error| CompleteReply {
                    status: ReplyStatus::Error,
                    error: Some(Box::new(error)),
                    ..CompleteReply::default()
                },
            );
            outbox.reply(channel, reply(&message, content));
            idle(shared, &message);
        }
        Job::Inspect {
            message,
            channel,
            request,
        } => {
            let code = &request.code;
            let content = answer(
                || match rust.hover(code, byte_offset(code, request.cursor_pos)) {
                    Some((plain, html)) => InspectReply {
                        found: true,
                        data: Media::new(vec![MediaType::Plain(plain), MediaType::Html(html)]),
                        ..InspectReply::default()
                    },
                    None => InspectReply::default(),
                },
                |error| InspectReply {
                    status: ReplyStatus::Error,
                    error: Some(Box::new(error)),
                    ..InspectReply::default()
                },
            );
            outbox.reply(channel, reply(&message, content));
            idle(shared, &message);
        }
    }
}

/// The reply `work` makes, or the error reply `failed` makes of its panic (logged).
fn answer<T>(work: impl FnOnce() -> T, failed: impl FnOnce(ReplyError) -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
        .unwrap_or_else(|panic| failed(internal(&panic)))
}

/// Runs the cell's segments in order, stopping at the first error or after an interrupt (a
/// `%ddp wait` stops waiting and the rest of the cell is not run).
fn run_cell(
    request: &ExecuteRequest,
    shared: &Shared,
    rust: &mut RustSession,
    out: &Out,
) -> Result<(), ReplyError> {
    for (i, segment) in segments(&request.code).into_iter().enumerate() {
        if i > 0 && shared.interrupt.requested() {
            out.stream(false, "interrupted: the rest of the cell was not run\n");
            return Ok(());
        }
        match segment {
            Segment::LineMagic { name, args } => {
                check_magic(&name, false)?;
                magics::exec::line(&args, shared, out).map_err(to_reply)?;
            }
            Segment::CellMagic {
                name,
                args,
                body,
                body_line,
            } => {
                check_magic(&name, true)?;
                magics::exec::cell(&args, &body, body_line, shared, out).map_err(to_reply)?;
            }
            Segment::Rust { code, first_line } => {
                match rust.execute(
                    &code,
                    first_line,
                    out,
                    &shared.interrupt,
                    request.allow_stdin,
                ) {
                    RustOutcome::Value(content) => publish_value(&content, out),
                    RustOutcome::Failed(e) => return Err(e),
                }
            }
        }
    }
    Ok(())
}

fn check_magic(name: &str, cell: bool) -> Result<(), ReplyError> {
    if name == MAGIC {
        return Ok(());
    }
    let sigil = if cell { "%%" } else { "%" };
    Err(reply_error(
        "UsageError",
        &format!(
            "unknown magic `{sigil}{name}`: this kernel's magics are `%ddp`, `%%ddp run` and `%%ddp train` (`%ddp help` lists them)"
        ),
        None,
    ))
}

fn to_reply(e: crate::Error) -> ReplyError {
    reply_error(e.ename(), &e.to_string(), e.traceback())
}

fn internal(panic: &Box<dyn std::any::Any + Send>) -> ReplyError {
    let msg = panic_message(panic);
    log(&format!("internal error: {msg}"));
    reply_error("InternalError", &msg, None)
}

fn idle(shared: &Shared, parent: &JupyterMessage) {
    shared
        .outbox
        .publish(broadcast(Some(parent), Status::idle()));
}

/// The byte offset of char index `chars` in `s` (Jupyter counts code points).
pub fn byte_offset(s: &str, chars: usize) -> usize {
    s.char_indices().nth(chars).map_or(s.len(), |(b, _)| b)
}

/// The char index of byte offset `bytes` in `s`.
pub fn char_offset(s: &str, bytes: usize) -> usize {
    s.get(..bytes.min(s.len())).map_or(0, |p| p.chars().count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_convert_between_chars_and_bytes() {
        let s = "é + x";
        assert_eq!(byte_offset(s, 1), 2);
        assert_eq!(byte_offset(s, 99), s.len());
        assert_eq!(char_offset(s, 2), 1);
    }

    #[test]
    fn only_the_ddp_magic_is_known() {
        assert!(check_magic("ddp", false).is_ok());
        let e = check_magic("time", false).unwrap_err();
        assert!(e.evalue.contains("unknown magic `%time`"), "{}", e.evalue);
    }
}
