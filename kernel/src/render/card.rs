//! The run card: a notebook cell's live view of one run, updated in place while it trains.
//!
//! A [`Card`] starts from the run ([`Card::new`] reads the frozen spec once for the planned
//! epochs and step limit) and folds the run's [`RunEvent`]s ([`Card::apply`]): the run record,
//! rank 0's metric records, the last [`LOG_LINES`] lines of each rank's log and of the
//! supervisor's, the last supervisor event. [`Card::render`] reads no file and draws the chart
//! only when metrics arrived since the last render, so it can run twice a second.
//!
//! It shows: run id, experiment (and name), status badge, epoch E/N and step, a progress bar,
//! samples/s (the latest train record's, all replicas), ETA (from the steps per second since the
//! run's current attempt started recording), restarts, the last supervisor event, where the
//! steps' time goes (a stacked bar: compute, exposed communication, data, optimizer), a loss and
//! accuracy chart (once there are records; an `<img>` of the SVG, see [`svg_img`]), the devices
//! in a few words, and per rank the last log lines (in a `<details>`). When the run is over:
//! test accuracy and loss (completed), the error (failed), how to resume (stopped); the status
//! says how it ended once (the last event is left out when it only repeats it).
//!
//! A language model's card (its records say so:
//! [`ddp_workspaces::metrics::is_language_model`]) shows its step S/N instead of the epoch,
//! tokens/s instead of samples/s, the learning rate, and the last validation's loss, perplexity
//! and bits per character (or byte) instead of the test; its chart is loss and perplexity.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::OnceLock;

use ddp_workspaces::follow::run_list::MetricDigest;
use ddp_workspaces::metrics::{MetricKind, MetricRecord};
use ddp_workspaces::present::format::{self, percent};
use ddp_workspaces::present::plot::{self, Series, XAxis};
use ddp_workspaces::runs::plan::Plan;
use ddp_workspaces::runs::run::SupervisorEvent;
use ddp_workspaces::{Run, RunEvent, RunRecord, RunStatus};

use super::table::{bar, pre, stacked_bar, status_badge, status_colour};
use super::text::{clean_line, describe, short_devices, shorten, text_bar};
use super::{Output, html_escape, svg_img};

/// Log lines kept per rank (and for the supervisor).
pub const LOG_LINES: usize = 8;
/// Size of the card's chart, pixels: the card's width inside its padding, so the chart is shown
/// at the size it is drawn (smaller only in a narrower output area).
pub const CHART_SIZE: (u32, u32) = (656, 300);

/// What a run card shows, folded from the run's events.
#[derive(Debug)]
pub struct Card {
    record: RunRecord,
    /// `train.epochs` of the run's spec.
    epochs_total: Option<usize>,
    /// `train.max_steps` of the run's spec (a run counted in steps: its `train.steps`).
    max_steps: Option<u64>,
    /// Rank 0's metric records (labelled with the run id, for the chart).
    series: Series,
    digest: MetricDigest,
    /// The epoch of the newest rank-0 record.
    epoch: Option<usize>,
    /// Optimizer steps per epoch, from the newest validation record (`step / epoch`).
    steps_per_epoch: Option<u64>,
    rate: Rate,
    logs: BTreeMap<usize, VecDeque<String>>,
    supervisor_log: VecDeque<String>,
    last_event: Option<String>,
    /// The last supervisor event ended the run (stopped, completed, failed): the status and
    /// the outcome line already say it.
    last_event_final: bool,
    /// The chart's SVG (`None`: nothing to draw), drawn at the first render after a change.
    chart: OnceLock<Option<String>>,
}

/// Steps per second between the first and the newest train record of the current stretch of
/// steps (a record going back in steps, a resume or restart, starts a new stretch).
#[derive(Debug, Clone, Copy, Default)]
struct Rate {
    origin: Option<(f64, u64)>,
    last: Option<(f64, u64)>,
}

impl Rate {
    fn push(&mut self, time: f64, step: u64) {
        if !matches!(self.last, Some((_, s)) if step >= s) {
            self.origin = Some((time, step));
        }
        self.last = Some((time, step));
    }

    fn steps_per_s(&self) -> Option<f64> {
        let ((t0, s0), (t1, s1)) = (self.origin?, self.last?);
        (t1 > t0 && s1 > s0).then(|| (s1 - s0) as f64 / (t1 - t0))
    }
}

impl Card {
    /// A card for `run`, with the planned epochs and step limit of its frozen spec (`spec.toml`;
    /// unknown when it cannot be read).
    pub fn new(run: &Run) -> Card {
        let plan = Plan::read(&run.spec_path());
        Card::from_record(run.record.clone(), plan.epochs, plan.step_limit())
    }

    /// A card for the run of `record`, planned for `epochs_total` epochs and at most `max_steps`
    /// steps when known.
    pub fn from_record(
        record: RunRecord,
        epochs_total: Option<usize>,
        max_steps: Option<u64>,
    ) -> Card {
        Card {
            series: Series {
                label: record.id.clone(),
                records: Vec::new(),
            },
            record,
            epochs_total,
            max_steps,
            digest: MetricDigest::default(),
            epoch: None,
            steps_per_epoch: None,
            rate: Rate::default(),
            logs: BTreeMap::new(),
            supervisor_log: VecDeque::new(),
            last_event: None,
            last_event_final: false,
            chart: OnceLock::new(),
        }
    }

    /// Folds one event; true when anything the card shows changed (metrics of other ranks and
    /// unparsed lines change nothing).
    pub fn apply(&mut self, event: &RunEvent) -> bool {
        match event {
            RunEvent::Status(r) if *r == self.record => false,
            RunEvent::Status(r) => {
                self.record = r.clone();
                true
            }
            RunEvent::Metric(m) if m.rank != 0 => false,
            RunEvent::Metric(m) => {
                self.push_metric(m);
                true
            }
            RunEvent::Log { rank, line } => {
                if *rank == Some(0) && self.steps_per_epoch.is_none() {
                    // The trainer's progress line says it before the first validation does.
                    self.steps_per_epoch = steps_per_epoch_of(line);
                }
                let lines = match rank {
                    Some(r) => self.logs.entry(*r).or_default(),
                    None => &mut self.supervisor_log,
                };
                if lines.len() == LOG_LINES {
                    lines.pop_front();
                }
                lines.push_back(clean_line(line));
                true
            }
            RunEvent::Supervisor(e) => {
                let text = describe(&e.event);
                let changed = self.last_event.as_ref() != Some(&text);
                self.last_event = Some(text);
                self.last_event_final = matches!(
                    e.event,
                    SupervisorEvent::Stopped
                        | SupervisorEvent::Completed
                        | SupervisorEvent::Failed { .. }
                );
                changed
            }
            RunEvent::Unparsed { .. } => false,
        }
    }

    fn push_metric(&mut self, m: &MetricRecord) {
        self.digest.push(m);
        self.epoch = Some(m.epoch);
        match m.kind {
            MetricKind::Train => self.rate.push(m.time, m.step),
            MetricKind::Val if m.epoch > 0 && m.step > 0 => {
                self.steps_per_epoch = Some(m.step / m.epoch as u64);
            }
            _ => {}
        }
        self.series.records.push(m.clone());
        self.chart = OnceLock::new();
    }

    pub fn record(&self) -> &RunRecord {
        &self.record
    }

    /// Whether the run is over (completed, failed or stopped; `%ddp resume` may start it again).
    pub fn is_final(&self) -> bool {
        self.record.status.is_terminal()
    }

    /// The planned number of optimizer steps: epochs × steps per epoch (once an epoch has been
    /// validated), capped by `train.max_steps`.
    pub fn total_steps(&self) -> Option<u64> {
        let by_epochs = self
            .steps_per_epoch
            .zip(self.epochs_total)
            .map(|(spe, n)| spe * n as u64);
        match (by_epochs, self.max_steps) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Done fraction in `[0, 1]`: steps of [`Card::total_steps`], else validated epochs of the
    /// planned ones; 1 once completed.
    pub fn progress(&self) -> Option<f64> {
        if self.record.status == RunStatus::Completed {
            return Some(1.0);
        }
        if let Some(total) = self.total_steps().filter(|&t| t > 0) {
            return Some((self.digest.steps as f64 / total as f64).min(1.0));
        }
        let n = self.epochs_total.filter(|&n| n > 0)?;
        Some((self.digest.epochs_done as f64 / n as f64).min(1.0))
    }

    /// Seconds left at the current rate, while running.
    pub fn eta_s(&self) -> Option<f64> {
        if self.record.status != RunStatus::Running {
            return None;
        }
        let left = self.total_steps()?.saturating_sub(self.digest.steps);
        Some(left as f64 / self.rate.steps_per_s()?)
    }

    /// The card: a multi-line text summary and the HTML card.
    pub fn render(&self) -> Output {
        let r = &self.record;
        let id = &r.id;
        let name = r
            .name
            .as_ref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default();
        let epoch = format!(
            "{}/{}",
            self.epoch.map_or("-".into(), |e| e.to_string()),
            self.epochs_total.map_or("-".into(), |n| n.to_string())
        );
        let step = match self.total_steps() {
            Some(t) => format!("{}/{t}", self.digest.steps),
            None => self.digest.steps.to_string(),
        };
        let progress = self.progress();
        let pct = progress.map(|p| format!("{:.0}%", p * 100.0));
        let lm = self.digest.language_model;
        let (rate_key, rate) = if lm {
            ("tokens/s", format::rate(self.digest.tokens_per_sec))
        } else {
            ("samples/s", format::rate(self.digest.samples_per_sec))
        };
        let lr = self.digest.last_lr.map_or("-".into(), format::lr);
        let timing = if self.is_final() {
            let d = r.started.zip(r.ended).map(|(s, e)| e - s);
            ("duration", format::opt_duration(d))
        } else {
            ("ETA", format::opt_duration(self.eta_s()))
        };

        let mut lines: Vec<(&str, String)> = vec![
            ("run", id.clone()),
            ("experiment", format!("{}{name}", r.experiment)),
            ("status", r.status.to_string()),
        ];
        if lm {
            lines.push(("step", step.clone()));
        } else {
            lines.push(("epoch", format!("{epoch}  step {step}")));
        }
        lines.push(("progress", text_bar(progress)));
        lines.push((rate_key, rate.clone()));
        if lm {
            lines.push(("lr", lr.clone()));
        }
        lines.extend([timing.clone(), ("restarts", r.restarts.to_string())]);
        let devices = self.devices();
        if let Some(d) = &devices {
            lines.push(("devices", d.clone()));
        }
        let cluster = r.runs_on().line();
        if let Some(line) = &cluster {
            lines.push(line.clone());
        }
        let val = self.val();
        if let Some(v) = &val {
            lines.push(("val", v.clone()));
        }
        let timed = self.digest.step_breakdown;
        if let Some(b) = &timed {
            lines.push(("step time", format::breakdown(b)));
        }
        let precision = self.digest.precision.as_ref().map(format::precision);
        if let Some(p) = &precision {
            lines.push(("precision", p.clone()));
        }
        let sync = self
            .digest
            .sync
            .as_ref()
            .map(|s| format::sync(s, self.digest.steps));
        if let Some(s) = &sync {
            lines.push(("sync", s.clone()));
        }
        let outcome = self.outcome();
        if let Some((key, text)) = &outcome {
            lines.push((*key, text.clone()));
        }
        let event = self.event();
        if let Some(e) = event {
            lines.push(("event", e.to_string()));
        }
        let rank_keys: Vec<String> = self.logs.keys().map(|k| format!("rank {k}")).collect();
        for (key, log) in rank_keys.iter().zip(self.logs.values()) {
            lines.push((key.as_str(), log.back().cloned().unwrap_or_default()));
        }
        let mut plain = String::new();
        for (key, value) in &lines {
            let _ = writeln!(plain, "{key:<12}{value}");
        }

        let colour = status_colour(r.status.as_str()).unwrap_or("#6b7280");
        let mut h = String::new();
        let _ = write!(
            h,
            "<div class=\"ddp-card\" style=\"border:1px solid #d1d5db;border-radius:6px;\
             padding:8px 12px;max-width:680px;font-size:13px;line-height:1.6\">\n\
             <div style=\"display:flex;align-items:center;gap:8px;flex-wrap:wrap\">\
             <b>{}</b><span style=\"color:#6b7280\">{}</span>{}</div>\n",
            html_escape(id),
            html_escape(&format!("{}{name}", r.experiment)),
            status_badge(r.status)
        );
        let counted = if lm {
            format!(
                "step {} · {} tokens/s · lr {}",
                html_escape(&step),
                rate,
                lr
            )
        } else {
            format!(
                "epoch {} · step {} · {} samples/s",
                html_escape(&epoch),
                html_escape(&step),
                rate
            )
        };
        let _ = writeln!(
            h,
            "<div>{counted} · {} {} · restarts {}</div>",
            timing.0,
            html_escape(&timing.1),
            r.restarts
        );
        let _ = writeln!(
            h,
            "<div style=\"display:flex;align-items:center;gap:8px\">\
             <div style=\"flex:1\">{}</div><span>{}</span></div>",
            bar(progress.unwrap_or(0.0) * 100.0, colour),
            pct.as_deref().unwrap_or("-")
        );
        if let Some(d) = &devices {
            let _ = writeln!(h, "<div>devices: {}</div>", html_escape(d));
        }
        if let Some((on, _)) = &cluster {
            let _ = writeln!(h, "<div>{on}: {}</div>", cluster_html(r.runs_on()));
        }
        if let Some(v) = &val {
            let _ = writeln!(h, "<div>val {}</div>", html_escape(v));
        }
        if let Some(b) = &timed {
            let share = |s: f64| 100.0 * s / b.step_s;
            let _ = writeln!(
                h,
                "<div>step time {}</div><div>{}</div>",
                html_escape(&format::breakdown(b)),
                stacked_bar(&[
                    (share(b.compute_s), "#2563eb", "compute"),
                    (
                        share(b.comm_exposed_s),
                        "#f59e0b",
                        "communication (exposed)"
                    ),
                    (share(b.data_s), "#8b5cf6", "data"),
                    (share(b.optimizer_s), "#10b981", "optimizer"),
                ])
            );
        }
        if let Some(p) = &precision {
            let _ = writeln!(h, "<div>precision {}</div>", html_escape(p));
        }
        if let Some(s) = &sync {
            let _ = writeln!(h, "<div>sync {}</div>", html_escape(s));
        }
        if let Some((key, text)) = &outcome {
            let body = match r.status {
                RunStatus::Stopped => {
                    format!("resume with <code>%ddp resume {}</code>", html_escape(id))
                }
                _ => format!("{key}: {}", html_escape(text)),
            };
            let _ = writeln!(
                h,
                "<div style=\"color:{colour};font-weight:600\">{body}</div>"
            );
        }
        if let Some(e) = event {
            let _ = writeln!(h, "<div style=\"color:#6b7280\">{}</div>", html_escape(e));
        }
        if let Some(svg) = self.chart() {
            let second = if lm { "perplexity" } else { "accuracy" };
            let alt = format!("loss and {second} of run {id}");
            let _ = writeln!(h, "<div>{}</div>", svg_img(svg, CHART_SIZE.0, &alt));
        }
        let supervisor = ("supervisor".to_string(), &self.supervisor_log);
        let ranks = rank_keys.into_iter().zip(self.logs.values());
        for (who, log) in ranks.chain(std::iter::once(supervisor)) {
            if log.is_empty() {
                continue;
            }
            // The supervisor's notes on the devices are on the devices line already.
            let last = log.iter().rev().find(|l| !r.devices.contains(l.as_str()));
            let summary = match last {
                Some(last) => format!(" · <code>{}</code>", html_escape(&shorten(last, 120))),
                None => String::new(),
            };
            let text: Vec<&str> = log.iter().map(String::as_str).collect();
            let _ = writeln!(
                h,
                "<details><summary>{who}{summary}</summary>{}</details>",
                pre(&text.join("\n"))
            );
        }
        h.push_str("</div>");
        Output::rich(plain, h)
    }

    /// Where the replicas run, in a few words ([`short_devices`]), once the supervisor has
    /// assigned devices.
    fn devices(&self) -> Option<String> {
        let d = &self.record.devices;
        (!d.is_empty()).then(|| short_devices(d, self.record.replicas))
    }

    /// The last supervisor event, unless it only repeats how the run ended.
    fn event(&self) -> Option<&str> {
        let repeats = self.last_event_final && self.is_final();
        self.last_event.as_deref().filter(|_| !repeats)
    }

    /// A language model's last validation: `loss 1.4500  perplexity 4.26  bits/char 2.092`.
    fn val(&self) -> Option<String> {
        let d = &self.digest;
        if !d.language_model {
            return None;
        }
        let loss = d.last_val_loss?;
        let bits = format::bits(d.last_val_bits_per_char, d.last_val_bits_per_byte)
            .map(|b| format!("  {b}"))
            .unwrap_or_default();
        Some(format!(
            "loss {}  perplexity {}{bits}",
            format::loss(Some(loss)),
            format::perplexity(d.last_val_perplexity)
        ))
    }

    /// What ended the run, as a text line: `("test", ...)` (a language model: none, its last
    /// validation is its figure), `("error", ...)`, `("resume", ...)`.
    fn outcome(&self) -> Option<(&'static str, String)> {
        let d = &self.digest;
        match self.record.status {
            RunStatus::Completed if d.language_model => None,
            RunStatus::Completed => Some((
                "test",
                format!(
                    "accuracy {}  loss {}",
                    percent(d.test_accuracy),
                    format::loss(d.test_loss)
                ),
            )),
            RunStatus::Failed => Some((
                "error",
                self.record.error.clone().unwrap_or_else(|| "-".into()),
            )),
            RunStatus::Stopped => Some(("resume", format!("%ddp resume {}", self.record.id))),
            _ => None,
        }
    }

    /// The chart's SVG, drawn once per change of the records.
    fn chart(&self) -> Option<&str> {
        self.chart
            .get_or_init(|| {
                if self.series.records.is_empty() {
                    return None;
                }
                let series = std::slice::from_ref(&self.series);
                plot::plot_runs_svg_sized(series, XAxis::Step, CHART_SIZE).ok()
            })
            .as_deref()
    }
}

/// A run's job or application as the card shows it: its web UI (Spark's) a link.
fn cluster_html(on: ddp_workspaces::runs::run::RunsOn<'_>) -> String {
    let mut h = html_escape(&on.text(false));
    if let Some(ui) = on.ui().filter(|u| u.starts_with("http")) {
        let ui = html_escape(ui);
        let _ = write!(h, " · <a href=\"{ui}\" target=\"_blank\">Spark UI</a>");
    }
    h
}

/// `M` of a trainer progress line `epoch E/N step S/M loss ...` (rank 0's log).
fn steps_per_epoch_of(line: &str) -> Option<u64> {
    let at = if line.starts_with("epoch ") {
        line.find(" step ")? + " step ".len()
    } else {
        return None;
    };
    let rest = &line[at..];
    let (_, total) = rest.split_whitespace().next()?.split_once('/')?;
    total.parse().ok().filter(|&m| m > 0)
}

#[cfg(test)]
mod progress_line_tests {
    #[test]
    fn a_language_models_progress_line_says_no_epochs() {
        assert_eq!(
            super::steps_per_epoch_of("step 20/2000 loss 3.49 lr 0.0008 5398 tokens/s"),
            None
        );
    }

    #[test]
    fn steps_per_epoch_from_the_progress_line() {
        let f = super::steps_per_epoch_of;
        assert_eq!(
            f("epoch 1/3 step 11/113 loss 2.0880 lr 0.002 199 samples/s"),
            Some(113)
        );
        assert_eq!(f("mnist-cnn | rank 0/2 (local 0/2) via torchrun"), None);
        assert_eq!(f("epoch 1/3 step 11 loss"), None);
    }
}
