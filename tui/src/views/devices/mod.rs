//! The Devices view's state: the latest telemetry sample and the history its sparklines draw
//! (one sample a second, from the runtime's sampler). [`draw`] draws it.

pub mod draw;

use ddp_workspaces::engine::devices::telemetry::{Telemetry, TelemetryHistory};

/// Telemetry samples kept for the devices sparklines (one a second).
pub const DEVICE_HISTORY: usize = 120;

#[derive(Debug)]
pub struct DevicesState {
    /// The latest sample; `None` until the first arrives.
    pub telemetry: Option<Telemetry>,
    pub history: TelemetryHistory,
}

impl Default for DevicesState {
    fn default() -> Self {
        DevicesState {
            telemetry: None,
            history: TelemetryHistory::new(DEVICE_HISTORY),
        }
    }
}

impl DevicesState {
    /// A new sample: the one shown, and the next point of every history.
    pub fn apply(&mut self, t: Telemetry) {
        self.history.push(&t);
        self.telemetry = Some(t);
    }
}
