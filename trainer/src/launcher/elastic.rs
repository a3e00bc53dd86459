//! An elastic launch's own decisions: which replicas to start or ask to leave so that as many
//! run as wanted (pure), and the wanted number, read from the file `ddp scale` writes.

use std::path::PathBuf;

/// A local replica's place, as the scaling policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    /// Running and a member (or joining).
    Running,
    /// Running, asked to leave at the next step boundary.
    Leaving,
    /// Not running: it failed, left, or was never started again.
    Ended,
}

/// What the launcher does to one local replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    /// Start it to join the group.
    Start(usize),
    /// Ask it to leave (SIGUSR1).
    Leave(usize),
}

/// The actions that bring the running replicas (those not leaving) to `wanted`, clamped to
/// `min..=slots`: the lowest ended slots are started, or the highest running ones leave.
pub(super) fn scale(slots: &[Slot], wanted: usize, min: usize) -> Vec<Action> {
    let wanted = wanted.clamp(min.max(1), slots.len());
    let running = slots.iter().filter(|s| **s == Slot::Running).count();
    if wanted > running {
        (0..slots.len())
            .filter(|&i| slots[i] == Slot::Ended)
            .take(wanted - running)
            .map(Action::Start)
            .collect()
    } else {
        (0..slots.len())
            .rev()
            .filter(|&i| slots[i] == Slot::Running)
            .take(running - wanted)
            .map(Action::Leave)
            .collect()
    }
}

/// The file `ddp scale` writes the wanted number of replicas to; read when its content changes.
pub(super) struct ScaleFile {
    path: PathBuf,
    seen: Option<String>,
}

impl ScaleFile {
    pub(super) fn new(path: PathBuf) -> ScaleFile {
        ScaleFile { path, seen: None }
    }

    /// The wanted number of replicas when the file holds a new one; a file that does not hold
    /// a number is reported once and otherwise ignored.
    pub(super) fn changed(&mut self) -> Option<usize> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        if self.seen.as_deref() == Some(text.as_str()) {
            return None;
        }
        self.seen = Some(text.clone());
        match text.trim().parse::<usize>() {
            Ok(n) => Some(n),
            Err(_) => {
                eprintln!(
                    "ddp-trainer: {} should hold the wanted number of replicas, not {:?}; ignored",
                    self.path.display(),
                    text.trim()
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Slot::*;

    #[test]
    fn scaling_starts_the_lowest_ended_and_asks_the_highest_running_to_leave() {
        let slots = [Running, Ended, Running, Running];
        assert_eq!(scale(&slots, 4, 1), vec![Action::Start(1)]);
        assert_eq!(scale(&slots, 2, 1), vec![Action::Leave(3)]);
        assert_eq!(
            scale(&slots, 1, 1),
            vec![Action::Leave(3), Action::Leave(2)]
        );
        assert_eq!(scale(&slots, 3, 1), vec![]);
        // Clamped to the minimum and to the slots there are.
        assert_eq!(scale(&slots, 0, 2), vec![Action::Leave(3)]);
        assert_eq!(scale(&slots, 9, 1), vec![Action::Start(1)]);
        // A leaving replica counts as gone: scaling back up starts an ended slot.
        let slots = [Running, Leaving, Ended];
        assert_eq!(scale(&slots, 2, 1), vec![Action::Start(2)]);
    }

    #[test]
    fn the_scale_file_is_read_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scale");
        let mut f = ScaleFile::new(path.clone());
        assert_eq!(f.changed(), None);
        std::fs::write(&path, "3\n").unwrap();
        assert_eq!(f.changed(), Some(3));
        assert_eq!(f.changed(), None);
        std::fs::write(&path, "three").unwrap();
        assert_eq!(f.changed(), None);
        std::fs::write(&path, "2").unwrap();
        assert_eq!(f.changed(), Some(2));
    }
}
