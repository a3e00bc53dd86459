//! The process group's collective as the step, SyncBatchNorm and evaluation share it, and the
//! communication thread that all-reduces gradient buckets while backward runs.
//!
//! Every rank must issue the same collectives in the same order. While the thread runs a
//! step's buckets ([`Worker`]), it is the only one that talks to the group: SyncBatchNorm's
//! reductions during that backward pass go through its queue ([`Route`]), behind the buckets
//! sent before them, so the order is the program's on every rank.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::dist::{Collective, ReduceOp};
use crate::models::StatsReducer;
use crate::step::hook::CommHook;
use crate::{Error, Result};

/// The process group's collective, shared by the DDP step and SyncBatchNorm.
pub type SharedCollective = Arc<Mutex<Box<dyn Collective>>>;

/// Runs `f` with the locked collective.
pub fn with_comm<T>(
    comm: &SharedCollective,
    f: impl FnOnce(&mut dyn Collective) -> Result<T>,
) -> Result<T> {
    let mut guard = comm
        .lock()
        .map_err(|_| Error::Model("collective lock poisoned by a panic".into()))?;
    f(guard.as_mut())
}

/// What the communication thread does, in the order it is asked.
pub(crate) enum Job {
    /// Averages bucket `bucket` with its `hook`, then hands both back ([`Done`]).
    Bucket {
        bucket: usize,
        /// How many buckets the step has.
        of: usize,
        buf: Vec<f32>,
        hook: Box<dyn CommHook>,
    },
    /// SyncBatchNorm's sum, answered on `reply`.
    Sum {
        buf: Vec<f32>,
        reply: Sender<Result<Vec<f32>>>,
    },
}

/// A bucket back from the communication thread.
pub(crate) struct Done {
    pub bucket: usize,
    pub buf: Vec<f32>,
    /// The bytes this rank sent for it.
    pub result: Result<u64>,
    pub hook: Box<dyn CommHook>,
    /// Time the thread spent in the bucket's all-reduce.
    pub busy: Duration,
}

/// The communication thread's queue while a session of buckets is open: SyncBatchNorm's sums
/// go there instead of to the collective directly.
#[derive(Default)]
pub struct Route(Mutex<Option<Sender<Job>>>);

impl Route {
    pub fn new() -> Arc<Route> {
        Arc::new(Route::default())
    }

    pub(crate) fn open(&self, tx: Sender<Job>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
    }

    pub(crate) fn close(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn sender(&self) -> Option<Sender<Job>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// SyncBatchNorm's reducer over the shared collective, through the communication thread while
/// it runs a step's buckets.
pub struct CollectiveStats {
    comm: SharedCollective,
    route: Arc<Route>,
}

impl CollectiveStats {
    pub fn new(comm: SharedCollective, route: Arc<Route>) -> CollectiveStats {
        CollectiveStats { comm, route }
    }
}

impl StatsReducer for CollectiveStats {
    fn all_reduce_sum(&self, buf: &mut [f32]) -> candle_core::Result<()> {
        let msg = |e: Error| candle_core::Error::Msg(e.to_string());
        let Some(tx) = self.route.sender() else {
            return with_comm(&self.comm, |c| c.all_reduce(buf, ReduceOp::Sum)).map_err(msg);
        };
        let (reply, answer) = mpsc::channel();
        let gone = || {
            candle_core::Error::Msg(
                "the communication thread ended before a SyncBatchNorm sum".into(),
            )
        };
        tx.send(Job::Sum {
            buf: buf.to_vec(),
            reply,
        })
        .map_err(|_| gone())?;
        let summed = answer.recv().map_err(|_| gone())?.map_err(msg)?;
        buf.copy_from_slice(&summed);
        Ok(())
    }
}

/// The communication thread: runs [`Job`]s one after another on the shared collective. After
/// a failed all-reduce it runs no more (the group is broken): each later job gets the error.
pub(crate) struct Worker {
    tx: Option<Sender<Job>>,
    done: Receiver<Done>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    pub(crate) fn start(comm: SharedCollective) -> Result<Worker> {
        let (tx, jobs) = mpsc::channel::<Job>();
        let (finished, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("ddp-comm".into())
            .spawn(move || run(&comm, jobs, finished))
            .map_err(|e| Error::Model(format!("cannot start the communication thread: {e}")))?;
        Ok(Worker {
            tx: Some(tx),
            done,
            thread: Some(thread),
        })
    }

    /// The queue, for [`Route::open`] and the session's buckets.
    pub(crate) fn sender(&self) -> Sender<Job> {
        self.tx
            .clone()
            .expect("the worker's queue lives as long as it")
    }

    /// The next bucket back. The all-reduce itself is bounded by the group's timeout; this
    /// only fails if the thread is gone.
    pub(crate) fn next_done(&self) -> Result<Done> {
        self.done.recv().map_err(|_| {
            Error::Model("the communication thread ended (it panicked; see above)".into())
        })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(comm: &SharedCollective, jobs: Receiver<Job>, finished: Sender<Done>) {
    let mut broken: Option<String> = None;
    for job in jobs {
        match job {
            Job::Bucket {
                bucket,
                of,
                mut buf,
                mut hook,
            } => {
                let t0 = Instant::now();
                let result = match &broken {
                    Some(why) => Err(earlier(why)),
                    None => with_comm(comm, |c| {
                        c.label_bucket(bucket, of);
                        hook.reduce(&mut buf, c)
                    }),
                };
                if let Err(e) = &result {
                    broken.get_or_insert_with(|| e.to_string());
                }
                let busy = t0.elapsed();
                let _ = finished.send(Done {
                    bucket,
                    buf,
                    result,
                    hook,
                    busy,
                });
            }
            Job::Sum { mut buf, reply } => {
                let result = match &broken {
                    Some(why) => Err(earlier(why)),
                    None => with_comm(comm, |c| c.all_reduce(&mut buf, ReduceOp::Sum)),
                };
                if let Err(e) = &result {
                    broken.get_or_insert_with(|| e.to_string());
                }
                let _ = reply.send(result.map(|()| buf));
            }
        }
    }
}

fn earlier(why: &str) -> Error {
    Error::Model(format!(
        "not run: an earlier collective of this step failed: {why}"
    ))
}
