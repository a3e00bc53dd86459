//! Batches of an epoch, filled in order: on the training thread for data sets that are cheap to
//! read, or ahead of the step on worker threads (at most `depth` batches ahead) for costly ones
//! (decoding images, reading mapped files): PyTorch's `DataLoader(num_workers, prefetch_factor)`.
//!
//! The batches come out in the order of the epoch's indices whatever order the workers finish
//! in, so a run is the same with any number of workers.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::Batch;
use super::dataset::{SharedDataset, fill_checked};
use crate::{Error, Result};

/// How many worker threads fill a replica's batches when `data.workers` is not set: the cores
/// that the replicas' compute threads leave free, and at least one (a decoding thread that shares
/// a core still overlaps reading with the other thread's compute).
pub fn default_workers(cores: usize, local_replicas: usize, threads_per_replica: usize) -> usize {
    let busy = local_replicas.max(1) * threads_per_replica.max(1);
    (cores.saturating_sub(busy) / local_replicas.max(1)).max(1)
}

/// The batches of one pass over `indices`, `batch_size` at a time (the last may be smaller).
pub struct Loader {
    ds: SharedDataset,
    indices: Arc<Vec<usize>>,
    batch_size: usize,
    /// Batches handed out so far.
    taken: usize,
    workers: Option<Workers>,
}

/// The worker threads and what they share with the training thread.
struct Workers {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    /// The next batch a worker takes on.
    next_job: AtomicUsize,
    depth: usize,
}

#[derive(Default)]
struct State {
    /// Filled batches (or their errors) not yet handed out, by position.
    ready: BTreeMap<usize, Result<Batch>>,
    /// Batches handed out: a worker fills batch `k` only while `k < taken + depth`.
    taken: usize,
    /// Emptied buffers to fill again.
    free: Vec<Batch>,
    cancelled: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Loader {
    /// The batches of `indices` from `ds`: filled by `workers` threads at most `depth` batches
    /// ahead when `ds` is costly and `workers > 0`, else on the calling thread when asked for.
    pub fn new(
        ds: SharedDataset,
        indices: Vec<usize>,
        batch_size: usize,
        workers: usize,
        depth: usize,
    ) -> Loader {
        let indices = Arc::new(indices);
        let batch_size = batch_size.max(1);
        let n = indices.len().div_ceil(batch_size);
        let workers = (ds.costly() && workers > 0 && n > 0).then(|| {
            let shared = Arc::new(Shared {
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
                next_job: AtomicUsize::new(0),
                depth: depth.max(1),
            });
            let handles = (0..workers.min(n))
                .map(|w| {
                    let (ds, indices, shared) = (ds.clone(), indices.clone(), shared.clone());
                    std::thread::Builder::new()
                        .name(format!("data-worker-{w}"))
                        .spawn(move || work(&*ds, &indices, batch_size, &shared))
                        .expect("spawning a data worker thread")
                })
                .collect();
            Workers { shared, handles }
        });
        Loader {
            ds,
            indices,
            batch_size,
            taken: 0,
            workers,
        }
    }

    /// The number of batches in the pass.
    pub fn batches(&self) -> usize {
        self.indices.len().div_ceil(self.batch_size)
    }

    /// The sample indices of batch `k`.
    fn batch_indices(&self, k: usize) -> &[usize] {
        let start = k * self.batch_size;
        &self.indices[start..(start + self.batch_size).min(self.indices.len())]
    }

    /// Puts the next batch into `out` (its old buffers are reused by the workers). Returns
    /// `Ok(false)` after the last batch.
    pub fn next_into(&mut self, out: &mut Batch) -> Result<bool> {
        let k = self.taken;
        if k >= self.batches() {
            return Ok(false);
        }
        self.taken += 1;
        let Some(w) = &self.workers else {
            fill_checked(&*self.ds, self.batch_indices(k), out)?;
            return Ok(true);
        };
        let mut state = w.shared.lock();
        let filled = loop {
            if let Some(b) = state.ready.remove(&k) {
                break b;
            }
            state = w
                .shared
                .changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        };
        state.taken = k + 1;
        let mut filled = filled?;
        std::mem::swap(out, &mut filled);
        state.free.push(filled);
        drop(state);
        w.shared.changed.notify_all();
        Ok(true)
    }
}

/// A worker: takes the next batch position, waits until it is within `depth` of the training
/// thread, fills it, and hands it over; until the pass ends or the loader is dropped.
fn work(ds: &dyn super::Dataset, indices: &[usize], batch_size: usize, shared: &Shared) {
    let n = indices.len().div_ceil(batch_size);
    loop {
        let k = shared.next_job.fetch_add(1, Ordering::Relaxed);
        if k >= n {
            return;
        }
        let mut batch = {
            let mut state = shared.lock();
            while !state.cancelled && k >= state.taken + shared.depth {
                state = shared
                    .changed
                    .wait(state)
                    .unwrap_or_else(|p| p.into_inner());
            }
            if state.cancelled {
                return;
            }
            state.free.pop().unwrap_or_default()
        };
        let idx = &indices[k * batch_size..((k + 1) * batch_size).min(indices.len())];
        // A panic in a user's data set becomes this batch's error instead of a training thread
        // waiting for a batch that never comes.
        let filled = catch_unwind(AssertUnwindSafe(|| fill_checked(ds, idx, &mut batch)))
            .unwrap_or_else(|p| {
                let what = p
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| p.downcast_ref::<&str>().copied())
                    .unwrap_or("a panic");
                Err(Error::Model(format!(
                    "{}: filling a batch panicked: {what}",
                    ds.describe()
                )))
            });
        shared.lock().ready.insert(k, filled.map(|()| batch));
        shared.changed.notify_all();
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        if let Some(w) = self.workers.take() {
            w.shared.lock().cancelled = true;
            w.shared.changed.notify_all();
            for h in w.handles {
                let _ = h.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{Dataset, TargetKind};
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// Sample i is [i] with class i % 3; filling sleeps a little, out of order across threads.
    struct Slow {
        n: usize,
        filled: AtomicUsize,
        panic_at: Option<usize>,
    }

    impl Dataset for Slow {
        fn len(&self) -> usize {
            self.n
        }
        fn shape(&self) -> [usize; 3] {
            [1, 1, 1]
        }
        fn target(&self) -> TargetKind {
            TargetKind::Classes(3)
        }
        fn fill(&self, indices: &[usize], b: &mut Batch) -> Result<()> {
            if Some(indices[0]) == self.panic_at {
                panic!("sample {} is cursed", indices[0]);
            }
            std::thread::sleep(Duration::from_millis((7 * indices[0] % 5) as u64));
            self.filled.fetch_add(1, Ordering::SeqCst);
            for &i in indices {
                b.x.push(i as f32);
                b.classes.push((i % 3) as u32);
            }
            Ok(())
        }
        fn costly(&self) -> bool {
            true
        }
    }

    fn slow(n: usize, panic_at: Option<usize>) -> Arc<Slow> {
        Arc::new(Slow {
            n,
            filled: AtomicUsize::new(0),
            panic_at,
        })
    }

    fn drain(loader: &mut Loader) -> Vec<Vec<f32>> {
        let mut out = Batch::new();
        let mut got = Vec::new();
        while loader.next_into(&mut out).unwrap() {
            got.push(out.x.clone());
        }
        got
    }

    #[test]
    fn batches_come_in_order_with_any_number_of_workers() {
        let indices: Vec<usize> = (0..23).rev().collect();
        let want: Vec<Vec<f32>> = indices
            .chunks(4)
            .map(|c| c.iter().map(|&i| i as f32).collect())
            .collect();
        for workers in [0, 1, 3, 8] {
            let mut l = Loader::new(slow(23, None), indices.clone(), 4, workers, 2);
            assert_eq!(l.batches(), 6);
            assert_eq!(drain(&mut l), want, "{workers} workers");
        }
    }

    #[test]
    fn workers_stay_within_depth_and_stop_when_dropped() {
        let ds = slow(100, None);
        let mut l = Loader::new(ds.clone(), (0..100).collect(), 1, 3, 4);
        let mut b = Batch::new();
        assert!(l.next_into(&mut b).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        // One taken, at most 4 ahead of it.
        assert!(ds.filled.load(Ordering::SeqCst) <= 5);
        drop(l);
        let after = ds.filled.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(ds.filled.load(Ordering::SeqCst), after);
    }

    #[test]
    fn a_panicking_fill_is_an_error_of_its_batch() {
        let mut l = Loader::new(slow(10, Some(6)), (0..10).collect(), 2, 2, 2);
        let mut b = Batch::new();
        for _ in 0..3 {
            assert!(l.next_into(&mut b).unwrap());
        }
        let e = l.next_into(&mut b).unwrap_err().to_string();
        assert!(
            e.contains("filling a batch panicked: sample 6 is cursed"),
            "{e}"
        );
    }

    #[test]
    fn spare_cores_become_workers() {
        assert_eq!(default_workers(2, 2, 1), 1);
        assert_eq!(default_workers(16, 2, 4), 4);
        assert_eq!(default_workers(8, 1, 8), 1);
        assert_eq!(default_workers(0, 0, 0), 1);
    }
}
