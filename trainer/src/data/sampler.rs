//! `torch.utils.data.distributed.DistributedSampler`, index for index.
//!
//! For epoch `e` the full index list is `randperm(len, seed + e)` (or `0..len` without shuffle). Without
//! `drop_last` it is padded to `ceil(len / world) * world` by repeating it from its beginning (as many
//! times as needed); with `drop_last` it is cut to `floor(len / world) * world`. Rank `r` takes every
//! `world`-th entry starting at `r`.
//!
//! An elastic run whose world changes within an epoch splits what remains of that epoch over the
//! new world: [`DistributedSampler::from_position`] applies the same rule to the permutation's
//! entries from a position on (the samples the steps before the change had not reached).

use super::rng::randperm_into;
use crate::error::{Error, Result};

/// Which indices of a data set of `len` samples rank `rank` of `world` visits in an epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistributedSampler {
    pub len: usize,
    pub world: usize,
    pub rank: usize,
    pub shuffle: bool,
    pub seed: u64,
    pub drop_last: bool,
    /// The position in the epoch's permutation this world's share begins at: 0, or where an
    /// elastic run's world changed ([`DistributedSampler::from_position`]).
    pub start: usize,
}

impl DistributedSampler {
    /// A sampler after checking `world > 0` and `rank < world` (PyTorch raises `ValueError` too).
    pub fn new(
        len: usize,
        world: usize,
        rank: usize,
        shuffle: bool,
        seed: u64,
        drop_last: bool,
    ) -> Result<Self> {
        if world == 0 {
            return Err(Error::Env {
                var: "WORLD_SIZE".into(),
                msg: "the world size must be at least 1".into(),
            });
        }
        if rank >= world {
            return Err(Error::Env {
                var: "RANK".into(),
                msg: format!(
                    "rank {rank} is outside [0, {}] for world size {world}",
                    world - 1
                ),
            });
        }
        Ok(DistributedSampler {
            len,
            world,
            rank,
            shuffle,
            seed,
            drop_last,
            start: 0,
        })
    }

    /// This sampler over the entries of each epoch's permutation from `start` on (clamped to
    /// the data set's length), padded or cut for this world as a whole epoch is: the rest of
    /// an epoch whose first `start` positions the world before a membership change trained.
    pub fn from_position(mut self, start: usize) -> Self {
        self.start = start.min(self.len);
        self
    }

    /// The entries this sampler splits: the data set's length less [`Self::start`].
    fn remaining(&self) -> usize {
        self.len - self.start
    }

    /// Samples per rank per epoch (`DistributedSampler.num_samples`).
    pub fn num_samples(&self) -> usize {
        let len = self.remaining();
        if self.drop_last && !len.is_multiple_of(self.world) {
            // PyTorch: math.ceil((len - world) / world), i.e. floor(len / world) here.
            len / self.world
        } else {
            len.div_ceil(self.world)
        }
    }

    /// `num_samples() * world`.
    pub fn total_size(&self) -> usize {
        self.num_samples() * self.world
    }

    /// This rank's indices for `epoch` (what `set_epoch(epoch); list(iter(sampler))` yields).
    pub fn indices(&self, epoch: u64) -> Vec<usize> {
        let mut out = Vec::new();
        self.indices_into(epoch, &mut out);
        out
    }

    /// [`indices`](Self::indices) into a reused buffer: no allocation once `out` has held `len` entries.
    pub fn indices_into(&self, epoch: u64, out: &mut Vec<usize>) {
        let n = self.num_samples();
        let (len, world, rank, start) = (self.remaining(), self.world, self.rank, self.start);
        out.clear();
        if len == 0 || n == 0 {
            return;
        }
        // Entry k of this rank is entry (rank + k·world) of the padded list, i.e.
        // perm[start + (rank + k·world) % len].
        if !self.shuffle {
            out.extend((0..n).map(|k| start + (rank + k * world) % len));
            return;
        }
        randperm_into(self.len, self.seed.wrapping_add(epoch), out);
        if start > 0 {
            out.copy_within(start.., 0);
            out.truncate(len);
        }
        // Compact in place: position rank + k·world ≥ k, so reading ahead is safe; only the last entry can
        // wrap around into the padding (fewer than `world` padded entries) and read a low position that an
        // earlier write overwrote, so fetch it first.
        let last = (rank + (n - 1) * world) % len;
        let last_val = out[last];
        for k in 0..n - 1 {
            out[k] = out[rank + k * world];
        }
        out[n - 1] = last_val;
        out.truncate(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(
        len: usize,
        world: usize,
        rank: usize,
        shuffle: bool,
        drop_last: bool,
    ) -> DistributedSampler {
        DistributedSampler::new(len, world, rank, shuffle, 0, drop_last).unwrap()
    }

    #[test]
    fn sequential_partition_and_padding() {
        // len 10, world 4: total 12, padded with indices 0 and 1.
        let got: Vec<Vec<usize>> = (0..4)
            .map(|r| s(10, 4, r, false, false).indices(0))
            .collect();
        assert_eq!(
            got,
            vec![vec![0, 4, 8], vec![1, 5, 9], vec![2, 6, 0], vec![3, 7, 1]]
        );
        assert_eq!(s(10, 4, 0, false, false).num_samples(), 3);
    }

    #[test]
    fn padding_repeats_the_whole_list_when_needed() {
        // len 3, world 8: padded list is 0 1 2 0 1 2 0 1.
        let got: Vec<usize> = (0..8)
            .flat_map(|r| s(3, 8, r, false, false).indices(0))
            .collect();
        assert_eq!(got, vec![0, 1, 2, 0, 1, 2, 0, 1]);
    }

    #[test]
    fn drop_last_truncates() {
        let got: Vec<Vec<usize>> = (0..4)
            .map(|r| s(10, 4, r, false, true).indices(0))
            .collect();
        assert_eq!(got, vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]);
        assert_eq!(s(10, 4, 0, false, true).num_samples(), 2);
        assert_eq!(s(3, 4, 0, false, true).num_samples(), 0);
        assert!(s(3, 4, 2, true, true).indices(0).is_empty());
        assert_eq!(s(12, 4, 0, false, true).num_samples(), 3);
    }

    #[test]
    fn shuffled_ranks_partition_the_permutation() {
        for (len, world, drop_last) in [
            (10, 4, false),
            (10, 4, true),
            (3, 8, false),
            (100, 3, false),
            (7, 7, false),
        ] {
            let mut all = Vec::new();
            for r in 0..world {
                let sm = DistributedSampler::new(len, world, r, true, 5, drop_last).unwrap();
                let mut buf = Vec::new();
                sm.indices_into(2, &mut buf);
                assert_eq!(buf, sm.indices(2));
                assert_eq!(buf.len(), sm.num_samples());
                all.push(buf);
            }
            // Interleaving the ranks gives back the (padded or cut) permutation of seed + epoch = 7.
            let perm = super::super::randperm(len, 7);
            let total = all[0].len() * world;
            let mut merged = vec![0; total];
            for (r, v) in all.iter().enumerate() {
                for (k, &i) in v.iter().enumerate() {
                    merged[r + k * world] = i;
                }
            }
            let expected: Vec<usize> = (0..total).map(|j| perm[j % len]).collect();
            assert_eq!(
                merged, expected,
                "len {len} world {world} drop_last {drop_last}"
            );
        }
    }

    /// Expected values from `DistributedSampler(range(len), num_replicas=world, rank=r, shuffle=True,
    /// seed=seed, drop_last=d)` after `set_epoch(e)`, produced by torch 2.15.0.
    #[test]
    fn shuffled_indices_match_pytorch() {
        type Case = (usize, usize, u64, bool, u64, [&'static [usize]; 5]);
        let cases: [Case; 8] = [
            (
                10,
                3,
                0,
                false,
                0,
                [&[4, 5, 0, 2], &[1, 3, 8, 4], &[7, 9, 6, 1], &[], &[]],
            ),
            (
                10,
                3,
                0,
                false,
                1,
                [&[5, 2, 9, 4], &[6, 0, 3, 5], &[1, 8, 7, 6], &[], &[]],
            ),
            (
                10,
                3,
                0,
                false,
                2,
                [&[8, 5, 0, 3], &[7, 6, 4, 8], &[1, 9, 2, 7], &[], &[]],
            ),
            (
                10,
                3,
                0,
                true,
                1,
                [&[5, 2, 9], &[6, 0, 3], &[1, 8, 7], &[], &[]],
            ),
            (7, 4, 0, false, 0, [&[4, 2], &[0, 6], &[5, 1], &[3, 4], &[]]),
            (7, 4, 1, true, 2, [&[5], &[3], &[4], &[6], &[]]),
            (2, 5, 1, false, 0, [&[1], &[0], &[1], &[0], &[1]]),
            (2, 4, 0, true, 0, [&[], &[], &[], &[], &[]]),
        ];
        for (len, world, seed, drop_last, epoch, want) in cases {
            for (rank, want) in want.iter().enumerate().take(world) {
                let sm = DistributedSampler::new(len, world, rank, true, seed, drop_last).unwrap();
                assert_eq!(
                    sm.indices(epoch),
                    *want,
                    "len {len} world {world} rank {rank} epoch {epoch}"
                );
                assert_eq!(sm.num_samples(), want.len());
            }
        }
        assert_eq!(s(10, 3, 0, true, false).total_size(), 12);
        assert_eq!(s(10, 3, 0, true, true).total_size(), 9);
    }

    /// A world of 3 trains the first steps of an epoch, a world of 2 the rest from where they
    /// stopped: every sample of the epoch is seen exactly once.
    #[test]
    fn the_rest_of_an_epoch_is_split_over_a_new_world() {
        for shuffle in [false, true] {
            let (len, batch, steps) = (60, 4, 2);
            let mut seen = Vec::new();
            for r in 0..3 {
                let sm = DistributedSampler::new(len, 3, r, shuffle, 9, false).unwrap();
                seen.extend_from_slice(&sm.indices(1)[..steps * batch]);
            }
            let start = steps * batch * 3;
            for r in 0..2 {
                let sm = DistributedSampler::new(len, 2, r, shuffle, 9, false)
                    .unwrap()
                    .from_position(start);
                assert_eq!(sm.num_samples(), (len - start) / 2);
                seen.extend(sm.indices(1));
            }
            seen.sort_unstable();
            assert_eq!(seen, (0..len).collect::<Vec<_>>(), "shuffle {shuffle}");
        }
        // Padded as a whole epoch is: 7 entries left over 2 ranks, the first one repeated.
        let sm = |r| {
            DistributedSampler::new(10, 2, r, false, 0, false)
                .unwrap()
                .from_position(3)
        };
        assert_eq!(sm(0).indices(0), vec![3, 5, 7, 9]);
        assert_eq!(sm(1).indices(0), vec![4, 6, 8, 3]);
        let past = DistributedSampler::new(10, 2, 0, true, 0, false)
            .unwrap()
            .from_position(20);
        assert!(past.indices(0).is_empty());
    }

    #[test]
    fn epochs_reshuffle_and_buffer_is_reused() {
        let sm = DistributedSampler::new(50, 2, 1, true, 0, false).unwrap();
        assert_ne!(sm.indices(0), sm.indices(1));
        assert_eq!(sm.indices(1), sm.indices(1));
        let mut buf = Vec::new();
        sm.indices_into(0, &mut buf);
        let (ptr, cap) = (buf.as_ptr(), buf.capacity());
        sm.indices_into(1, &mut buf);
        assert_eq!((buf.as_ptr(), buf.capacity()), (ptr, cap));
        assert_eq!(buf.len(), 25);
    }

    #[test]
    fn rejects_bad_rank() {
        let e = DistributedSampler::new(10, 2, 2, true, 0, false)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "environment variable RANK: rank 2 is outside [0, 1] for world size 2"
        );
        assert!(DistributedSampler::new(10, 0, 0, true, 0, false).is_err());
    }
}
