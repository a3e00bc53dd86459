//! The Sweep view's state: one sweep's manifest (a search's trials, rungs, promotions), re-read
//! by the runtime while the view is open, and the selected trial of its leaderboard. [`draw`]
//! draws it: the search in words, its rungs, the leaderboard and the parallel coordinates.

pub mod draw;

use ddp_workspaces::sweep::SweepRecord;
use ddp_workspaces::sweep::trials::{Trial, TrialState};

/// What an action of the Sweep view asks the runtime to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SweepRequest {
    Stop(String),
    Resume(String),
    /// Promote paused trial `trial` by hand.
    Promote {
        sweep: String,
        trial: String,
    },
}

#[derive(Debug)]
pub struct SweepView {
    pub id: String,
    /// `None` until read; `Err`: why it could not be.
    pub record: Option<Result<SweepRecord, String>>,
    /// The selected row of the leaderboard.
    pub selected: usize,
}

impl SweepView {
    pub fn new(id: &str) -> SweepView {
        SweepView {
            id: id.to_string(),
            record: None,
            selected: 0,
        }
    }

    /// The manifest as last read.
    pub fn apply(&mut self, record: Result<SweepRecord, String>) {
        self.record = Some(record);
        let n = self.rows().len();
        self.selected = self.selected.min(n.saturating_sub(1));
    }

    /// The leaderboard's trials, best first (a sweep without a scheduler has none).
    pub fn rows(&self) -> Vec<&Trial> {
        match &self.record {
            Some(Ok(r)) => r
                .search
                .as_ref()
                .map(|s| s.leaderboard())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    pub fn selected_trial(&self) -> Option<&Trial> {
        self.rows().get(self.selected).copied()
    }

    pub fn move_selection(&mut self, by: isize) {
        let n = self.rows().len();
        if n > 0 {
            self.selected = (self.selected as isize + by).clamp(0, n as isize - 1) as usize;
        }
    }

    /// The request of promoting the selected trial, or why not.
    pub fn promote(&self) -> Result<SweepRequest, String> {
        let t = self
            .selected_trial()
            .ok_or_else(|| "no trial selected".to_string())?;
        if t.state != TrialState::Paused {
            return Err(format!(
                "trial t{:02} is {}: only a paused trial can be promoted",
                t.number,
                t.state.as_str()
            ));
        }
        Ok(SweepRequest::Promote {
            sweep: self.id.clone(),
            trial: format!("t{:02}", t.number),
        })
    }
}
