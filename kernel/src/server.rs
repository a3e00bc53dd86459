//! Starting and ending the kernel process: bind the sockets, start the executor and the message
//! loop, and on `shutdown_request` end the live cards, flush the last messages and return.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jupyter_protocol::Status;
use tokio_util::sync::CancellationToken;

use crate::cards::Cards;
use crate::error::{Error, Result};
use crate::kernel::{Flow, Kernel};
use crate::protocol::broadcast;
use crate::shared::Shared;
use crate::transport::{bind, read_connection_file};

/// How long replies already queued get to go out when the kernel ends.
const FLUSH: Duration = Duration::from_millis(200);

/// Serves the kernel described by `connection_file` until a `shutdown_request` (or until the
/// client closes every socket's channel).
pub fn serve(connection_file: &Path) -> Result<()> {
    let info = read_connection_file(connection_file)?;
    let notebook_dir = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    let workspace = notebook_dir.join(ddp_workspaces::Workspace::resolve(None));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("ddp-kernel-io")
        .enable_all()
        .build()
        .map_err(|e| Error::io("tokio runtime", e))?;
    runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        let transport = bind(&info, &shutdown).await?;
        let mut incoming = transport.incoming;
        let cards = Cards::new(tokio::runtime::Handle::current(), shutdown.clone());
        let shared = Arc::new(Shared::new(
            transport.outbox.clone(),
            cards,
            workspace,
            notebook_dir,
        ));
        shared.outbox.publish(broadcast(None, Status::starting()));
        let (jobs, job_rx) = std::sync::mpsc::channel();
        let executor = crate::executor::spawn(shared.clone(), job_rx);
        let mut kernel = Kernel::new(shared.clone(), jobs);
        while let Some(request) = incoming.recv().await {
            if kernel.handle(request) == Flow::Shutdown {
                break;
            }
        }
        drop(kernel);
        // A running cell is interrupted so the executor can end; runs are not touched.
        shared.interrupt.request();
        tokio::time::sleep(FLUSH).await;
        shutdown.cancel();
        shared.cards.close(FLUSH).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let _ = executor;
        Ok(())
    })
}
