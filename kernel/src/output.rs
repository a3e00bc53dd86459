//! Outputs of one request: everything a cell shows goes through an [`Out`], which parents each
//! IOPub message to the request and numbers results with its execution count.

use jupyter_protocol::{
    ClearOutput, DisplayData, ErrorOutput, ExecuteResult, ExecutionCount, JupyterMessage, Media,
    ReplyError, StreamContent, Transient, UpdateDisplayData,
};

use crate::protocol::broadcast;
use crate::render::Output;
use crate::transport::Outbox;

/// The outputs of one `execute_request`.
#[derive(Clone)]
pub struct Out {
    outbox: Outbox,
    parent: JupyterMessage,
    count: usize,
    silent: bool,
}

impl Out {
    pub fn new(outbox: Outbox, parent: JupyterMessage, count: usize, silent: bool) -> Out {
        Out {
            outbox,
            parent,
            count,
            silent,
        }
    }

    pub fn parent(&self) -> &JupyterMessage {
        &self.parent
    }

    pub fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// Text on stdout or stderr.
    pub fn stream(&self, stderr: bool, text: &str) {
        let content = if stderr {
            StreamContent::stderr(text)
        } else {
            StreamContent::stdout(text)
        };
        self.outbox.publish(broadcast(Some(&self.parent), content));
    }

    /// A rich output (`display_data`), updatable later when `display_id` is given.
    pub fn display(&self, output: &Output, display_id: Option<&str>) {
        self.display_media(media(output), display_id);
    }

    pub fn display_media(&self, data: Media, display_id: Option<&str>) {
        let content = DisplayData {
            data,
            metadata: Default::default(),
            transient: display_id.map(|id| Transient {
                display_id: Some(id.to_string()),
            }),
        };
        self.outbox.publish(broadcast(Some(&self.parent), content));
    }

    /// Replaces the output shown under `display_id` (in this cell or any other).
    pub fn update(&self, output: &Output, display_id: &str) {
        let content = UpdateDisplayData::new(media(output), display_id);
        self.outbox.publish(broadcast(Some(&self.parent), content));
    }

    /// The cell's value (`execute_result`); not sent for a silent request.
    pub fn result(&self, data: Media) {
        if self.silent {
            return;
        }
        let content = ExecuteResult {
            execution_count: ExecutionCount::new(self.count),
            data,
            metadata: Default::default(),
            // `{}`, not `null`: the message spec's validator rejects null.
            transient: Some(Transient::default()),
        };
        self.outbox.publish(broadcast(Some(&self.parent), content));
    }

    /// The cell's error (`error` output), as its reply also carries it.
    pub fn error(&self, e: &ReplyError) {
        let content = ErrorOutput {
            ename: e.ename.clone(),
            evalue: e.evalue.clone(),
            traceback: e.traceback.clone(),
        };
        self.outbox.publish(broadcast(Some(&self.parent), content));
    }

    /// Clears the cell's output (`wait`: when the next output arrives).
    pub fn clear(&self, wait: bool) {
        self.outbox
            .publish(broadcast(Some(&self.parent), ClearOutput { wait }));
    }
}

/// A rendered output as a Jupyter MIME bundle.
pub fn media(output: &Output) -> Media {
    serde_json::from_value(serde_json::Value::Object(output.to_mime_map()))
        .expect("a MIME map is a Media")
}

/// A MIME bundle from evcxr's `content_by_mime_type` (JSON types unpacked, as the spec wants).
pub fn media_of_strings(content: &std::collections::HashMap<String, String>) -> Media {
    let map: serde_json::Map<String, serde_json::Value> = content
        .iter()
        .map(|(mime, text)| {
            let value = if mime.contains("json") {
                serde_json::from_str(text)
                    .unwrap_or_else(|_| serde_json::Value::String(text.clone()))
            } else {
                serde_json::Value::String(text.clone())
            };
            (mime.clone(), value)
        })
        .collect();
    serde_json::from_value(serde_json::Value::Object(map)).expect("a MIME map is a Media")
}
