//! Where a window's steps spent their time ([`StepBreakdown`]): the training loop times each
//! micro-batch's data wait, forward/backward and hand-over, and each step's reduction and
//! optimizer; the clock adds them up until the window's record takes their means.

use std::time::Duration;

use crate::metrics::StepBreakdown;
use crate::step::StepCost;

/// The sums of a window's timed steps.
#[derive(Debug, Default)]
pub(super) struct StepClock {
    steps: u32,
    step: Duration,
    data: Duration,
    compute: Duration,
    exposed: Duration,
    optimizer: Duration,
    comm: Duration,
    bytes: Option<u64>,
}

impl StepClock {
    /// One micro-batch: waiting for its data, its forward and backward, and (the last of an
    /// overlapped step) the wait for the buckets after backward.
    pub(super) fn micro(&mut self, data: Duration, compute: Duration, finish: Duration) {
        self.data += data;
        self.compute += compute;
        self.exposed += finish;
    }

    /// The step's end: `sync` is the time of the reduction and optimizer after the
    /// micro-batches (`cost` says how much of it was the optimizer, and what the communication
    /// cost), `wall` the whole step's.
    pub(super) fn step(&mut self, sync: Duration, cost: &StepCost, wall: Duration) {
        let optimizer = cost.optimizer.min(sync);
        self.optimizer += optimizer;
        let exposed = sync - optimizer;
        self.exposed += exposed;
        self.comm += cost.comm_busy.unwrap_or(exposed);
        if let Some(b) = cost.bytes_sent {
            *self.bytes.get_or_insert(0) += b;
        }
        self.step += wall;
        self.steps += 1;
    }

    /// The means per step since the last take (`None` if no step was timed); restarts.
    pub(super) fn take(&mut self) -> Option<StepBreakdown> {
        let clock = std::mem::take(self);
        if clock.steps == 0 {
            return None;
        }
        let per = |d: Duration| d.as_secs_f64() / clock.steps as f64;
        Some(StepBreakdown {
            step_s: per(clock.step),
            compute_s: per(clock.compute),
            comm_exposed_s: per(clock.exposed),
            data_s: per(clock.data),
            optimizer_s: per(clock.optimizer),
            comm_s: per(clock.comm),
            bytes_sent: clock.bytes.map(|b| b as f64 / clock.steps as f64),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn means_per_step_and_the_optimizer_taken_out_of_the_sync() {
        let mut c = StepClock::default();
        let cost = StepCost {
            optimizer: 3 * MS,
            comm_busy: Some(20 * MS),
            bytes_sent: Some(1000),
        };
        for _ in 0..2 {
            c.micro(MS, 10 * MS, 2 * MS);
            c.micro(MS, 10 * MS, Duration::ZERO);
            c.step(5 * MS, &cost, 30 * MS);
        }
        let b = c.take().unwrap();
        let near = |x: f64, y: f64| assert!((x - y).abs() < 1e-9, "{x} vs {y}");
        near(b.step_s, 0.030);
        near(b.data_s, 0.002);
        near(b.compute_s, 0.020);
        near(b.comm_exposed_s, 0.004);
        near(b.optimizer_s, 0.003);
        near(b.comm_s, 0.020);
        assert_eq!(b.bytes_sent, Some(1000.0));
        near(b.parts_s(), 0.029);
        assert_eq!(b.bound(), "compute");
        assert_eq!(c.take(), None);
    }

    #[test]
    fn without_a_communication_thread_the_exposed_time_is_all_of_it() {
        let mut c = StepClock::default();
        let cost = StepCost {
            optimizer: 2 * MS,
            comm_busy: None,
            bytes_sent: None,
        };
        c.micro(Duration::ZERO, MS, Duration::ZERO);
        c.step(50 * MS, &cost, 51 * MS);
        let b = c.take().unwrap();
        assert!((b.comm_s - 0.048).abs() < 1e-9);
        assert_eq!(b.bytes_sent, None);
        assert_eq!(b.bound(), "communication");
    }
}
