//! All-reduce through shared memory between the ranks of one host.
//!
//! When every rank of a group runs on the same machine, the `tcp` backend all-reduces through a
//! segment of `/dev/shm` that all ranks map, instead of pushing every byte twice through the
//! kernel's loopback. Other collectives (broadcast, gathers, barrier) stay on the TCP ring, which
//! also tells when a neighbour dies.
//!
//! Layout of the segment: a header page (the arrival counter the ranks wait on with a futex, an
//! abort word, and per rank the number of its last barrier and the length of its current op),
//! then per rank two staging slots of [`SLOT_FLOATS`] floats.
//!
//! One all-reduce processes the buffer in chunks of at most one slot. Per chunk each rank copies
//! its chunk into its slot, waits at a barrier, sums its own part (1/W of the chunk, ranks added
//! in rank order, so every rank ends with the same bits) from all slots, waits again, then copies
//! the other ranks' parts out of their slots. Consecutive chunks alternate between the two slots,
//! so a rank can fill the next chunk while slower ranks still read the previous one.
//!
//! Every wait is bounded by the group's timeout and names the ranks that did not arrive; a
//! neighbour whose ring socket closes, or a rank that fails and raises the abort word, ends the
//! wait at once.

use std::ffi::CString;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::ReduceOp;
use super::ring::{TcpRing, closed_by, segment};
use crate::{Error, Result};

/// Floats per staging slot (2 MiB): the largest chunk one barrier round moves.
pub const SLOT_FLOATS: usize = 512 * 1024;

const COUNT_AT: usize = 0;
const ABORT_AT: usize = 64;
const RANKS_AT: usize = 128;
/// Busy-wait this long at a barrier before sleeping on the futex.
const SPIN: Duration = Duration::from_micros(50);
/// Sleep at most this long at a time, to look at the neighbours' sockets and the clock.
const NAP: Duration = Duration::from_millis(2);

/// A mapped shared segment; unmapped on drop.
struct Mapping {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; access is synchronised by the barrier
// protocol below.
unsafe impl Send for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: base/len come from a successful mmap and are unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

fn segment_len(world: usize, slot_floats: usize) -> usize {
    header_len(world) + world * 2 * slot_floats * 4
}

fn header_len(world: usize) -> usize {
    (RANKS_AT + world * 16).next_multiple_of(4096)
}

/// Creates (`create`) or opens the segment file `path` of `len` bytes and maps it.
fn map(path: &str, len: usize, create: bool) -> std::result::Result<Mapping, String> {
    let c = CString::new(path).map_err(|_| format!("bad segment name {path:?}"))?;
    let flags = if create {
        libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC
    } else {
        libc::O_RDWR | libc::O_CLOEXEC
    };
    let os = |what: &str| format!("{what} {path}: {}", std::io::Error::last_os_error());
    // SAFETY: plain system calls on a file descriptor this function owns and closes.
    unsafe {
        let fd = libc::open(c.as_ptr(), flags, 0o600);
        if fd < 0 {
            return Err(os("cannot open"));
        }
        let close = |msg: String| {
            libc::close(fd);
            Err(msg)
        };
        if create {
            if libc::ftruncate(fd, len as libc::off_t) != 0 {
                return close(os("cannot size"));
            }
            // Reserve the memory now: a full /dev/shm must fail here, not with SIGBUS later.
            let e = libc::posix_fallocate(fd, 0, len as libc::off_t);
            if e != 0 {
                return close(format!(
                    "cannot reserve {len} bytes for {path}: {}",
                    std::io::Error::from_raw_os_error(e)
                ));
            }
        } else {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut st) != 0 {
                return close(os("cannot stat"));
            }
            if st.st_size as usize != len {
                return close(format!("{path} has {} bytes, expected {len}", st.st_size));
            }
        }
        let base = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        libc::close(fd);
        if base == libc::MAP_FAILED {
            return Err(os("cannot map"));
        }
        Ok(Mapping {
            base: base.cast(),
            len,
        })
    }
}

/// What identifies this machine to its peers: the kernel's boot id (the same for every process
/// of one running kernel, containers included) and the host name.
fn host_identity() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    match boot.trim() {
        "" => String::new(),
        b => format!("{b}/{}", crate::env::hostname()),
    }
}

/// Shared-memory all-reduce for a group whose ranks all run on one host.
pub struct ShmReducer {
    rank: usize,
    world: usize,
    slot_floats: usize,
    map: Mapping,
    timeout: Duration,
    /// Barriers passed by this rank; all ranks pass them in the same order.
    barriers: u64,
    /// Chunks processed, to alternate the two slots.
    chunks: u64,
}

impl ShmReducer {
    /// Sets up the segment with the other ranks over `ring` (every rank calls this at the same
    /// point). `Ok(Err(why))` means shared memory cannot be used here (ranks on different hosts,
    /// no `/dev/shm`, not enough room) and the ring should carry the all-reduces.
    pub fn establish(
        ring: &mut TcpRing,
        rank: usize,
        world: usize,
        timeout: Duration,
    ) -> Result<std::result::Result<ShmReducer, String>> {
        Self::establish_with(ring, rank, world, timeout, &host_identity(), SLOT_FLOATS)
    }

    /// [`ShmReducer::establish`] with an explicit host identity and slot size (tests).
    fn establish_with(
        ring: &mut TcpRing,
        rank: usize,
        world: usize,
        timeout: Duration,
        host: &str,
        slot_floats: usize,
    ) -> Result<std::result::Result<ShmReducer, String>> {
        use super::Collective;
        let hosts = ring.all_gather_bytes(host.as_bytes())?;
        if host.is_empty() || hosts.iter().any(|h| h != host.as_bytes()) {
            return Ok(Err("the ranks do not all run on one host".into()));
        }
        let len = segment_len(world, slot_floats);
        // Rank 0 creates the segment and tells the others its name (or why it could not).
        let mut created = None;
        let announce = if rank == 0 {
            let mut nonce = [0u8; 8];
            let _ = getrandom::fill(&mut nonce);
            let name = format!(
                "/dev/shm/ddp-{}-{}",
                std::process::id(),
                nonce.iter().map(|b| format!("{b:02x}")).collect::<String>()
            );
            match map(&name, len, true) {
                Ok(m) => {
                    created = Some(m);
                    format!("ok {name}")
                }
                Err(e) => format!("err {e}"),
            }
        } else {
            String::new()
        };
        let all = ring.all_gather_bytes(announce.as_bytes())?;
        let announce = String::from_utf8_lossy(&all[0]).into_owned();
        let Some(name) = announce.strip_prefix("ok ") else {
            let why = announce.strip_prefix("err ").unwrap_or(&announce);
            return Ok(Err(format!("rank 0: {why}")));
        };
        let mapped = match created {
            Some(m) => Ok(m),
            None => map(name, len, false),
        };
        let status = match &mapped {
            Ok(_) => String::new(),
            Err(e) => e.clone(),
        };
        let statuses = ring.all_gather_bytes(status.as_bytes())?;
        if rank == 0 {
            // Every rank has mapped it (or given up): the name is no longer needed, and an
            // unlinked segment cannot outlive the group.
            let _ = std::fs::remove_file(name);
        }
        if let Some((r, why)) = statuses.iter().enumerate().find(|(_, s)| !s.is_empty()) {
            return Ok(Err(format!("rank {r}: {}", String::from_utf8_lossy(why))));
        }
        let map = mapped.expect("every rank mapped the segment");
        Ok(Ok(ShmReducer {
            rank,
            world,
            slot_floats,
            map,
            timeout,
            barriers: 0,
            chunks: 0,
        }))
    }

    fn atomic_u32(&self, at: usize) -> &AtomicU32 {
        // SAFETY: `at` is a 4-aligned offset inside the header page of the live mapping.
        unsafe { &*self.map.base.add(at).cast::<AtomicU32>() }
    }

    fn atomic_u64(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at` is an 8-aligned offset inside the header page of the live mapping.
        unsafe { &*self.map.base.add(at).cast::<AtomicU64>() }
    }

    /// Rank `r`'s last barrier number.
    fn arrived(&self, r: usize) -> &AtomicU64 {
        self.atomic_u64(RANKS_AT + r * 16)
    }

    /// Rank `r`'s current op: its sequence number (high 24 bits) and length (low 40 bits).
    fn op_of(&self, r: usize) -> &AtomicU64 {
        self.atomic_u64(RANKS_AT + r * 16 + 8)
    }

    fn slot_ptr(&self, r: usize, half: usize) -> *mut f32 {
        let at = header_len(self.world) + (r * 2 + half) * self.slot_floats * 4;
        // SAFETY: inside the mapping (segment_len counts 2 slots per rank).
        unsafe { self.map.base.add(at).cast() }
    }

    /// Raises the abort word so every rank waiting at a barrier fails at once.
    fn abort(&self) {
        self.atomic_u32(ABORT_AT)
            .store(self.rank as u32 + 1, Ordering::Release);
        futex_wake(self.atomic_u32(COUNT_AT));
    }

    /// Waits until every rank has arrived at this rank's next barrier.
    fn barrier(&mut self, seq: u64, ring: &TcpRing) -> Result<()> {
        self.barriers += 1;
        let n = self.barriers;
        self.arrived(self.rank).store(n, Ordering::Release);
        let count = self.atomic_u32(COUNT_AT);
        let target = (n as u32).wrapping_mul(self.world as u32);
        if count.fetch_add(1, Ordering::AcqRel).wrapping_add(1) == target {
            futex_wake(count);
            return Ok(());
        }
        let fail = |peer: Option<usize>, msg: String| Error::Collective {
            op: "all_reduce",
            seq,
            rank: self.rank,
            peer,
            msg,
        };
        let start = Instant::now();
        loop {
            let seen = count.load(Ordering::Acquire);
            if seen.wrapping_sub(target) as i32 >= 0 {
                return Ok(());
            }
            let aborted = self.atomic_u32(ABORT_AT).load(Ordering::Acquire);
            if aborted != 0 {
                let r = aborted as usize - 1;
                return Err(fail(
                    Some(r),
                    format!("rank {r} failed during a shared-memory all-reduce (see its log)"),
                ));
            }
            let waited = start.elapsed();
            if waited < SPIN {
                std::hint::spin_loop();
                continue;
            }
            if let Some(peer) = ring.closed_neighbour() {
                self.abort();
                return Err(fail(Some(peer), closed_by(peer)));
            }
            if waited >= self.timeout {
                let missing: Vec<usize> = (0..self.world)
                    .filter(|&r| self.arrived(r).load(Ordering::Acquire) < n)
                    .collect();
                self.abort();
                return Err(fail(
                    missing.first().copied(),
                    format!(
                        "timed out after {:.1} s waiting in shared memory for rank(s) {missing:?}",
                        waited.as_secs_f64()
                    ),
                ));
            }
            futex_wait(count, seen, NAP.min(self.timeout - waited));
        }
    }

    /// All-reduces `buf` with the other ranks. `seq` is the op's number in the group.
    pub fn all_reduce(
        &mut self,
        ring: &TcpRing,
        seq: u64,
        buf: &mut [f32],
        op: ReduceOp,
    ) -> Result<()> {
        let result = self.all_reduce_chunks(ring, seq, buf, op);
        if result.is_err() {
            self.abort();
        }
        result
    }

    fn all_reduce_chunks(
        &mut self,
        ring: &TcpRing,
        seq: u64,
        buf: &mut [f32],
        op: ReduceOp,
    ) -> Result<()> {
        let desc = (seq << 40) | buf.len() as u64;
        self.op_of(self.rank).store(desc, Ordering::Release);
        let (w, r) = (self.world, self.rank);
        let scale = (op == ReduceOp::Avg).then_some(1.0 / w as f32);
        let chunk_count = buf.len().div_ceil(self.slot_floats).max(1);
        for k in 0..chunk_count {
            let chunk = k * self.slot_floats..((k + 1) * self.slot_floats).min(buf.len());
            let chunk = &mut buf[chunk];
            let half = (self.chunks % 2) as usize;
            self.chunks += 1;
            // SAFETY: this rank's slot is written only by this rank, and only between the second
            // barrier of the chunk before last and the first barrier of this one, when no rank
            // reads it (see the module docs).
            unsafe { std::slice::from_raw_parts_mut(self.slot_ptr(r, half), chunk.len()) }
                .copy_from_slice(chunk);
            self.barrier(seq, ring)?;
            if k == 0 {
                self.check_same_op(seq, desc)?;
            }
            let mine = segment(chunk.len(), w, r);
            self.reduce_part(half, mine.clone(), chunk, scale);
            self.barrier(seq, ring)?;
            for q in (0..w).filter(|&q| q != r) {
                let part = segment(chunk.len(), w, q);
                // SAFETY: rank q wrote its part of its slot before the barrier just passed and
                // leaves it alone until the next chunk's first barrier (or the one after, for
                // this slot).
                let src = unsafe {
                    std::slice::from_raw_parts(self.slot_ptr(q, half).add(part.start), part.len())
                };
                chunk[part].copy_from_slice(src);
            }
        }
        Ok(())
    }

    /// Every rank must be in the same op with the same length.
    fn check_same_op(&self, seq: u64, desc: u64) -> Result<()> {
        for q in 0..self.world {
            let other = self.op_of(q).load(Ordering::Acquire);
            if other != desc {
                return Err(Error::Collective {
                    op: "all_reduce",
                    seq,
                    rank: self.rank,
                    peer: Some(q),
                    msg: format!(
                        "rank {q} is in op #{} with {} elements, this rank in #{seq} with {} (ranks must issue the same collectives in the same order)",
                        other >> 40,
                        other & ((1 << 40) - 1),
                        desc & ((1 << 40) - 1)
                    ),
                });
            }
        }
        Ok(())
    }

    /// Sums part `mine` of the chunk over all ranks' slots (in rank order, block by block to stay
    /// in cache) into `chunk` and into this rank's slot, where the others will copy it from.
    fn reduce_part(&self, half: usize, mine: Range<usize>, chunk: &mut [f32], scale: Option<f32>) {
        const BLOCK: usize = 2048;
        let own = self.slot_ptr(self.rank, half);
        let mut at = mine.start;
        while at < mine.end {
            let len = BLOCK.min(mine.end - at);
            let dst = &mut chunk[at..at + len];
            // SAFETY: every rank filled its slot before the first barrier; parts of other ranks'
            // slots are only read here, and this rank's own part is written only by this rank.
            unsafe {
                let slot =
                    |q: usize| std::slice::from_raw_parts(self.slot_ptr(q, half).add(at), len);
                dst.copy_from_slice(slot(0));
                for q in 1..self.world {
                    dst.iter_mut().zip(slot(q)).for_each(|(d, x)| *d += x);
                }
                if let Some(scale) = scale {
                    dst.iter_mut().for_each(|d| *d *= scale);
                }
                std::slice::from_raw_parts_mut(own.add(at), len).copy_from_slice(dst);
            }
            at += len;
        }
    }
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live 4-byte aligned word in a shared mapping; a shared (non-private)
    // futex because other processes wake it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: as in futex_wait.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::ring::tests::{collective_err, data, sum_of, with_ring};

    const T: Duration = Duration::from_secs(5);

    /// Sets up shared memory on every rank of a fresh ring (slots of `slot` floats) and runs `f`.
    fn with_shm<R: Send>(
        w: usize,
        slot: usize,
        timeout: Duration,
        f: impl Fn(usize, &mut TcpRing, &mut ShmReducer) -> R + Sync,
    ) -> Vec<R> {
        with_ring(w, T, |rank, ring| {
            let mut shm = ShmReducer::establish_with(ring, rank, w, timeout, "host", slot)
                .unwrap()
                .expect("shared memory set up");
            f(rank, ring, &mut shm)
        })
    }

    /// Runs one all-reduce the way the process group does (numbered by the ring).
    fn reduce(
        ring: &mut TcpRing,
        shm: &mut ShmReducer,
        buf: &mut [f32],
        op: ReduceOp,
    ) -> Result<()> {
        let seq = ring.begin_external("all_reduce")?;
        let result = shm.all_reduce(ring, seq, buf, op);
        ring.finish_external(result)
    }

    #[test]
    fn sums_and_averages_any_length_in_one_or_many_chunks() {
        for w in 2..=4 {
            let results = with_shm(w, 64, T, |rank, ring, shm| {
                let mut out = Vec::new();
                for n in [0, 1, w - 1, 64, 65, 1001] {
                    let mut buf = data(rank, n);
                    reduce(ring, shm, &mut buf, ReduceOp::Sum).unwrap();
                    out.push(buf);
                    let mut buf = data(rank, n);
                    reduce(ring, shm, &mut buf, ReduceOp::Avg).unwrap();
                    out.push(buf);
                }
                out
            });
            for (rank, out) in results.iter().enumerate() {
                for (k, n) in [0, 1, w - 1, 64, 65, 1001].into_iter().enumerate() {
                    let sum = sum_of(w, n);
                    let avg: Vec<f32> = sum.iter().map(|s| s * (1.0 / w as f32)).collect();
                    assert_eq!(out[2 * k], sum, "sum, world {w}, rank {rank}, length {n}");
                    assert_eq!(
                        out[2 * k + 1],
                        avg,
                        "avg, world {w}, rank {rank}, length {n}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_rank_ends_with_the_same_bits() {
        // Values whose sum depends on the order of addition: all ranks must still agree.
        let results = with_shm(3, 1 << 10, T, |rank, ring, shm| {
            let mut buf: Vec<f32> = (0..5000)
                .map(|i| ((i * 7919 + rank * 104_729) % 1000) as f32 * 1e-3 + 1e4 * rank as f32)
                .collect();
            reduce(ring, shm, &mut buf, ReduceOp::Avg).unwrap();
            buf
        });
        assert_eq!(results[0], results[1]);
        assert_eq!(results[0], results[2]);
    }

    #[test]
    fn a_segment_name_does_not_outlive_the_setup() {
        let pid = std::process::id();
        with_shm(2, 64, T, |_, _, _| ());
        let leftovers: Vec<_> = std::fs::read_dir("/dev/shm")
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("ddp-{pid}-"))
            })
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn ranks_on_different_hosts_fall_back_to_the_ring() {
        let results = with_ring(2, T, |rank, ring| {
            let host = format!("host-{rank}");
            ShmReducer::establish_with(ring, rank, 2, T, &host, 64)
                .unwrap()
                .err()
        });
        for why in results {
            assert_eq!(why.as_deref(), Some("the ranks do not all run on one host"));
        }
    }

    #[test]
    fn different_lengths_are_refused_naming_the_rank() {
        let results = with_shm(2, 64, T, |rank, ring, shm| {
            let mut buf = vec![1.0; 10 + rank];
            collective_err(reduce(ring, shm, &mut buf, ReduceOp::Sum))
        });
        let (op, seq, rank, peer, msg) = &results[0];
        assert_eq!((*op, *seq, *rank, *peer), ("all_reduce", 4, 0, Some(1)));
        assert!(msg.contains("rank 1 is in op #4 with 11 elements"), "{msg}");
    }

    #[test]
    fn a_closed_neighbour_ends_the_wait_at_once() {
        let results = with_shm(2, 64, T, |rank, ring, shm| {
            let start = Instant::now();
            if rank == 1 {
                // Leaves the group as a crashed process would: its sockets close.
                let _ = ring.finish_external::<()>(Err(Error::Model("gone".into())));
                return None;
            }
            let mut buf = vec![1.0; 100];
            let err = collective_err(reduce(ring, shm, &mut buf, ReduceOp::Sum));
            Some((err, start.elapsed()))
        });
        let ((op, _, rank, peer, msg), elapsed) = results[0].clone().unwrap();
        assert_eq!((op, rank, peer), ("all_reduce", 0, Some(1)));
        assert!(msg.contains("connection closed by rank 1"), "{msg}");
        assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
    }

    #[test]
    fn a_missing_rank_times_out_by_name() {
        let timeout = Duration::from_millis(300);
        let results = with_shm(3, 64, timeout, |rank, ring, shm| {
            if rank == 2 {
                // Alive but never joins the op; waits until the others have given up.
                std::thread::sleep(Duration::from_millis(900));
                return None;
            }
            let mut buf = vec![1.0; 100];
            Some(collective_err(reduce(ring, shm, &mut buf, ReduceOp::Sum)))
        });
        for r in [0, 1] {
            let (op, _, rank, peer, msg) = results[r].clone().unwrap();
            assert_eq!((op, rank), ("all_reduce", r));
            // The first rank to time out names rank 2; the other may see its abort instead.
            assert!(
                (peer == Some(2) && msg.contains("timed out") && msg.contains("[2]"))
                    || msg.contains("failed during a shared-memory all-reduce"),
                "rank {r}: {msg}"
            );
        }
    }
}
