//! Direct copies: each rank reads the other ranks' buffers out of their address spaces with
//! `process_vm_readv` (cross-memory attach), so nothing is staged.
//!
//! One all-reduce is three barriers. Each rank publishes its buffer's address and arrives at the
//! first. It then sums its own part over all ranks (its own values in place, the others' read
//! block by block into a scratch buffer that stays in cache) and arrives at the second, after
//! which every part is reduced in its owner's buffer; it reads the other ranks' reduced parts
//! straight into its buffer and arrives at the third, after which nobody reads its buffer any
//! more and it may return.
//!
//! Reading another process's memory needs the kernel's ptrace access check to pass: same user,
//! and with Yama's `ptrace_scope` = 1 (Ubuntu's default) the reader must be declared, which each
//! rank does with `prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)`, as Open MPI does. Whether it works
//! is tried once at setup; otherwise the copies are staged.

use std::sync::atomic::Ordering;

use super::{Op, ShmReducer, add_rank, scale_sum, segment};
use crate::dist::ring::TcpRing;
use crate::{Error, Result};

/// Floats summed per block (128 KiB): the block, its scratch copy and the sum stay in L2.
const BLOCK: usize = 32 * 1024;

/// The other ranks' process ids and the scratch buffers of the sums.
pub(super) struct Direct {
    pids: Vec<libc::pid_t>,
    /// A block read from another rank.
    scratch: Vec<f32>,
    /// The running sum of a block.
    sum: Vec<f32>,
}

impl Direct {
    /// Tries direct copies with the other ranks over `ring` (every rank calls this at the same
    /// point): each rank reads a probe word out of the next rank's memory. `Ok(Err(why))` when
    /// some rank cannot.
    pub(super) fn establish(
        ring: &mut TcpRing,
        rank: usize,
    ) -> Result<std::result::Result<Direct, String>> {
        use crate::dist::Collective;
        allow_peers_to_read();
        let probe: Box<u64> = Box::new(0x6464_7020_7072_6f62 ^ rank as u64);
        let mut me = (std::process::id() as u64).to_le_bytes().to_vec();
        me.extend_from_slice(&(&*probe as *const u64 as u64).to_le_bytes());
        let all = ring.all_gather_bytes(&me)?;
        let word = |b: &[u8], i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
        let world = all.len();
        let next = (rank + 1) % world;
        let mut seen = 0u64;
        let status = match read_from(
            word(&all[next], 0) as libc::pid_t,
            word(&all[next], 1),
            bytes_of(std::slice::from_mut(&mut seen)),
        ) {
            Ok(()) if seen == 0x6464_7020_7072_6f62 ^ next as u64 => String::new(),
            Ok(()) => format!("rank {next}'s probe read back as {seen:#x}"),
            Err(e) => format!("cannot read rank {next}'s memory: {e}"),
        };
        // Every rank has read its probe once all statuses are in: `probe` may go.
        let statuses = ring.all_gather_bytes(status.as_bytes())?;
        drop(probe);
        if let Some((r, why)) = statuses.iter().enumerate().find(|(_, s)| !s.is_empty()) {
            return Ok(Err(format!(
                "staged: direct copies between processes refused, rank {r}: {}",
                String::from_utf8_lossy(why)
            )));
        }
        Ok(Ok(Direct {
            pids: all.iter().map(|b| word(b, 0) as libc::pid_t).collect(),
            scratch: vec![0.0; BLOCK],
            sum: vec![0.0; BLOCK],
        }))
    }
}

impl ShmReducer {
    /// All-reduces `buf` by reading the other ranks' buffers.
    pub(super) fn all_reduce_direct(
        &mut self,
        op: Op<'_>,
        buf: &mut [f32],
        scale: Option<f32>,
    ) -> Result<()> {
        let peers = self.reduce_own_part_of_all(op, buf, scale)?;
        read_other_parts(&peers, buf)?;
        self.barrier(&op)
    }

    /// Reduce-scatter of `buf` by direct reads: this rank's part (segment `rank` of `world`)
    /// ends up reduced. The last barrier says nobody reads `buf` any more.
    pub(super) fn reduce_scatter_direct(
        &mut self,
        op: Op<'_>,
        buf: &mut [f32],
        scale: Option<f32>,
    ) -> Result<()> {
        self.reduce_own_part_of_all(op, buf, scale).map(drop)
    }

    /// The first half of both: every rank's part reduced in its owner's buffer once this
    /// returns (the last barrier says so, and that nobody reads `buf` any more).
    fn reduce_own_part_of_all(
        &mut self,
        op: Op<'_>,
        buf: &mut [f32],
        scale: Option<f32>,
    ) -> Result<Peers> {
        let peers = self.meet(op, buf)?;
        self.reduce_own_part(&peers, buf, scale)?;
        self.barrier(&op)?;
        Ok(peers)
    }

    /// All-gather of the ranks' parts of `buf` by direct reads.
    pub(super) fn all_gather_direct(&mut self, op: Op<'_>, buf: &mut [f32]) -> Result<()> {
        let peers = self.meet(op, buf)?;
        read_other_parts(&peers, buf)?;
        self.barrier(&op)
    }

    /// Publishes `buf`'s address, waits for every rank to do the same in the same op, and
    /// returns where their buffers are.
    fn meet(&mut self, op: Op<'_>, buf: &[f32]) -> Result<Peers> {
        let (w, r) = (self.world, self.rank);
        self.buffer_of(r)
            .store(buf.as_ptr() as u64, Ordering::Release);
        self.barrier(&op)?;
        self.check_same_op(&op)?;
        let Ok(direct) = &self.copies else {
            unreachable!("direct copies were not set up");
        };
        Ok(Peers {
            op: op.name,
            rank: r,
            seq: op.seq,
            pids: direct.pids.clone(),
            bases: (0..w)
                .map(|q| self.buffer_of(q).load(Ordering::Acquire))
                .collect(),
        })
    }

    fn reduce_own_part(
        &mut self,
        peers: &Peers,
        buf: &mut [f32],
        scale: Option<f32>,
    ) -> Result<()> {
        let Ok(direct) = &mut self.copies else {
            unreachable!("direct copies were not set up");
        };
        direct.reduce_own_part(peers, buf, scale)
    }
}

/// Reads the other ranks' (reduced) parts of their buffers into `buf`.
fn read_other_parts(peers: &Peers, buf: &mut [f32]) -> Result<()> {
    let w = peers.bases.len();
    for q in (0..w).filter(|&q| q != peers.rank) {
        let part = segment(buf.len(), w, q);
        peers.read(q, part.start, &mut buf[part])?;
    }
    Ok(())
}

/// What one op knows of the ranks: this rank, the op's number, every rank's process id and
/// buffer address (published before the op's first barrier).
struct Peers {
    op: &'static str,
    rank: usize,
    seq: u64,
    pids: Vec<libc::pid_t>,
    bases: Vec<u64>,
}

impl Peers {
    /// Reads `dst.len()` floats at float offset `at` of rank `q`'s buffer into `dst`.
    fn read(&self, q: usize, at: usize, dst: &mut [f32]) -> Result<()> {
        let pid = self.pids[q];
        read_from(pid, self.bases[q] + 4 * at as u64, bytes_of(dst)).map_err(|e| {
            Error::Collective {
                op: self.op,
                seq: self.seq,
                rank: self.rank,
                peer: Some(q),
                msg: format!("cannot read rank {q}'s buffer (process {pid}): {e}"),
            }
        })
    }
}

impl Direct {
    /// Sums this rank's part of `buf` over all ranks, in rank order, block by block.
    fn reduce_own_part(
        &mut self,
        peers: &Peers,
        buf: &mut [f32],
        scale: Option<f32>,
    ) -> Result<()> {
        let world = peers.bases.len();
        let mine = segment(buf.len(), world, peers.rank);
        let mut at = mine.start;
        while at < mine.end {
            let len = BLOCK.min(mine.end - at);
            let sum = &mut self.sum[..len];
            for q in 0..world {
                let x: &[f32] = if q == peers.rank {
                    &buf[at..at + len]
                } else {
                    let scratch = &mut self.scratch[..len];
                    peers.read(q, at, scratch)?;
                    scratch
                };
                add_rank(sum, q, x);
            }
            scale_sum(sum, scale);
            buf[at..at + len].copy_from_slice(sum);
            at += len;
        }
        Ok(())
    }
}

/// The bytes of a float (or word) slice, to read into.
fn bytes_of<T: Copy>(xs: &mut [T]) -> &mut [u8] {
    // SAFETY: plain-old-data slices (f32, u64) viewed as bytes; every bit pattern is valid.
    unsafe { std::slice::from_raw_parts_mut(xs.as_mut_ptr().cast(), std::mem::size_of_val(xs)) }
}

/// Reads `dst.len()` bytes at address `from` of process `pid` into `dst`.
fn read_from(pid: libc::pid_t, from: u64, dst: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < dst.len() {
        let local = libc::iovec {
            iov_base: dst[done..].as_mut_ptr().cast(),
            iov_len: dst.len() - done,
        };
        let remote = libc::iovec {
            iov_base: (from + done as u64) as *mut libc::c_void,
            iov_len: dst.len() - done,
        };
        // SAFETY: `local` is this process's own writable memory of that length; the kernel checks
        // the remote range and the right to read it.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(std::io::Error::other("read nothing")),
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Lets the other ranks read this process's memory where Yama restricts it to declared readers
/// (`ptrace_scope` = 1). Elsewhere nothing is needed, or nothing helps.
fn allow_peers_to_read() {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").unwrap_or_default();
    if scope.trim() == "1" {
        // SAFETY: a plain prctl on this process.
        unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
    }
}
