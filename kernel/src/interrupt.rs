//! Interrupting the running request (`interrupt_request` on control): waits (`%ddp wait`, a
//! run's `--wait`) poll [`Interrupt::requested`] and stop waiting; a running Rust cell's evcxr
//! process is killed (evcxr restarts it: variables are lost, items and dependencies kept).

use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The interrupt state shared by the control channel and the executor.
#[derive(Default)]
pub struct Interrupt {
    requested: AtomicBool,
    /// The evcxr child while a Rust cell runs in it.
    rust: Mutex<Option<Arc<Mutex<Child>>>>,
}

impl Interrupt {
    /// A new request starts: earlier interrupts are forgotten.
    pub fn begin(&self) {
        self.requested.store(false, Ordering::SeqCst);
    }

    /// Interrupts what runs now (nothing if the kernel is idle).
    pub fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
        if let Some(child) = self.rust.lock().unwrap().as_ref() {
            let _ = child.lock().unwrap().kill();
        }
    }

    pub fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// Marks the evcxr process as running a cell (`Some`) or not (`None`).
    pub fn set_rust(&self, child: Option<Arc<Mutex<Child>>>) {
        *self.rust.lock().unwrap() = child;
    }
}
