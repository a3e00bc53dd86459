//! What lock-step costs on this machine, with no trainer code and no communication: two threads,
//! one pinned to each of two cores, run the same steps either meeting at a barrier after every
//! step (as the replicas of a world-2 job do) or each at its own pace (as the two runs of 1+1).
//! Two kinds of step: arithmetic on a few registers' worth of data only, and the same arithmetic
//! followed by a pass over a buffer of the thread's own that does not fit its core's caches (the
//! memory-bound phases of a training step). Free-running throughput is counted as the bench counts
//! 1+1: both threads' steps over the slower thread's time.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Steps per run.
pub const STEPS: usize = 200;
/// The arithmetic of one step takes about this long on one core (calibrated at start).
const ARITHMETIC: Duration = Duration::from_millis(8);
/// Floats of each thread's buffer (8 MiB) and passes over it per step.
const BUFFER_FLOATS: usize = 2 << 20;
const PASSES: usize = 8;
/// Longest wait at a barrier before the run is abandoned.
const BARRIER_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    Arithmetic,
    ArithmeticAndMemory,
}

impl Work {
    pub const ALL: [Work; 2] = [Work::Arithmetic, Work::ArithmeticAndMemory];

    pub fn name(self) -> &'static str {
        match self {
            Work::Arithmetic => "arithmetic",
            Work::ArithmeticAndMemory => "arithmetic+memory",
        }
    }

    pub fn describe(self) -> String {
        match self {
            Work::Arithmetic => format!("arithmetic only (~{} ms)", ARITHMETIC.as_millis()),
            Work::ArithmeticAndMemory => format!(
                "arithmetic + {PASSES} passes over {} MiB",
                (BUFFER_FLOATS * 4) >> 20
            ),
        }
    }
}

/// One round of one kind of work: steps/s both ways.
#[derive(Clone, Copy, Debug)]
pub struct LockstepFigure {
    pub work: Work,
    pub lockstep: f64,
    pub free: f64,
}

impl LockstepFigure {
    pub fn ratio(&self) -> f64 {
        self.lockstep / self.free
    }

    pub fn json_line(&self, round: u32) -> String {
        format!(
            "{{\"bench\": \"lockstep\", \"work\": \"{}\", \"steps\": {STEPS}, \
             \"lockstep_steps_per_s\": {:.2}, \"free_steps_per_s\": {:.2}, \"ratio\": {:.4}, \
             \"round\": {round}}}",
            self.work.name(),
            self.lockstep,
            self.free,
            self.ratio()
        )
    }
}

/// The units of arithmetic that take about [`ARITHMETIC`] on this core.
pub fn calibrate() -> usize {
    let start = Instant::now();
    let mut units = 0;
    while start.elapsed() < Duration::from_millis(50) {
        arithmetic(black_box(1000));
        units += 1000;
    }
    let per_unit = start.elapsed().as_secs_f64() / units as f64;
    ((ARITHMETIC.as_secs_f64() / per_unit) as usize).max(1)
}

/// One round: each kind of work locked then free, on cores 0 and 1.
pub fn bench_round(units: usize) -> Result<Vec<LockstepFigure>, String> {
    Work::ALL
        .iter()
        .map(|&work| {
            let lockstep = run(work, units, true)?;
            let free = run(work, units, false)?;
            Ok(LockstepFigure {
                work,
                lockstep,
                free,
            })
        })
        .collect()
}

/// Two threads × [`STEPS`] steps; steps/s of both over the slower thread's time.
fn run(work: Work, units: usize, locked: bool) -> Result<f64, String> {
    let arrived = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let times: Vec<Result<f64, String>> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..2)
            .map(|core| {
                let (arrived, failed) = (&arrived, &failed);
                s.spawn(move || {
                    let result = steps(work, units, locked.then_some(arrived), failed, core);
                    if result.is_err() {
                        failed.store(true, Ordering::Release);
                    }
                    result
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|_| Err("a thread panicked".into())))
            .collect()
    });
    let mut slowest = 0f64;
    for t in times {
        slowest = slowest.max(t?);
    }
    Ok(2.0 * STEPS as f64 / slowest)
}

/// One thread's run on `core`: its seconds for [`STEPS`] steps, meeting the other thread after
/// each one at `barrier` if given.
fn steps(
    work: Work,
    units: usize,
    barrier: Option<&AtomicUsize>,
    failed: &AtomicBool,
    core: usize,
) -> Result<f64, String> {
    pin_to(core)?;
    let (mut buffer, passes) = match work {
        Work::Arithmetic => (Vec::new(), 0),
        Work::ArithmeticAndMemory => (vec![1.0f32; BUFFER_FLOATS], PASSES),
    };
    let start = Instant::now();
    for step in 0..STEPS {
        arithmetic(units);
        for _ in 0..passes {
            buffer.iter_mut().for_each(|x| *x = *x * 0.999 + 1e-3);
        }
        black_box(&mut buffer);
        if let Some(arrived) = barrier {
            wait_for_both(arrived, 2 * (step + 1), failed, core)?;
        }
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Arithmetic on 64 floats (8 AVX registers), `units` rounds of a multiply-add each.
fn arithmetic(units: usize) {
    let mut x = [1.0f32; 64];
    for _ in 0..units {
        for v in x.iter_mut() {
            *v = *v * 0.999_999_9 + 1e-7;
        }
    }
    black_box(&x);
}

/// Spins until `target` arrivals in all (this thread's included), or the other thread failed.
fn wait_for_both(
    arrived: &AtomicUsize,
    target: usize,
    failed: &AtomicBool,
    core: usize,
) -> Result<(), String> {
    arrived.fetch_add(1, Ordering::AcqRel);
    let start = Instant::now();
    while arrived.load(Ordering::Acquire) < target {
        if failed.load(Ordering::Acquire) {
            return Err("lockstep: the other thread failed".into());
        }
        if start.elapsed() > BARRIER_TIMEOUT {
            return Err(format!(
                "lockstep: the thread on core {core} waited {} s for the other at a barrier",
                BARRIER_TIMEOUT.as_secs()
            ));
        }
        std::hint::spin_loop();
    }
    Ok(())
}

/// Runs the calling thread on `core` only.
fn pin_to(core: usize) -> Result<(), String> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it, and
    // sched_setaffinity reads it for the calling thread (pid 0).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        return Err(format!(
            "lockstep: cannot pin a thread to core {core}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_barrier_gives_up_when_the_other_thread_failed() {
        let (arrived, failed) = (AtomicUsize::new(0), AtomicBool::new(true));
        let err = wait_for_both(&arrived, 2, &failed, 1).unwrap_err();
        assert!(err.contains("the other thread failed"), "{err}");
        failed.store(false, Ordering::Release);
        arrived.store(1, Ordering::Release);
        wait_for_both(&arrived, 2, &failed, 0).unwrap();
    }

    #[test]
    fn the_json_line_carries_both_rates_and_their_ratio() {
        let f = LockstepFigure {
            work: Work::ArithmeticAndMemory,
            lockstep: 90.0,
            free: 100.0,
        };
        assert_eq!(
            f.json_line(2),
            "{\"bench\": \"lockstep\", \"work\": \"arithmetic+memory\", \"steps\": 200, \
             \"lockstep_steps_per_s\": 90.00, \"free_steps_per_s\": 100.00, \"ratio\": 0.9000, \
             \"round\": 2}"
        );
    }
}
