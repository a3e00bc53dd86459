//! A replica's elastic run (`ddp.elastic`): its group re-formed under way, and what it needs
//! to go on after that.
//!
//! Layout:
//! - this file (pure): where the current world's share of the epoch began, the position the
//!   most advanced replica sends the others, the membership event, and the message when too
//!   few replicas remain.
//! - `regroup`: the group re-formed (a replica lost, joining or leaving) at a step boundary the
//!   replicas agreed on, and the requests each step carries (stop, regroup).

mod regroup;

pub use regroup::LEAVE_REQUESTED;

use crate::dist::elastic::NextGeneration;
use crate::scaler::LossScaler;

/// Where the current world's share of an epoch began: the epoch's first step and position
/// (0, 0), or the step and the position in the epoch's permutation where the world changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Share {
    pub step: u64,
    pub pos: usize,
}

impl Share {
    /// The position in the epoch's permutation reached after `in_epoch` steps of the epoch,
    /// the steps since this share began taken by `world` replicas of `per_step` samples each
    /// (at most the data set's `len`).
    pub fn reached(&self, in_epoch: u64, per_step: usize, world: usize, len: usize) -> usize {
        let steps = in_epoch.saturating_sub(self.step) as usize;
        (self.pos + steps * per_step * world).min(len)
    }

    /// The steps of the epoch when, from this share's first step, each replica trains
    /// `num_samples` samples in micro-batches of `batch`, `accum` to a step.
    pub fn epoch_steps(&self, num_samples: usize, batch: usize, accum: usize) -> u64 {
        self.step + num_samples.div_ceil(batch).div_ceil(accum) as u64
    }
}

/// Where the run stands, as the most advanced replica sends it to the others once the group
/// re-formed (a step some replicas completed and others lost is the one the run goes on from).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Resync {
    pub epoch: usize,
    pub global_step: u64,
    /// Steps of the epoch completed.
    pub in_epoch: u64,
    /// The position in the epoch's permutation reached.
    pub pos: usize,
    /// The optimizer's step count.
    pub opt_steps: u64,
    /// The epoch's end (validation, checkpoint) was under way.
    pub epoch_end_due: bool,
    /// Epochs the run trains, and steps between two progress lines (a joiner set up alone
    /// counts them for a world of one).
    pub epochs: usize,
    pub log_every: u64,
    /// fp16's loss scaler: every member goes on with the same scale.
    pub scaler: Option<LossScaler>,
}

impl Resync {
    pub fn encode(&self) -> String {
        format!(
            "resync {} {} {} {} {} {} {} {} {}",
            self.epoch,
            self.global_step,
            self.in_epoch,
            self.pos,
            self.opt_steps,
            self.epoch_end_due as u8,
            self.epochs,
            self.log_every,
            self.scaler.map_or("-".to_string(), |s| s.encode())
        )
    }

    pub fn parse(s: &str) -> Option<Resync> {
        let mut it = s.strip_prefix("resync ")?.split(' ');
        let mut next = || it.next()?.parse::<u64>().ok();
        let mut r = Resync {
            epoch: next()? as usize,
            global_step: next()?,
            in_epoch: next()?,
            pos: next()? as usize,
            opt_steps: next()?,
            epoch_end_due: next()? == 1,
            epochs: next()? as usize,
            log_every: next()?,
            scaler: None,
        };
        r.scaler = match it.next()? {
            "-" => None,
            text => Some(LossScaler::decode(text)?),
        };
        it.next().is_none().then_some(r)
    }
}

/// FNV-1a over the bits of `values`: the weights' fingerprint each member of an elastic group
/// prints at the end, equal on every member.
pub(super) fn digest(values: &[f32]) -> u64 {
    values.iter().fold(0xcbf2_9ce4_8422_2325, |h, v| {
        v.to_bits()
            .to_le_bytes()
            .iter()
            .fold(h, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
    })
}

/// `1`, `1 and 3`, `0, 1 and 3`.
fn ids(v: &[u32]) -> String {
    match v {
        [] => "none".into(),
        [one] => one.to_string(),
        [rest @ .., last] => {
            let rest: Vec<String> = rest.iter().map(u32::to_string).collect();
            format!("{} and {last}", rest.join(", "))
        }
    }
}

/// What rank 0's log says of a membership change.
pub(super) fn change_line(d: &NextGeneration, world_before: usize, seconds_lost: f64) -> String {
    let (step, _) = d.most_advanced();
    let back: Vec<u32> = d
        .joined
        .iter()
        .copied()
        .filter(|id| d.left.contains(id))
        .collect();
    let only =
        |v: &[u32]| -> Vec<u32> { v.iter().copied().filter(|id| !back.contains(id)).collect() };
    let mut what = Vec::new();
    for (list, verb) in [
        (only(&d.left), "left"),
        (only(&d.joined), "joined"),
        (back.clone(), "came back"),
    ] {
        if !list.is_empty() {
            what.push(format!("replica {} {verb}", ids(&list)));
        }
    }
    format!(
        "membership: {} after step {step}; {} replicas go on instead of {world_before} \
         (generation {}, replicas {}), {seconds_lost:.1} s lost",
        what.join(", "),
        d.generation.members.len(),
        d.generation.number,
        ids(&d.generation.members),
    )
}

/// The `events.jsonl` line of a membership change (the workspace's `membership` event); with
/// local steps, `dropped` says how many steps since the last sync left with the lost replicas.
pub(super) fn event_line(
    time: f64,
    d: &NextGeneration,
    world_before: usize,
    seconds_lost: f64,
    dropped: Option<u64>,
) -> String {
    let mut line = serde_json::json!({
        "time": time,
        "event": "membership",
        "step": d.most_advanced().0,
        "generation": d.generation.number,
        "left": d.left,
        "joined": d.joined,
        "members": d.generation.members,
        "world_before": world_before,
        "world_after": d.generation.members.len(),
        "seconds_lost": (seconds_lost * 1000.0).round() / 1000.0,
    });
    if let Some(n) = dropped {
        line["local_steps_dropped"] = n.into();
    }
    line.to_string()
}

/// The error when fewer than `min` replicas remain.
pub(super) fn below_minimum(d: &NextGeneration, world_before: usize, min: usize) -> String {
    format!(
        "replica {} left after step {}: {} of {world_before} replicas remain, fewer than \
         ddp.elastic.min_replicas = {min}; the run stops here (its last checkpoint is where \
         a resume starts)",
        ids(&d.left),
        d.most_advanced().0,
        d.generation.members.len(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::elastic::Generation;

    fn decision() -> NextGeneration {
        NextGeneration {
            generation: Generation {
                number: 1,
                members: vec![0, 2, 3],
            },
            steps: vec![37, 38, 37],
            left: vec![1],
            joined: vec![],
        }
    }

    /// 4 replicas of 8 samples a step train 2 steps of a 100-sample epoch (64 positions), then
    /// 3 replicas train the rest.
    #[test]
    fn shares_count_positions_and_steps() {
        let first = Share::default();
        assert_eq!(first.reached(3, 8, 4, 100), 96);
        assert_eq!(first.reached(5, 8, 4, 100), 100);
        let next = Share { step: 2, pos: 64 };
        assert_eq!(next.reached(4, 8, 3, 200), 64 + 2 * 8 * 3);
        // 36 samples left over 3 replicas: 12 each, batches of 8 (2 micro-batches), 1 a step.
        assert_eq!(next.epoch_steps(12, 8, 1), 4);
        assert_eq!(next.epoch_steps(12, 8, 2), 3);
    }

    #[test]
    fn the_resync_header_round_trips() {
        let r = Resync {
            epoch: 2,
            global_step: 38,
            in_epoch: 6,
            pos: 192,
            opt_steps: 38,
            epoch_end_due: true,
            epochs: 3,
            log_every: 5,
            scaler: None,
        };
        assert_eq!(Resync::parse(&r.encode()), Some(r));
        let fp16 = Resync {
            scaler: Some(LossScaler::new(2048.0, 9)),
            ..r
        };
        assert_eq!(Resync::parse(&fp16.encode()), Some(fp16));
        assert_eq!(Resync::parse("resync 1 2 3"), None);
        assert_eq!(Resync::parse("resync 1 2 3 4 5 0 3 5 - 9"), None);
    }

    #[test]
    fn messages_name_who_left_and_where() {
        let d = decision();
        assert_eq!(
            change_line(&d, 4, 1.31),
            "membership: replica 1 left after step 38; 3 replicas go on instead of 4 \
             (generation 1, replicas 0, 2 and 3), 1.3 s lost"
        );
        let e: serde_json::Value =
            serde_json::from_str(&event_line(10.0, &d, 4, 1.25, None)).unwrap();
        assert_eq!(e["event"], "membership");
        assert_eq!(e["left"], serde_json::json!([1]));
        assert_eq!(
            (e["world_before"].as_u64(), e["world_after"].as_u64()),
            (Some(4), Some(3))
        );
        assert_eq!(e["step"], 38);
        let mut back = d.clone();
        back.generation.members = vec![0, 1, 2, 3];
        back.joined = vec![1];
        back.steps = vec![37, 0, 38, 37];
        assert_eq!(
            change_line(&back, 4, 0.4),
            "membership: replica 1 came back after step 38; 4 replicas go on instead of 4 \
             (generation 1, replicas 0, 1, 2 and 3), 0.4 s lost"
        );
        let msg = below_minimum(&d, 4, 4);
        assert!(msg.starts_with("replica 1 left after step 38: 3 of 4 replicas remain, fewer than ddp.elastic.min_replicas = 4"), "{msg}");
    }
}
