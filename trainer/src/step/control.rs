//! The control element: one float each replica adds to its gradients every step, averaged with
//! them, by which the replicas agree at the same step boundary on a stop request and on
//! re-forming an elastic group (a replica waiting to join, one asked to leave).
//!
//! A stop request counts 1. A regroup request counts `-2·(W + 1)` for a world of `W`, more than
//! every replica's stop together, so the average is negative when any replica asked for a
//! regroup, positive when none did and one asked to stop, and 0 otherwise. The signs survive
//! every codec (bf16 and fp16 round, never flip a sign; the magnitudes stay far below their
//! ranges). A stop asked for in a step that regroups is seen a step later: requests stay set.

/// What the replicas agree on after a step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Control {
    /// Every replica finishes this step, checkpoints and stops.
    pub stop: bool,
    /// Every replica re-forms the group after this step (`ddp.elastic`).
    pub regroup: bool,
}

impl From<bool> for Control {
    /// A stop request or none.
    fn from(stop: bool) -> Control {
        Control {
            stop,
            regroup: false,
        }
    }
}

impl Control {
    /// This replica's element in a world of `world` replicas.
    pub fn value(self, world: usize) -> f32 {
        if self.regroup {
            -2.0 * (world as f32 + 1.0)
        } else if self.stop {
            1.0
        } else {
            0.0
        }
    }

    /// What the replicas agreed, from the element averaged (or summed) over them.
    pub fn read(reduced: f32) -> Control {
        Control {
            stop: reduced > 0.0,
            regroup: reduced < 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::codec::Codec;

    /// The average of the replicas' elements, each rounded by `codec` as it travels.
    fn agreed(asks: &[Control], codec: Option<Codec>) -> Control {
        let w = asks.len();
        let round = |v: &mut [f32]| {
            if let Some(c) = codec {
                c.round(v)
            }
        };
        let mut sum = 0.0f32;
        for c in asks {
            let mut v = [c.value(w)];
            round(&mut v);
            sum += v[0];
        }
        let mut avg = [sum / w as f32];
        round(&mut avg);
        Control::read(avg[0])
    }

    #[test]
    fn a_regroup_outweighs_every_stop_and_a_stop_any_silence() {
        let (none, stop) = (Control::default(), Control::from(true));
        let regroup = Control {
            stop: false,
            regroup: true,
        };
        for codec in [None, Some(Codec::Bf16), Some(Codec::F16)] {
            for w in [1usize, 2, 3, 4, 7, 64, 1000] {
                let mut asks = vec![stop; w];
                assert_eq!(agreed(&asks, codec), stop, "{codec:?} w={w}");
                asks[w - 1] = regroup;
                assert!(agreed(&asks, codec).regroup, "{codec:?} w={w}");
                assert!(!agreed(&asks, codec).stop);
                let mut quiet = vec![none; w];
                assert_eq!(agreed(&quiet, codec), none);
                quiet[0] = stop;
                assert_eq!(agreed(&quiet, codec), stop, "{codec:?} w={w}");
            }
        }
    }
}
