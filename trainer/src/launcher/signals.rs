//! SIGINT/SIGTERM/SIGUSR2 on the launcher: handlers that ask the supervisor to stop the replicas.

use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

use super::exit::signal_name;
use crate::error::{Error, Result};

/// The signal that interrupted the launcher, 0 while none did.
pub(super) static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

/// The installed handlers: put in place by the first of concurrent [`launch`](super::launch)es, restored by the
/// last.
static HANDLERS: Mutex<Option<Installed>> = Mutex::new(None);

struct Installed {
    /// Launches running now.
    count: usize,
    /// The dispositions the handlers replaced.
    replaced: Vec<(i32, libc::sigaction)>,
}

extern "C" fn on_signal(signal: libc::c_int) {
    INTERRUPTED.store(signal, Ordering::SeqCst);
}

/// SIGINT/SIGTERM/SIGUSR2 handlers for the duration of a launch. A signal the launcher was
/// started with ignored (`nohup`, a background job) stays ignored.
pub(super) struct SignalHandlers;

impl SignalHandlers {
    pub(super) fn install() -> Result<SignalHandlers> {
        let mut state = HANDLERS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(installed) = state.as_mut() {
            installed.count += 1;
            return Ok(SignalHandlers);
        }
        INTERRUPTED.store(0, Ordering::SeqCst);
        let mut replaced = Vec::new();
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGUSR2] {
            // SAFETY: sigaction with valid pointers; the handler only stores to an atomic.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(signal, std::ptr::null(), &mut old) == 0
                    && old.sa_sigaction == libc::SIG_IGN
                {
                    continue;
                }
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                if libc::sigaction(signal, &action, &mut old) != 0 {
                    let e = io::Error::last_os_error();
                    restore(&replaced);
                    return Err(Error::Launch(format!(
                        "cannot handle {}: {e}",
                        signal_name(signal)
                    )));
                }
                replaced.push((signal, old));
            }
        }
        *state = Some(Installed { count: 1, replaced });
        Ok(SignalHandlers)
    }
}

impl Drop for SignalHandlers {
    fn drop(&mut self) {
        let mut state = HANDLERS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(installed) = state.as_mut() {
            installed.count -= 1;
            if installed.count == 0 {
                restore(&installed.replaced);
                *state = None;
            }
        }
    }
}

fn restore(replaced: &[(i32, libc::sigaction)]) {
    for (signal, old) in replaced {
        // SAFETY: `old` came from sigaction itself.
        unsafe { libc::sigaction(*signal, old, std::ptr::null_mut()) };
    }
}
