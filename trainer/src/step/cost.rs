//! What a step's reduction and optimizer cost, as the engine reports it after each step.

use std::time::Duration;

/// The cost of the last step's reduction and optimizer ([`crate::step::engine::Engine::cost`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepCost {
    /// The optimizer and the parameters' write-back.
    pub optimizer: Duration,
    /// Time the communication thread spent reducing, hidden behind backward or not; `None`
    /// where there is no such thread (all communication is in the step's own time).
    pub comm_busy: Option<Duration>,
    /// Bytes this rank sent to the others; `None` where they share memory (or it has none).
    pub bytes_sent: Option<u64>,
}
