//! The messaging protocol at the edge: every incoming message becomes a typed [`Request`] once,
//! and every outgoing one is built here with the right parent, session and protocol version.
//!
//! `jupyter-protocol` already parses message content into its `JupyterMessageContent` enum;
//! [`Request`] narrows it to what a kernel is asked (replies and outputs sent by a client are
//! [`Request::Unexpected`]), so the kernel's dispatch is one exhaustive `match` on requests.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::Value;

use jupyter_protocol::{
    CompleteRequest, ExecuteReply, ExecuteRequest, ExecutionCount, Header, HistoryRequest,
    InspectRequest, IsCompleteRequest, JupyterMessage, JupyterMessageContent, ReplyError,
    ReplyStatus, ShutdownRequest, UnknownMessage,
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
    /// A request whose content does not parse even with the spec's defaults filled in: answered
    /// with an error reply naming what is wrong.
    Malformed {
        msg_type: String,
        error: String,
    },
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
            C::UnknownMessage(u) => match u.content.get(MALFORMED) {
                Some(error) => Request::Malformed {
                    msg_type: u.msg_type.clone(),
                    error: error.as_str().unwrap_or_default().to_string(),
                },
                None => Request::Unknown(u.msg_type.clone()),
            },
            other => Request::Unexpected(other.message_type().to_string()),
        }
    }
}

/// The key under which [`decode`] leaves the parse error of a request it could not type.
const MALFORMED: &str = "__ddp_malformed__";

/// Decodes a signed-and-verified message into a [`JupyterMessage`], filling in the fields the
/// messaging spec gives defaults for and clients may omit (jupyter_client leaves out `unique` and
/// `n` of a history search; other clients `silent`, `store_history`, ...). A request whose
/// content still does not parse becomes [`Request::Malformed`] (so it gets an error reply);
/// `None` when not even the header parses (nothing to reply to).
pub fn decode(identities: Vec<Bytes>, parts: &[Bytes]) -> Option<JupyterMessage> {
    let header: Header = serde_json::from_slice(parts.first()?).ok()?;
    let parent_header = parts.get(1).and_then(|p| serde_json::from_slice(p).ok());
    let metadata = parts
        .get(2)
        .and_then(|p| serde_json::from_slice(p).ok())
        .unwrap_or_else(|| serde_json::json!({}));
    let mut content: Value = parts
        .get(3)
        .and_then(|p| serde_json::from_slice(p).ok())
        .unwrap_or_else(|| serde_json::json!({}));
    with_defaults(&header.msg_type, &mut content);
    let content = match JupyterMessageContent::from_type_and_content(&header.msg_type, content) {
        Ok(c) => c,
        Err(e) => JupyterMessageContent::UnknownMessage(UnknownMessage {
            msg_type: header.msg_type.clone(),
            content: serde_json::json!({ MALFORMED: e.to_string() }),
        }),
    };
    Some(JupyterMessage {
        zmq_identities: identities,
        header,
        parent_header,
        metadata,
        content,
        buffers: parts.get(4..).map(<[Bytes]>::to_vec).unwrap_or_default(),
        channel: None,
    })
}

/// Fills in the defaults the messaging spec states for optional request fields.
fn with_defaults(msg_type: &str, content: &mut Value) {
    let Some(obj) = content.as_object_mut() else {
        return;
    };
    let mut default = |key: &str, value: Value| {
        obj.entry(key.to_string()).or_insert(value);
    };
    match msg_type {
        "execute_request" => {
            default("silent", Value::Bool(false));
            default("store_history", Value::Bool(true));
            default("user_expressions", serde_json::json!({}));
            default("allow_stdin", Value::Bool(true));
            default("stop_on_error", Value::Bool(true));
        }
        "history_request" => {
            default("output", Value::Bool(false));
            default("raw", Value::Bool(true));
            default("unique", Value::Bool(false));
            default("n", Value::from(0));
            default("start", Value::from(0));
            default("stop", Value::from(0));
        }
        "inspect_request" => default("detail_level", Value::from(0)),
        "shutdown_request" => default("restart", Value::Bool(false)),
        _ => {}
    }
}

/// An error reply to a request that could not be typed ([`Request::Malformed`]).
pub fn malformed_reply(msg_type: &str, error: &str) -> JupyterMessageContent {
    let unknown = UnknownMessage {
        msg_type: msg_type.to_string(),
        content: Value::Null,
    };
    unknown.reply(serde_json::json!({
        "status": "error",
        "ename": "MalformedRequest",
        "evalue": format!("{msg_type}: {error}"),
        "traceback": [],
    }))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(msg_type: &str, content: Value) -> Vec<Bytes> {
        let header = serde_json::json!({
            "msg_id": "1", "username": "u", "session": "s", "date": "2026-11-22T00:00:00Z",
            "msg_type": msg_type, "version": "5.4"
        });
        [
            header,
            serde_json::json!({}),
            serde_json::json!({}),
            content,
        ]
        .iter()
        .map(|v| Bytes::from(serde_json::to_vec(v).unwrap()))
        .collect()
    }

    #[test]
    fn omitted_fields_get_the_spec_defaults() {
        let m = decode(
            vec![],
            &parts(
                "history_request",
                serde_json::json!({
                    "hist_access_type": "search", "pattern": "40*", "output": false, "raw": true
                }),
            ),
        )
        .unwrap();
        assert!(matches!(
            Request::of(&m),
            Request::History(HistoryRequest::Search { unique: false, .. })
        ));
        let m = decode(
            vec![],
            &parts("execute_request", serde_json::json!({"code": "1"})),
        )
        .unwrap();
        match Request::of(&m) {
            Request::Execute(r) => assert!(r.store_history && !r.silent),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn content_that_does_not_parse_is_malformed_not_dropped() {
        let m = decode(
            vec![],
            &parts("execute_request", serde_json::json!({"code": 5})),
        )
        .unwrap();
        match Request::of(&m) {
            Request::Malformed { msg_type, error } => {
                assert_eq!(msg_type, "execute_request");
                assert!(error.contains("invalid type"), "{error}");
            }
            other => panic!("{other:?}"),
        }
        let reply = serde_json::to_value(malformed_reply("execute_request", "bad")).unwrap();
        assert_eq!(reply["status"], "error");
        assert!(decode(vec![], &[Bytes::from_static(b"not json")]).is_none());
    }
}
