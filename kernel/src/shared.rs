//! The kernel's shared state ([`Shared`]), reached by the message loop, the executor and the
//! magics: the outbox, the interrupt state, the live cards, the history, the workspace the magics
//! act on and the notebook's folder. It imports none of the modules that use it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::cards::Cards;
use crate::history::History;
use crate::interrupt::Interrupt;
use crate::transport::Outbox;

/// State shared by the loop, the executor and the live cards.
pub struct Shared {
    pub outbox: Outbox,
    pub interrupt: Interrupt,
    pub cards: Cards,
    pub history: Mutex<History>,
    workspace: Mutex<PathBuf>,
    notebook_dir: PathBuf,
}

impl Shared {
    pub fn new(outbox: Outbox, cards: Cards, workspace: PathBuf, notebook_dir: PathBuf) -> Shared {
        Shared {
            outbox,
            interrupt: Interrupt::default(),
            cards,
            history: Mutex::default(),
            workspace: Mutex::new(workspace),
            notebook_dir,
        }
    }

    /// The workspace magics act on.
    pub fn workspace(&self) -> PathBuf {
        self.workspace.lock().unwrap().clone()
    }

    pub fn set_workspace(&self, root: PathBuf) {
        *self.workspace.lock().unwrap() = root;
    }

    /// The notebook's folder (the kernel's working folder when it started).
    pub fn notebook_dir(&self) -> &Path {
        &self.notebook_dir
    }

    /// `p` relative to the notebook's folder (unchanged when absolute).
    pub fn notebook_path(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.notebook_dir.join(p)
        }
    }
}
