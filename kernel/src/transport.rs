//! The five ZeroMQ sockets of a kernel (`jupyter-zmq-client`), each owned by one task, and the
//! channels the rest of the kernel uses to reach them ([`Outbox`]) and to hear from them
//! ([`Transport::incoming`]).
//!
//! - shell and control: a reader task per socket turns every frame set into an [`Incoming`]
//!   (signature checked by the library: a bad or missing HMAC, or a message that does not parse,
//!   is logged and dropped, never executed) and a writer task sends replies;
//! - iopub: one writer task, fed by every producer (the executor, live run cards);
//! - stdin: one task sends `input_request`s and routes `input_reply`s back to the asker;
//! - heartbeat: a task that echoes every ping, so it answers while a cell runs.
//!
//! Every task ends when the kernel's shutdown token is cancelled.

use std::path::Path;
use std::sync::{Arc, Mutex};

use jupyter_protocol::{ConnectionInfo, JupyterMessage, JupyterMessageContent};
use jupyter_zmq_client::{
    RawMessage, RuntimeError, create_kernel_control_connection, create_kernel_heartbeat_connection,
    create_kernel_iopub_connection, create_kernel_shell_connection, create_kernel_stdin_connection,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use zeromq::{SocketRecv, SocketSend};

use crate::error::{Error, Result};
use crate::log;
use crate::protocol::{Channel, Incoming, decode};

/// Reads a connection file (the JSON a Jupyter client writes for the kernel).
pub fn read_connection_file(path: &Path) -> Result<ConnectionInfo> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| Error::ConnectionFile {
        path: path.to_path_buf(),
        msg: e.to_string(),
    })
}

/// An `input_request` waiting for its `input_reply`.
struct InputAsk {
    request: JupyterMessage,
    answer: oneshot::Sender<String>,
}

/// Where the kernel sends messages: cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct Outbox {
    iopub: mpsc::UnboundedSender<JupyterMessage>,
    shell: mpsc::UnboundedSender<JupyterMessage>,
    control: mpsc::UnboundedSender<JupyterMessage>,
    stdin: mpsc::UnboundedSender<InputAsk>,
}

impl Outbox {
    /// Publishes on IOPub.
    pub fn publish(&self, message: JupyterMessage) {
        let _ = self.iopub.send(message);
    }

    /// Sends a reply on the socket its request came from.
    pub fn reply(&self, channel: Channel, message: JupyterMessage) {
        let _ = match channel {
            Channel::Shell => self.shell.send(message),
            Channel::Control => self.control.send(message),
        };
    }

    /// Sends `request` (an `input_request`) on stdin; the receiver gets the `input_reply`'s value.
    pub fn ask_input(&self, request: JupyterMessage) -> oneshot::Receiver<String> {
        let (answer, rx) = oneshot::channel();
        let _ = self.stdin.send(InputAsk { request, answer });
        rx
    }
}

/// The bound sockets: requests come in on `incoming`, everything goes out through `outbox`.
pub struct Transport {
    pub incoming: mpsc::UnboundedReceiver<Incoming>,
    pub outbox: Outbox,
}

/// Binds the five sockets of `info` and starts their tasks (on the current tokio runtime).
pub async fn bind(info: &ConnectionInfo, shutdown: &CancellationToken) -> Result<Transport> {
    let session = uuid::Uuid::new_v4().to_string();
    let bind_err = |channel: &'static str, url: String| {
        move |e: RuntimeError| Error::Transport {
            channel,
            url,
            msg: e.to_string(),
        }
    };
    let shell = create_kernel_shell_connection(info, &session)
        .await
        .map_err(bind_err("shell", info.shell_url()))?;
    let control = create_kernel_control_connection(info, &session)
        .await
        .map_err(bind_err("control", info.control_url()))?;
    let stdin = create_kernel_stdin_connection(info, &session)
        .await
        .map_err(bind_err("stdin", info.stdin_url()))?;
    let mut iopub = create_kernel_iopub_connection(info, &session)
        .await
        .map_err(bind_err("iopub", info.iopub_url()))?;
    let mut heartbeat = create_kernel_heartbeat_connection(info)
        .await
        .map_err(bind_err("heartbeat", info.hb_url()))?;

    let (incoming_tx, incoming) = mpsc::unbounded_channel();
    let (iopub_tx, mut iopub_rx) = mpsc::unbounded_channel::<JupyterMessage>();
    let (shell_tx, shell_rx) = mpsc::unbounded_channel();
    let (control_tx, control_rx) = mpsc::unbounded_channel();
    let (stdin_tx, mut stdin_rx) = mpsc::unbounded_channel::<InputAsk>();

    for (channel, conn, replies) in [
        (Channel::Shell, shell, shell_rx),
        (Channel::Control, control, control_rx),
    ] {
        let (mut send, mut recv) = conn.split();
        let tx = incoming_tx.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    read = read_request(&mut recv) => match read {
                        Ok(Some(message)) => {
                            if tx.send(Incoming::new(channel, message)).is_err() {
                                break;
                            }
                        }
                        Ok(None) => log(&format!("{} channel: dropped a message whose header does not parse", channel.name())),
                        Err(e) => dropped(channel.name(), &e).await,
                    },
                }
            }
        });
        let stop = shutdown.clone();
        let mut replies = replies;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    next = replies.recv() => match next {
                        Some(m) => {
                            if let Err(e) = send.send(m).await {
                                log(&format!("{} channel: sending a reply failed: {e}", channel.name()));
                            }
                        }
                        None => break,
                    },
                }
            }
        });
    }

    let stop = shutdown.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                // Drain what is queued before leaving, so a shutdown's status messages go out.
                _ = stop.cancelled() => {
                    while let Ok(m) = iopub_rx.try_recv() {
                        let _ = iopub.send(m).await;
                    }
                    break;
                }
                next = iopub_rx.recv() => match next {
                    Some(m) => {
                        if let Err(e) = iopub.send(m).await {
                            log(&format!("iopub channel: publishing failed: {e}"));
                        }
                    }
                    None => break,
                },
            }
        }
    });

    let stop = shutdown.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                ping = heartbeat.socket.recv() => match ping {
                    Ok(ping) => {
                        if let Err(e) = heartbeat.socket.send(ping).await {
                            log(&format!("heartbeat: echo failed: {e}"));
                        }
                    }
                    Err(e) => {
                        log(&format!("heartbeat: {e}"));
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                },
            }
        }
    });

    let (mut stdin_send, mut stdin_recv) = stdin.split();
    let pending: Arc<Mutex<Option<oneshot::Sender<String>>>> = Arc::default();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                ask = stdin_rx.recv() => match ask {
                    Some(ask) => {
                        *pending.lock().unwrap() = Some(ask.answer);
                        if let Err(e) = stdin_send.send(ask.request).await {
                            log(&format!("stdin channel: input_request failed: {e}"));
                            pending.lock().unwrap().take();
                        }
                    }
                    None => break,
                },
                read = stdin_recv.read() => match read {
                    Ok(m) => match m.content {
                        JupyterMessageContent::InputReply(r) => {
                            if let Some(answer) = pending.lock().unwrap().take() {
                                let _ = answer.send(r.value);
                            }
                        }
                        other => log(&format!("stdin channel: ignored {}", other.message_type())),
                    },
                    Err(e) => dropped("stdin", &e).await,
                },
            }
        }
    });

    Ok(Transport {
        incoming,
        outbox: Outbox {
            iopub: iopub_tx,
            shell: shell_tx,
            control: control_tx,
            stdin: stdin_tx,
        },
    })
}

/// Reads one message: signature checked (`Err` when it is bad or missing), content typed with
/// [`decode`] (`None` when the header is not even JSON).
async fn read_request(
    recv: &mut jupyter_zmq_client::RouterRecvConnection,
) -> std::result::Result<Option<JupyterMessage>, RuntimeError> {
    let frames = recv.socket.recv().await?;
    let raw = RawMessage::from_multipart(frames, &recv.mac)?;
    Ok(decode(raw.zmq_identities, &raw.jparts))
}

/// Logs a message that could not be read (and so is never acted on).
async fn dropped(channel: &str, e: &RuntimeError) {
    match e {
        RuntimeError::VerifyError(_) => log(&format!(
            "{channel} channel: dropped a message with a bad signature (HMAC-SHA256 does not match the connection key)"
        )),
        RuntimeError::MissingHmac | RuntimeError::DecodeError(_) => log(&format!(
            "{channel} channel: dropped a message without a valid signature"
        )),
        RuntimeError::ZmqError(_) => {
            log(&format!("{channel} channel: {e}"));
            // A socket error repeats until the socket recovers: do not spin.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        _ => log(&format!("{channel} channel: dropped a message: {e}")),
    }
}
