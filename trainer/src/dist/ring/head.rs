//! The op header: the first pass of every op carries a 32-byte header (op, sequence number,
//! length) so ranks that issue different collectives fail with a clear message, not a hang.

use std::ops::Range;

pub(super) const HEAD_LEN: usize = 32;
const HEAD_MAGIC: u32 = u32::from_le_bytes(*b"DDPr");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(super) enum OpCode {
    AllReduce = 1,
    Broadcast = 2,
    AllGather = 3,
    AllGatherBytes = 4,
    Barrier = 5,
    ReduceScatter = 6,
    AllGatherShards = 7,
    AllReduceCoded = 8,
}

impl OpCode {
    pub(super) fn name(self) -> &'static str {
        match self {
            OpCode::AllReduce => "all_reduce",
            OpCode::Broadcast => "broadcast",
            OpCode::AllGather => "all_gather",
            OpCode::AllGatherBytes => "all_gather_bytes",
            OpCode::Barrier => "barrier",
            OpCode::ReduceScatter => "reduce_scatter",
            OpCode::AllGatherShards => "all_gather_shards",
            OpCode::AllReduceCoded => "all_reduce_coded",
        }
    }

    fn from_u32(v: u32) -> Option<OpCode> {
        [
            OpCode::AllReduce,
            OpCode::Broadcast,
            OpCode::AllGather,
            OpCode::AllGatherBytes,
            OpCode::Barrier,
            OpCode::ReduceScatter,
            OpCode::AllGatherShards,
            OpCode::AllReduceCoded,
        ]
        .into_iter()
        .find(|op| *op as u32 == v)
    }
}

/// What every rank must agree on for one op: sent ahead of the op's first pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Head {
    pub(super) op: OpCode,
    pub(super) seq: u64,
    /// Elements per rank (all_gather_bytes: 0, lengths differ by design).
    pub(super) count: u64,
    /// all_reduce, reduce_scatter: 0 sum / 1 avg; all_reduce_coded: that + 2 × the codec (1
    /// bf16, 2 fp16); broadcast: the root.
    pub(super) extra: u64,
}

impl Head {
    pub(super) fn encode(&self) -> [u8; HEAD_LEN] {
        let mut b = [0u8; HEAD_LEN];
        b[0..4].copy_from_slice(&HEAD_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&(self.op as u32).to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.count.to_le_bytes());
        b[24..32].copy_from_slice(&self.extra.to_le_bytes());
        b
    }

    pub(super) fn decode(b: &[u8; HEAD_LEN]) -> Option<Head> {
        let word = |r: Range<usize>| u64::from_le_bytes(b[r].try_into().expect("8 bytes"));
        if u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")) != HEAD_MAGIC {
            return None;
        }
        let op = OpCode::from_u32(u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")))?;
        Some(Head {
            op,
            seq: word(8..16),
            count: word(16..24),
            extra: word(24..32),
        })
    }

    pub(super) fn describe(&self) -> String {
        let what = match self.op {
            OpCode::AllReduce | OpCode::ReduceScatter => {
                format!(
                    " ({}, {} elements)",
                    if self.extra == 1 { "avg" } else { "sum" },
                    self.count
                )
            }
            OpCode::Broadcast => format!(" (root {}, {} elements)", self.extra, self.count),
            OpCode::AllGather => format!(" ({} elements per rank)", self.count),
            OpCode::AllGatherShards => format!(" ({} elements)", self.count),
            OpCode::AllReduceCoded => format!(
                " ({}, {}, {} elements)",
                if self.extra & 1 == 1 { "avg" } else { "sum" },
                if self.extra >> 1 == 1 { "bf16" } else { "fp16" },
                self.count
            ),
            OpCode::AllGatherBytes | OpCode::Barrier => String::new(),
        };
        format!("{} #{}{what}", self.op.name(), self.seq)
    }
}
