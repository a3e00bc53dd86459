//! Work spread over a number of threads, handed out in order one item at a time (images differ in
//! cost), with the results returned in item order. Each thread keeps a state of its own (reused
//! buffers, partial sums), returned at the end.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Runs `f(state, i)` for every `i` in `0..n` on up to `threads` threads; returns the results in
/// order of `i`, and the threads' states.
pub fn over_indices<S: Default + Send, T: Send>(
    n: usize,
    threads: usize,
    f: impl Fn(&mut S, usize) -> T + Sync,
) -> (Vec<T>, Vec<S>) {
    let next = AtomicUsize::new(0);
    run(n, threads, |state, out| {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                break;
            }
            out.push((i, f(state, i)));
        }
    })
}

/// Runs `f(state, i, chunk)` for the `len`-long chunks of `buf` (chunk `i` at `i·len`) on up to
/// `threads` threads; returns the results in chunk order, and the threads' states.
pub fn over_chunks<S: Default + Send, T: Send>(
    buf: &mut [u8],
    len: usize,
    threads: usize,
    f: impl Fn(&mut S, usize, &mut [u8]) -> T + Sync,
) -> (Vec<T>, Vec<S>) {
    assert!(len > 0, "chunks of no length");
    let n = buf.len() / len;
    let jobs = Mutex::new(buf.chunks_exact_mut(len).enumerate());
    run(n, threads, |state, out| {
        loop {
            let job = jobs.lock().unwrap_or_else(|e| e.into_inner()).next();
            let Some((i, chunk)) = job else { break };
            out.push((i, f(state, i, chunk)));
        }
    })
}

/// Runs `work` on up to `threads` threads (here when one), each with a fresh state and a list
/// of `(index, result)`; merges the lists in index order.
fn run<S: Default + Send, T: Send>(
    n: usize,
    threads: usize,
    work: impl Fn(&mut S, &mut Vec<(usize, T)>) + Sync,
) -> (Vec<T>, Vec<S>) {
    let threads = threads.clamp(1, n.max(1));
    let parts: Vec<(Vec<(usize, T)>, S)> = if threads == 1 {
        let mut state = S::default();
        let mut out = Vec::with_capacity(n);
        work(&mut state, &mut out);
        vec![(out, state)]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let mut state = S::default();
                        let mut out = Vec::new();
                        work(&mut state, &mut out);
                        (out, state)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        })
    };
    let mut results: Vec<(usize, T)> = Vec::with_capacity(n);
    let mut states = Vec::with_capacity(parts.len());
    for (out, state) in parts {
        results.extend(out);
        states.push(state);
    }
    results.sort_by_key(|(i, _)| *i);
    (results.into_iter().map(|(_, t)| t).collect(), states)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_in_order_with_any_number_of_threads() {
        for threads in [0, 1, 3, 64] {
            let (out, states) = over_indices(50, threads, |count: &mut usize, i| {
                *count += 1;
                i * i
            });
            assert_eq!(out, (0..50).map(|i| i * i).collect::<Vec<_>>());
            assert_eq!(states.iter().sum::<usize>(), 50);
            assert!(states.len() <= threads.max(1));
        }
        let (none, _) = over_indices(0, 4, |_: &mut (), i| i);
        assert!(none.is_empty());
    }

    #[test]
    fn chunks_are_each_written_once() {
        let mut buf = vec![0u8; 30];
        let (out, _) = over_chunks(&mut buf, 3, 4, |_: &mut (), i, chunk| {
            chunk.fill(i as u8 + 1);
            i
        });
        assert_eq!(out, (0..10).collect::<Vec<_>>());
        let want: Vec<u8> = (0..30).map(|j| (j / 3) as u8 + 1).collect();
        assert_eq!(buf, want);
    }
}
