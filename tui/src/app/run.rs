//! The Run view's part of [`App::update`]: its keys (panes, logs, sampling) and the actions on
//! the open run.

use super::{App, Effect, View, sample_effect};
use crate::dialogs::input::InputLine;
use crate::dialogs::{Confirm, Dialog};
use crate::keys::Action;
use crate::scroll::scroll;
use crate::views::run::sample::{SampleState, rows};
use crate::views::run::{Pane, RunView};
use crate::widgets::logview::LogBuffer;
impl App {
    pub(super) fn act_run(&mut self, action: Action, page: usize) -> Vec<Effect> {
        let Some(v) = self.run.as_mut() else {
            return vec![];
        };
        match action {
            Action::NextPane => v.pane = v.next_pane(),
            Action::Pane(Pane::Sample) | Action::Sample | Action::SampleAgain => {
                return self.sample_action(action);
            }
            Action::Pane(p) => v.pane = p,
            _ => match v.pane {
                Pane::Charts => match action {
                    Action::Smoother => v.chart.smoother(),
                    Action::Rougher => v.chart.rougher(),
                    Action::ToggleLogScale => v.chart.log_loss = !v.chart.log_loss,
                    Action::CycleX => v.chart.cycle_x(),
                    _ => {}
                },
                Pane::Logs => {
                    let replicas = v.record.replicas;
                    match action {
                        Action::NextLogTab => v.logs.switch(replicas, 1),
                        Action::PrevLogTab => v.logs.switch(replicas, -1),
                        Action::Find => {
                            self.dialog = Some(Dialog::Search {
                                input: InputLine::default(),
                            });
                        }
                        _ => log_key(v, action, page),
                    }
                }
                Pane::Events => scroll(&mut v.events_scroll, action, page, v.events.len()),
                Pane::Spec => {
                    let lines = match &v.spec {
                        Some(Ok(t)) => t.lines().count(),
                        _ => 0,
                    };
                    scroll(&mut v.spec_scroll, action, page, lines)
                }
                Pane::Sample => {
                    let width = (self.size.0 as usize).saturating_sub(2);
                    sample_scroll(&mut v.sample, action, page, width);
                }
            },
        }
        vec![]
    }

    /// `5`, `p` and (in the Sample pane) `Enter`: the Sample pane of a language-model run, the
    /// prompt dialog, another sample with the next seed. Other runs get the reason they have
    /// no text to sample.
    fn sample_action(&mut self, action: Action) -> Vec<Effect> {
        let Some(v) = self.run.as_mut() else {
            return vec![];
        };
        let refusal = match &v.sample.lm {
            Some(Ok(())) => None,
            Some(Err(e)) => Some(e.clone()),
            None => Some("the run's spec is not read yet: try again in a moment".to_string()),
        };
        if let Some(text) = refusal {
            self.notify(text, true);
            return vec![];
        }
        v.pane = Pane::Sample;
        match action {
            Action::Sample => {
                let input = InputLine::new(&v.sample.prompt);
                self.dialog = Some(Dialog::Sample { input });
                vec![]
            }
            Action::SampleAgain => {
                let started = v.sample.again();
                vec![sample_effect(v, started)]
            }
            _ => vec![],
        }
    }

    /// `s`, `r`, `d`, `t`, `e` on the target run: checks, then a confirmation or an effect.
    pub(super) fn run_action(&mut self, action: Action) -> Vec<Effect> {
        if !matches!(self.view, View::Runs | View::Run) {
            return vec![];
        }
        let Some(run) = self.target() else {
            self.notify("no run selected", true);
            return vec![];
        };
        let r = &run.record;
        match action {
            Action::Stop if r.status.is_terminal() => {
                self.notify(format!("run {} is already {}", r.id, r.status), true);
                vec![]
            }
            Action::Stop => {
                self.dialog = Some(Dialog::Confirm(Confirm::Stop(run)));
                vec![]
            }
            Action::Delete if !r.status.is_terminal() => {
                let text = format!("run {} is {}: stop it first (s)", r.id, r.status);
                self.notify(text, true);
                vec![]
            }
            Action::Delete => {
                self.dialog = Some(Dialog::Confirm(Confirm::Delete(run)));
                vec![]
            }
            Action::Resume if !r.status.can_resume() => {
                let text = format!(
                    "run {} is {}: only a stopped, failed or paused run can be resumed",
                    r.id, r.status
                );
                self.notify(text, true);
                vec![]
            }
            Action::Resume => vec![Effect::ResumeRun(run)],
            Action::Tags => {
                let tags = self
                    .runs
                    .entry(&run.dir)
                    .map(|e| e.tags.join(" "))
                    .unwrap_or_default();
                self.dialog = Some(Dialog::Tags {
                    run,
                    input: InputLine::new(&tags),
                });
                vec![]
            }
            Action::Notes => vec![Effect::EditNotes(run)],
            _ => vec![],
        }
    }
}

/// A movement key in the Sample pane, over its text cut at `width` columns with `page` rows in
/// view: scrolling up stops following the newest text; reaching the end follows again.
fn sample_scroll(s: &mut SampleState, action: Action, page: usize, width: usize) {
    let last_top = rows(&s.text, width).len().saturating_sub(page);
    if s.follow {
        s.top = last_top;
    }
    scroll(&mut s.top, action, page, last_top + 1);
    s.follow = s.top >= last_top;
}

/// Scrolling, follow, wrap and search keys in the Logs pane.
fn log_key(v: &mut RunView, action: Action, page: usize) {
    let (buf, state) = v.logs.current();
    let empty = LogBuffer::new(1);
    let buf = buf.unwrap_or(&empty);
    match action {
        Action::Up => state.scroll_up(1, buf),
        Action::Down => state.scroll_down(1, buf),
        Action::PageUp => state.scroll_up(page, buf),
        Action::PageDown => state.scroll_down(page, buf),
        Action::Home => state.home(buf),
        Action::End => state.end(buf),
        Action::ToggleFollow => state.toggle_follow(),
        Action::ToggleWrap => state.toggle_wrap(),
        Action::SearchNext => state.next_match(buf),
        Action::SearchPrev => state.prev_match(buf),
        _ => {}
    }
}
