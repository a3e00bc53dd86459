//! All-reduce through shared memory between the ranks of one host.
//!
//! When every rank of a group runs on the same machine, the `tcp` backend all-reduces through a
//! segment of `/dev/shm` that all ranks map, instead of pushing every byte twice through the
//! kernel's loopback. Other collectives (broadcast, gathers, barrier) stay on the TCP ring, which
//! also tells when a neighbour dies.
//!
//! Two ways to move the data:
//! - **direct** ([`direct`]): each rank reads the other ranks' buffers straight out of their
//!   address space with `process_vm_readv` (cross-memory attach, as MPI's shared-memory transports
//!   do), so a byte crosses memory once per reader. Used for all-reduces of at least
//!   [`DIRECT_MIN_FLOATS`] where the setup's probe found it allowed.
//! - **staged** ([`staged`]): the ranks copy through staging slots in the segment: for smaller
//!   all-reduces, and for all of them where the kernel refuses direct copies (a Yama
//!   `ptrace_scope` of 2 or 3, a seccomp filter) or `DDP_SHM_DIRECT=0`.
//!
//! The two halves of an all-reduce, reduce-scatter and all-gather of shards ([`shards`]), move
//! their data either way too; the DDP step uses them to run the optimizer on one shard per rank.
//! Better still, the DDP step can keep its gradients and parameters in a second segment
//! ([`step`]), where the other ranks read them in place: no copy but the sums and the gathered
//! shards themselves.
//!
//! Layout of the segment: a header page (the arrival counter the ranks wait on with a futex, an
//! abort word, and per rank the number of its last barrier, its current op and, for direct copies,
//! the address of its buffer), then per rank [`SLOTS`] slots of [`SLOT_FLOATS`] floats.
//!
//! Either way each rank owns a part of the buffer (1/W of it) and sums that part over all ranks
//! in rank order, so every rank ends with the same bits, then copies the other ranks' reduced
//! parts.
//!
//! Every wait is bounded by the group's timeout and names the ranks that did not arrive; a
//! neighbour whose ring socket closes, or a rank that fails and raises the abort word, ends the
//! wait at once.

use std::ffi::CString;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::ReduceOp;
use super::ring::{TcpRing, closed_by};
use super::segment::segment;
use crate::{Error, Result};

mod direct;
mod shards;
mod staged;
mod step;

pub use step::{HeldGrads, ShardUpdate, StepBuffers};

use direct::Direct;

/// Floats per staging slot (2 MiB): the largest chunk one barrier round moves.
pub const SLOT_FLOATS: usize = 512 * 1024;
/// Staging slots per rank, used in turn: a rank stages chunk k + 1 while the others may still
/// gather chunk k − 1 (see [`staged`]).
const SLOTS: usize = 3;
/// All-reduces smaller than this (4 MiB) are staged even where direct copies work: the data is
/// still in cache, where a user-space copy beats the kernel's page-by-page one. (The MLP's
/// 2.7 MB gradient step trained 15 % slower with direct copies; at 25 MB they are 1.5× faster.)
const DIRECT_MIN_FLOATS: usize = 1 << 20;
/// Bytes of the header per rank: last barrier, current op (two words, see
/// [`ShmReducer::op_of`]), buffer address.
const RANK_STRIDE: usize = 32;

const COUNT_AT: usize = 0;
const ABORT_AT: usize = 64;
const RANKS_AT: usize = 128;
/// Floats per block when a rank sums its part from the segment (staged copies, step buffers):
/// the block's sum stays in L1.
const SUM_BLOCK: usize = 2048;
/// Busy-wait this long at a barrier before sleeping on the futex when the cores are shared
/// (more threads on this host than cores): the spinning core may be one another rank needs.
const SPIN: Duration = Duration::from_micros(50);
/// Busy-wait this long when every thread of every rank has a core of its own: nothing else
/// wants the core, and a sleeping rank wakes late (on a VM, a halted virtual CPU can take
/// hundreds of microseconds), which the other ranks then wait for at the next barrier.
const SPIN_OWN_CORES: Duration = Duration::from_millis(2);
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
    header_len(world) + world * SLOTS * slot_floats * 4
}

fn header_len(world: usize) -> usize {
    (RANKS_AT + world * RANK_STRIDE).next_multiple_of(4096)
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

/// Rank 0 creates a segment of `len` bytes and every rank maps it (every rank calls this at the
/// same point). `Ok(Err(why))` names the first rank that could not; the name is unlinked once
/// every rank has mapped it, so the segment cannot outlive the group.
fn share_segment(
    ring: &mut TcpRing,
    rank: usize,
    len: usize,
) -> Result<std::result::Result<Mapping, String>> {
    use super::Collective;
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
        let _ = std::fs::remove_file(name);
    }
    if let Some((r, why)) = statuses.iter().enumerate().find(|(_, s)| !s.is_empty()) {
        return Ok(Err(format!("rank {r}: {}", String::from_utf8_lossy(why))));
    }
    Ok(Ok(mapped.expect("every rank mapped the segment")))
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

/// What [`ShmReducer::establish_with`] sets up.
struct Setup {
    /// This machine's identity: ranks with different identities cannot share memory.
    host: String,
    /// Floats per staging slot.
    slot_floats: usize,
    /// Try direct copies between the ranks' address spaces.
    direct: bool,
    /// The smallest all-reduce (in floats) that uses direct copies.
    direct_min_floats: usize,
    /// How long a rank busy-waits at a barrier before it sleeps.
    spin: Duration,
}

/// Shared-memory all-reduce for a group whose ranks all run on one host.
pub struct ShmReducer {
    rank: usize,
    world: usize,
    /// Direct copies between the ranks' buffers, or why the copies are staged through the slots.
    copies: std::result::Result<Direct, String>,
    /// Floats per staging slot.
    slot_floats: usize,
    /// All-reduces of fewer floats are staged even where direct copies work.
    direct_min_floats: usize,
    /// How long to busy-wait at a barrier before sleeping ([`spin_for`]).
    spin: Duration,
    map: Mapping,
    timeout: Duration,
    /// Barriers passed by this rank; all ranks pass them in the same order.
    barriers: u64,
    /// Chunks staged, to use the slots in turn.
    chunks: u64,
    /// Ops begun by this rank (all ranks begin the same ops in the same order).
    ops: u64,
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
        let direct = std::env::var("DDP_SHM_DIRECT").map_or(true, |v| v != "0");
        let setup = Setup {
            host: host_identity(),
            slot_floats: SLOT_FLOATS,
            direct,
            direct_min_floats: DIRECT_MIN_FLOATS,
            spin: spin_for(world, rayon::current_num_threads(), available_cores()),
        };
        Self::establish_with(ring, rank, world, timeout, &setup)
    }

    /// [`ShmReducer::establish`] with an explicit host identity, slot size and copy mode (tests).
    fn establish_with(
        ring: &mut TcpRing,
        rank: usize,
        world: usize,
        timeout: Duration,
        setup: &Setup,
    ) -> Result<std::result::Result<ShmReducer, String>> {
        use super::Collective;
        let host = setup.host.as_str();
        let hosts = ring.all_gather_bytes(host.as_bytes())?;
        if host.is_empty() || hosts.iter().any(|h| h != host.as_bytes()) {
            return Ok(Err("the ranks do not all run on one host".into()));
        }
        let copies = if setup.direct {
            Direct::establish(ring, rank)?
        } else {
            Err("staged, DDP_SHM_DIRECT=0".to_string())
        };
        let slot_floats = setup.slot_floats;
        let map = match share_segment(ring, rank, segment_len(world, slot_floats))? {
            Ok(map) => map,
            Err(why) => return Ok(Err(why)),
        };
        Ok(Ok(ShmReducer {
            rank,
            world,
            copies,
            slot_floats,
            direct_min_floats: setup.direct_min_floats,
            spin: setup.spin,
            map,
            timeout,
            barriers: 0,
            chunks: 0,
            ops: 0,
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
        self.atomic_u64(RANKS_AT + r * RANK_STRIDE)
    }

    /// Rank `r`'s description of this rank's current op: its sequence number (high 24 bits) and
    /// length (low 40 bits). Ops alternate between two words: an op that ends without a last
    /// barrier (staged reduce-scatter, all-gather) lets a rank publish its next op while a slower
    /// one still checks this one, but never two ops ahead.
    fn op_of(&self, r: usize) -> &AtomicU64 {
        let word = (self.ops % 2) as usize;
        self.atomic_u64(RANKS_AT + r * RANK_STRIDE + 8 + 8 * word)
    }

    /// The address of rank `r`'s buffer in its own address space (direct copies).
    fn buffer_of(&self, r: usize) -> &AtomicU64 {
        self.atomic_u64(RANKS_AT + r * RANK_STRIDE + 24)
    }

    /// How the all-reduces move their data, for the group's transport line: `None` for direct
    /// copies, else why they are staged through the segment.
    pub fn staged_because(&self) -> Option<&str> {
        self.copies.as_ref().err().map(String::as_str)
    }

    fn slot_ptr(&self, r: usize, half: usize) -> *mut f32 {
        let at = header_len(self.world) + (r * SLOTS + half) * self.slot_floats * 4;
        // SAFETY: inside the mapping (segment_len counts SLOTS slots per rank).
        unsafe { self.map.base.add(at).cast() }
    }

    /// The staging slot of the next chunk: the slots are used in turn.
    fn next_slot(&mut self) -> usize {
        let slot = (self.chunks % SLOTS as u64) as usize;
        self.chunks += 1;
        slot
    }

    /// Raises the abort word so every rank waiting at a barrier fails at once.
    fn abort(&self) {
        self.atomic_u32(ABORT_AT)
            .store(self.rank as u32 + 1, Ordering::Release);
        futex_wake(self.atomic_u32(COUNT_AT));
    }

    /// Waits until every rank has arrived at this rank's next barrier (in `op`).
    fn barrier(&mut self, op: &Op<'_>) -> Result<()> {
        let (seq, ring) = (op.seq, op.ring);
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
            op: op.name,
            seq,
            rank: self.rank,
            peer,
            msg,
        };
        let passed = |seen: u32| seen.wrapping_sub(target) as i32 >= 0;
        let start = Instant::now();
        loop {
            let seen = count.load(Ordering::Acquire);
            if passed(seen) {
                return Ok(());
            }
            // A failure seen from here on may come after the last rank arrived: ranks that
            // passed may already have finished and closed their sockets, which is no failure.
            let failed_after_passing = || passed(count.load(Ordering::Acquire));
            let aborted = self.atomic_u32(ABORT_AT).load(Ordering::Acquire);
            if aborted != 0 && !failed_after_passing() {
                let r = aborted as usize - 1;
                return Err(fail(
                    Some(r),
                    format!("rank {r} failed during a shared-memory all-reduce (see its log)"),
                ));
            }
            let waited = start.elapsed();
            if waited < self.spin {
                std::hint::spin_loop();
                continue;
            }
            if let Some(peer) = ring.closed_neighbour() {
                if failed_after_passing() {
                    return Ok(());
                }
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

    /// All-reduces `buf` with the other ranks (the op is numbered by `ring`).
    pub fn all_reduce(&mut self, ring: &mut TcpRing, buf: &mut [f32], op: ReduceOp) -> Result<()> {
        let scale = self.scale(op);
        self.run(ring, "all_reduce", buf.len(), |shm, op, direct| {
            if direct {
                shm.all_reduce_direct(op, buf, scale)
            } else {
                shm.all_reduce_staged(op, buf, scale)
            }
        })
    }

    /// `Avg`'s factor.
    fn scale(&self, op: ReduceOp) -> Option<f32> {
        (op == ReduceOp::Avg).then_some(1.0 / self.world as f32)
    }

    /// Runs one op named `name` on a buffer of `len` floats: numbers it in `ring`'s sequence,
    /// publishes its description, and calls `f(self, op, direct)`, `direct` saying whether the
    /// data moves by direct copies (else staged). A failure raises the abort word and breaks
    /// the ring, so every other rank fails at once.
    fn run(
        &mut self,
        ring: &mut TcpRing,
        name: &'static str,
        len: usize,
        f: impl FnOnce(&mut Self, Op<'_>, bool) -> Result<()>,
    ) -> Result<()> {
        let seq = ring.begin_external(name)?;
        let desc = self.begin(seq, len);
        let direct = self.direct_for(len);
        let op = Op {
            name,
            ring,
            seq,
            desc,
        };
        let result = f(self, op, direct);
        if result.is_err() {
            self.abort();
        }
        ring.finish_external(result)
    }

    /// Starts op `seq` on a buffer of `len` floats: publishes its description (see
    /// [`ShmReducer::check_same_op`]) and returns it.
    fn begin(&mut self, seq: u64, len: usize) -> u64 {
        self.ops += 1;
        let desc = (seq << 40) | len as u64;
        self.op_of(self.rank).store(desc, Ordering::Release);
        desc
    }

    /// Whether a buffer of `len` floats moves by direct copies (else staged).
    fn direct_for(&self, len: usize) -> bool {
        self.copies.is_ok() && len >= self.direct_min_floats
    }

    /// Every rank must be in the same op with the same length.
    fn check_same_op(&self, op: &Op<'_>) -> Result<()> {
        let (seq, desc) = (op.seq, op.desc);
        for q in 0..self.world {
            let other = self.op_of(q).load(Ordering::Acquire);
            if other != desc {
                return Err(Error::Collective {
                    op: op.name,
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
}

/// How long a rank busy-waits at a barrier: long ([`SPIN_OWN_CORES`]) when the `ranks` of this
/// host with `threads` each fit on its `cores`, else short ([`SPIN`]).
fn spin_for(ranks: usize, threads: usize, cores: usize) -> Duration {
    if ranks.saturating_mul(threads.max(1)) <= cores {
        SPIN_OWN_CORES
    } else {
        SPIN
    }
}

/// The cores this process may run on.
fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// One op in progress: its name (for errors), the ring that numbers it (and whose sockets tell
/// of a dead neighbour), its number, and its description (see [`ShmReducer::check_same_op`]).
#[derive(Clone, Copy)]
struct Op<'r> {
    name: &'static str,
    ring: &'r TcpRing,
    seq: u64,
    desc: u64,
}

/// Adds rank `q`'s values `x` into the running `sum` of a block (ranks in order: rank 0's
/// values start it).
fn add_rank(sum: &mut [f32], q: usize, x: &[f32]) {
    if q == 0 {
        sum.copy_from_slice(x);
    } else {
        sum.iter_mut().zip(x).for_each(|(s, x)| *s += x);
    }
}

/// Scales a finished sum (`Avg`: by 1/W).
fn scale_sum(sum: &mut [f32], scale: Option<f32>) {
    if let Some(scale) = scale {
        sum.iter_mut().for_each(|s| *s *= scale);
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
pub(crate) mod tests;
