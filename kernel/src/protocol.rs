//! The messaging protocol at the edge: every incoming message becomes a typed [`Request`] once,
//! and every outgoing one is built here with the right parent, session and protocol version.
//!
//! `jupyter-protocol` already parses message content into its `JupyterMessageContent` enum;
//! [`Request`] narrows it to what a kernel is asked (replies and outputs sent by a client are
//! [`Request::Unexpected`]), so the kernel's dispatch is one exhaustive `match` on requests.

use std::collections::HashMap;

use jupyter_protocol::{
    CompleteRequest, ExecuteReply, ExecuteRequest, ExecutionCount, HistoryRequest, InspectRequest,
    IsCompleteRequest, JupyterMessage, JupyterMessageContent, ReplyError, ReplyStatus,
    ShutdownRequest,
};

/// The protocol version this kernel speaks.
pub const PROTOCOL_VERSION: &str = "5.4";

/// The socket a message came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    Shell,
    Control,
}

impl Channel {
    pub fn name(self) -> &'static str {
        match self {
            Channel::Shell => "shell",
            Channel::Control => "control",
        }
    }
}

/// What a client asks of the kernel.
#[derive(Debug, Clone)]
pub enum Request {
    KernelInfo,
    Execute(ExecuteRequest),
    IsComplete(IsCompleteRequest),
    Complete(CompleteRequest),
    Inspect(InspectRequest),
    History(HistoryRequest),
    CommInfo,
    /// `comm_open`, `comm_msg`, `comm_close`: this kernel has no comm targets; ignored.
    Comm,
    Shutdown(ShutdownRequest),
    Interrupt,
    /// A message type this kernel does not handle (logged and ignored), by its `msg_type`.
    Unknown(String),
    /// A message a client does not send to a kernel (a reply, an output), by its `msg_type`.
    Unexpected(String),
}

impl Request {
    /// The typed request carried by `message`.
    pub fn of(message: &JupyterMessage) -> Request {
        use JupyterMessageContent as C;
        match &message.content {
            C::KernelInfoRequest(_) => Request::KernelInfo,
            C::ExecuteRequest(r) => Request::Execute(r.clone()),
            C::IsCompleteRequest(r) => Request::IsComplete(r.clone()),
            C::CompleteRequest(r) => Request::Complete(r.clone()),
            C::InspectRequest(r) => Request::Inspect(r.clone()),
            C::HistoryRequest(r) => Request::History(r.clone()),
            C::CommInfoRequest(_) => Request::CommInfo,
            C::CommOpen(_) | C::CommMsg(_) | C::CommClose(_) => Request::Comm,
            C::ShutdownRequest(r) => Request::Shutdown(r.clone()),
            C::InterruptRequest(_) => Request::Interrupt,
            C::UnknownMessage(u) => Request::Unknown(u.msg_type.clone()),
            other => Request::Unexpected(other.message_type().to_string()),
        }
    }
}

/// A message received on shell or control, with its typed request.
#[derive(Debug, Clone)]
pub struct Incoming {
    pub channel: Channel,
    pub request: Request,
    pub message: JupyterMessage,
}

impl Incoming {
    pub fn new(channel: Channel, message: JupyterMessage) -> Incoming {
        Incoming {
            channel,
            request: Request::of(&message),
            message,
        }
    }
}

/// A reply to `parent` on the socket it came from (routed by its ZeroMQ identities).
pub fn reply(parent: &JupyterMessage, content: impl Into<JupyterMessageContent>) -> JupyterMessage {
    stamp(JupyterMessage::new(content, Some(parent)))
}

/// An IOPub message caused by `parent` (`None`: the kernel's own, e.g. `starting`).
pub fn broadcast(
    parent: Option<&JupyterMessage>,
    content: impl Into<JupyterMessageContent>,
) -> JupyterMessage {
    let mut m = stamp(JupyterMessage::new(content, parent));
    // IOPub has no routing: the identities of the request would become the topic frames.
    m.zmq_identities.clear();
    m
}

fn stamp(mut m: JupyterMessage) -> JupyterMessage {
    m.header.version = PROTOCOL_VERSION.to_string();
    m.header.username = "ddp-kernel".to_string();
    m
}

/// An `execute_reply` that passes the message spec's validator (`user_expressions` is `{}`, not
/// `null`; an error carries `ename`, `evalue`, `traceback`).
pub fn execute_reply(count: usize, error: Option<ReplyError>) -> ExecuteReply {
    ExecuteReply {
        status: if error.is_some() {
            ReplyStatus::Error
        } else {
            ReplyStatus::Ok
        },
        execution_count: ExecutionCount::new(count),
        payload: Vec::new(),
        user_expressions: Some(HashMap::new()),
        error: error.map(Box::new),
    }
}

/// A [`ReplyError`] (also the content of the `error` output) from a name and a message; the
/// traceback is the message's lines unless given.
pub fn reply_error(ename: &str, evalue: &str, traceback: Option<Vec<String>>) -> ReplyError {
    ReplyError {
        ename: ename.to_string(),
        evalue: evalue.to_string(),
        traceback: traceback
            .unwrap_or_else(|| evalue.lines().map(str::to_string).collect::<Vec<_>>()),
    }
}
