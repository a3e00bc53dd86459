//! Each rank's ledger of its collectives, published to the store, so that a collective that
//! times out or loses a peer names the rank that is behind and where.
//!
//! Every collective of a [`super::group::ProcessGroup`] is [entered](Ledger::enter) with its
//! sequence number (the same on every rank: they issue the same collectives in the same order),
//! its op, its bucket and its size, and [completed](Ledger::complete) when it returns. A
//! publisher thread posts the rank's [`Mark`] (the collective it is in, the last it completed)
//! under `ledger/<rank>` whenever it changes (coalescing while a post is in flight, so that the
//! step never waits on the store) and every [`BEAT`] as a heartbeat. When a collective fails,
//! the failing rank reads every rank's mark twice, [`BEAT`]s apart, and [`explain`] says who has
//! not entered the collective, who waits there, what the missing rank last completed, and whose
//! heartbeat stood still. A stopped process publishes nothing more, so its last mark is where
//! it stopped.
//!
//! Layout: this file, the book and its publisher; `explain`, the message from the marks (pure).

mod explain;

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::store::StoreClient;

pub use explain::{Cause, explain};

/// A collective operation, as the ledger names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    AllReduce,
    ReduceScatter,
    AllGather,
    Broadcast,
    GatherBytes,
    Barrier,
    StepBuffers,
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Op::AllReduce => "all-reduce",
            Op::ReduceScatter => "reduce-scatter",
            Op::AllGather => "all-gather",
            Op::Broadcast => "broadcast",
            Op::GatherBytes => "metadata exchange",
            Op::Barrier => "barrier",
            Op::StepBuffers => "shared buffer set-up",
        })
    }
}

/// One collective in the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// 1 for the group's first collective.
    pub seq: u64,
    pub op: Op,
    /// `(index, count)` of the gradient bucket it carries, counting from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<(usize, usize)>,
    /// The bytes of the buffer it reduces or gathers on this rank.
    pub bytes: u64,
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} #{}", self.op, self.seq)?;
        if let Some((i, n)) = self.bucket {
            write!(f, " (bucket {} of {n})", i + 1)?;
        }
        Ok(())
    }
}

/// What a rank publishes: the collective it is in, the last one it completed, and a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Mark {
    /// Counts the publisher's posts: it stays put while the process is stopped or gone.
    #[serde(default)]
    pub beat: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<Entry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_done: Option<Entry>,
}

impl Mark {
    /// Whether this rank has entered (or completed) collective `seq`.
    pub fn entered(&self, seq: u64) -> bool {
        self.current.as_ref().is_some_and(|c| c.seq >= seq)
            || self.last_done.as_ref().is_some_and(|d| d.seq >= seq)
    }
}

/// The store key of `rank`'s mark.
pub fn key(rank: usize) -> String {
    format!("ledger/{rank}")
}

/// How many completed collectives the ledger keeps (for messages and tests).
const KEPT: usize = 16;

/// How often a rank's mark is posted when nothing changes.
pub const BEAT: Duration = Duration::from_millis(400);

#[derive(Default)]
struct Book {
    next_seq: u64,
    /// The bucket the next collective carries.
    label: Option<(usize, usize)>,
    current: Option<(Entry, Instant)>,
    recent: VecDeque<Entry>,
    /// Bumped on every change; the publisher posts when it differs from what it posted.
    version: u64,
    beat: u64,
    closed: bool,
}

struct Inner {
    book: Mutex<Book>,
    changed: Condvar,
}

/// One rank's ledger (cheap to clone: the clones share it).
#[derive(Clone)]
pub struct Ledger {
    inner: Arc<Inner>,
}

impl Default for Ledger {
    fn default() -> Self {
        Self::new()
    }
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger {
            inner: Arc::new(Inner {
                book: Mutex::new(Book::default()),
                changed: Condvar::new(),
            }),
        }
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        self.inner.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next collective carries gradient bucket `index` of `count`.
    pub fn label_bucket(&self, index: usize, count: usize) {
        self.book().label = Some((index, count));
    }

    /// A collective starts: returns its sequence number.
    pub fn enter(&self, op: Op, bytes: usize) -> u64 {
        let mut b = self.book();
        b.next_seq += 1;
        let entry = Entry {
            seq: b.next_seq,
            op,
            bucket: b.label.take(),
            bytes: bytes as u64,
        };
        b.current = Some((entry, Instant::now()));
        b.version += 1;
        let seq = b.next_seq;
        drop(b);
        self.inner.changed.notify_all();
        seq
    }

    /// Collective `seq` returned.
    pub fn complete(&self, seq: u64) {
        let mut b = self.book();
        if let Some((entry, _)) = b.current.take_if(|(e, _)| e.seq == seq) {
            if b.recent.len() == KEPT {
                b.recent.pop_front();
            }
            b.recent.push_back(entry);
            b.version += 1;
            drop(b);
            self.inner.changed.notify_all();
        }
    }

    /// This rank's mark now.
    pub fn mark(&self) -> Mark {
        let b = self.book();
        Mark {
            beat: b.beat,
            current: b.current.as_ref().map(|(e, _)| e.clone()),
            last_done: b.recent.back().cloned(),
        }
    }

    /// How long the current collective has run.
    pub fn waited(&self) -> Duration {
        self.book()
            .current
            .as_ref()
            .map_or(Duration::ZERO, |(_, t)| t.elapsed())
    }

    /// The last completed collectives, oldest first (at most 16).
    pub fn recent(&self) -> Vec<Entry> {
        self.book().recent.iter().cloned().collect()
    }

    /// Starts the thread that posts this rank's mark to `store` under [`key`]`(rank)`
    /// whenever it changes. It ends when the returned [`Publisher`] is dropped, or quietly at
    /// the store's first error (the ranks' messages then say what they know themselves).
    pub fn publish(&self, rank: usize, store: Arc<Mutex<StoreClient>>) -> Publisher {
        let ledger = self.clone();
        let thread = std::thread::Builder::new()
            .name(format!("ddp-ledger-{rank}"))
            .spawn(move || ledger.post_changes(rank, &store))
            .ok();
        Publisher {
            ledger: self.clone(),
            thread,
        }
    }

    fn post_changes(&self, rank: usize, store: &Mutex<StoreClient>) {
        let key = key(rank);
        let mut posted = u64::MAX;
        loop {
            let mark = {
                let mut b = self.book();
                let due = Instant::now() + BEAT;
                while b.version == posted && !b.closed {
                    let now = Instant::now();
                    if now >= due {
                        break;
                    }
                    b = (self.inner.changed)
                        .wait_timeout(b, due - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                if b.closed {
                    return;
                }
                posted = b.version;
                b.beat += 1;
                drop(b);
                self.mark()
            };
            let Ok(bytes) = serde_json::to_vec(&mark) else {
                return;
            };
            let mut client = store.lock().unwrap_or_else(|p| p.into_inner());
            if client.set(&key, &bytes).is_err() {
                return;
            }
        }
    }

    /// Every rank's mark as published, and the ranks whose heartbeat stood still over two
    /// [`BEAT`]s: `None` for a rank that published nothing or when the store is gone; this
    /// rank's own mark as it is now.
    pub fn survey(
        &self,
        rank: usize,
        world_size: usize,
        store: &Mutex<StoreClient>,
    ) -> (Vec<Option<Mark>>, Vec<usize>) {
        let first = self.read_marks(rank, world_size, store);
        if first
            .iter()
            .enumerate()
            .all(|(r, m)| r == rank || m.is_none())
        {
            return (first, Vec::new());
        }
        std::thread::sleep(BEAT * 2 + BEAT / 2);
        let second = self.read_marks(rank, world_size, store);
        let still = (0..world_size)
            .filter(|&r| r != rank)
            .filter(|&r| match (&first[r], &second[r]) {
                (Some(a), Some(b)) => a.beat == b.beat,
                _ => false,
            })
            .collect();
        let marks = second
            .into_iter()
            .zip(first)
            .map(|(b, a)| b.or(a))
            .collect();
        (marks, still)
    }

    fn read_marks(
        &self,
        rank: usize,
        world_size: usize,
        store: &Mutex<StoreClient>,
    ) -> Vec<Option<Mark>> {
        let mut client = store.lock().unwrap_or_else(|p| p.into_inner());
        let mut reachable = true;
        (0..world_size)
            .map(|r| {
                if r == rank {
                    return Some(self.mark());
                }
                if !reachable {
                    return None;
                }
                match client.try_get(&key(r)) {
                    Ok(bytes) => bytes.and_then(|b| serde_json::from_slice(&b).ok()),
                    Err(_) => {
                        // The store itself is gone: it will not answer for the next rank.
                        reachable = false;
                        None
                    }
                }
            })
            .collect()
    }
}

/// The publisher thread of a [`Ledger`]; stops it on drop.
pub struct Publisher {
    ledger: Ledger,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.ledger.book().closed = true;
        self.ledger.inner.changed.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_carry_sequence_numbers_buckets_and_sizes() {
        let l = Ledger::new();
        let a = l.enter(Op::Barrier, 0);
        l.complete(a);
        l.label_bucket(2, 12);
        let b = l.enter(Op::AllReduce, 4096);
        assert_eq!((a, b), (1, 2));
        let m = l.mark();
        let cur = m.current.clone().unwrap();
        assert_eq!(cur.to_string(), "all-reduce #2 (bucket 3 of 12)");
        assert_eq!(cur.bytes, 4096);
        assert_eq!(m.last_done.unwrap().to_string(), "barrier #1");
        l.complete(b);
        let m = l.mark();
        assert!(m.current.is_none() && m.entered(2) && !m.entered(3));
        // The label was for one collective only.
        let c = l.enter(Op::AllReduce, 8);
        assert_eq!(l.mark().current.unwrap().bucket, None);
        l.complete(c);
        assert_eq!(l.recent().len(), 3);
    }

    #[test]
    fn the_ledger_keeps_the_last_sixteen() {
        let l = Ledger::new();
        for _ in 0..40 {
            let s = l.enter(Op::Broadcast, 4);
            l.complete(s);
        }
        let r = l.recent();
        assert_eq!(r.len(), KEPT);
        assert_eq!((r[0].seq, r[KEPT - 1].seq), (25, 40));
    }

    #[test]
    fn marks_round_trip_through_json() {
        let l = Ledger::new();
        l.label_bucket(0, 3);
        l.enter(Op::AllReduce, 100);
        let m = l.mark();
        let back: Mark = serde_json::from_slice(&serde_json::to_vec(&m).unwrap()).unwrap();
        assert_eq!(back, m);
    }
}
