//! The Sweep view's part of [`App::update`]: opening a run's sweep and its keys (move, open
//! the trial's run, stop, resume, promote).

use super::{App, Effect, View};
use crate::keys::Action;
use crate::views::sweep::{SweepRequest, SweepView};

impl App {
    /// The Sweep view's keys: move, open the trial's run, stop, resume, promote.
    pub(super) fn act_sweep(&mut self, action: Action, page: usize) -> Vec<Effect> {
        let Some(s) = self.sweep.as_mut() else {
            return vec![];
        };
        let id = s.id.clone();
        let request = match action {
            Action::Up => return move_and_none(s, -1),
            Action::Down => return move_and_none(s, 1),
            Action::PageUp => return move_and_none(s, -(page as isize)),
            Action::PageDown => return move_and_none(s, page as isize),
            Action::Home => return move_and_none(s, isize::MIN / 2),
            Action::End => return move_and_none(s, isize::MAX / 2),
            Action::Stop => SweepRequest::Stop(id),
            Action::Resume => SweepRequest::Resume(id),
            Action::Promote => match s.promote() {
                Ok(r) => r,
                Err(e) => {
                    self.notify(e, true);
                    return vec![];
                }
            },
            Action::Open => {
                let Some(run) = s.selected_trial().map(|t| t.run.clone()) else {
                    return vec![];
                };
                let dir = self
                    .runs
                    .entries
                    .iter()
                    .find(|e| e.run.record.id == run)
                    .map(|e| e.run.dir.clone());
                self.runs.selected = dir;
                self.view = View::Runs;
                self.sweep = None;
                let mut effects = vec![Effect::UnwatchSweep];
                effects.extend(self.open_selected());
                return effects;
            }
            _ => return vec![],
        };
        vec![Effect::Sweep(request)]
    }

    pub(super) fn open_sweep(&mut self) -> Vec<Effect> {
        let Some(id) = self
            .runs
            .selected_entry()
            .and_then(|e| e.run.record.sweep.clone())
        else {
            self.notify("the selected run belongs to no sweep", true);
            return vec![];
        };
        self.sweep = Some(SweepView::new(&id));
        self.view = View::Sweep;
        vec![Effect::WatchSweep(id)]
    }
}

/// Moves the Sweep view's selection; no effect.
fn move_and_none(s: &mut SweepView, by: isize) -> Vec<Effect> {
    s.move_selection(by);
    vec![]
}
