//! The charts of the Charts pane and of the Compare view: a run's series (train loss per rank
//! where the ranks differ, val and test figures) and the pair of charts they are drawn in, the
//! loss beside the accuracy or, for a language model, the perplexity.

use std::collections::BTreeMap;

use ddp_workspaces::metrics::MetricRecord;
use ddp_workspaces::present::curves::{Curves, XAxis, curves};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::widgets::Widget;

use super::ChartSettings;
use crate::theme::Theme;
use crate::widgets::chart::{LineChart, Scale, Series, SeriesStyle};

/// The loss and accuracy (a language model: perplexity) charts of a run's records (every
/// rank's).
pub fn render_charts(
    t: Theme,
    metrics: &BTreeMap<usize, Vec<MetricRecord>>,
    settings: &ChartSettings,
    area: Rect,
    buf: &mut Buffer,
) {
    let (loss, second, figure) = run_series(t, metrics, settings.x);
    render_pair(t, &loss, (figure.title(), &second), settings, area, buf);
}

/// What the second chart shows: the accuracy, or a language model's perplexity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    Accuracy,
    Perplexity,
}

impl Figure {
    pub fn title(self) -> &'static str {
        match self {
            Figure::Accuracy => "accuracy",
            Figure::Perplexity => "perplexity",
        }
    }

    /// The perplexity for curves of a language model, else the accuracy.
    pub fn of(c: &Curves) -> Figure {
        if c.language_model {
            Figure::Perplexity
        } else {
            Figure::Accuracy
        }
    }
}

/// The loss chart and a second one (its title and series) side by side (wide) or stacked
/// (narrow).
pub fn render_pair(
    t: Theme,
    loss: &[Series],
    (title, second): (&'static str, &[Series]),
    settings: &ChartSettings,
    area: Rect,
    buf: &mut Buffer,
) {
    let [a, b] = if area.width >= 110 {
        Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(area)
    } else {
        Layout::vertical([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(area)
    };
    let x_title = x_title(settings.x);
    LineChart {
        title: "loss",
        x_title,
        series: loss,
        scale: if settings.log_loss {
            Scale::Log10
        } else {
            Scale::Linear
        },
        smoothing: settings.smoothing_weight(),
        color: t.color,
    }
    .render(a, buf);
    LineChart {
        title,
        x_title,
        series: second,
        scale: Scale::Linear,
        smoothing: settings.smoothing_weight(),
        color: t.color,
    }
    .render(b, buf);
}

pub fn x_title(x: XAxis) -> &'static str {
    match x {
        XAxis::Step => "step",
        XAxis::Epoch => "epoch",
        XAxis::Time => "time (s)",
    }
}

/// The series of one run: train loss per rank where the ranks differ (else rank 0's), val and
/// test loss; val and test accuracy, or a language model's val perplexity.
fn run_series(
    t: Theme,
    metrics: &BTreeMap<usize, Vec<MetricRecord>>,
    x: XAxis,
) -> (Vec<Series>, Vec<Series>, Figure) {
    let empty = Vec::new();
    let rank0 = metrics.get(&0).unwrap_or(&empty);
    let main = curves(rank0, x, Some(0));
    let mut per_rank: Vec<(usize, Vec<(f64, f64)>)> = metrics
        .iter()
        .filter(|(r, _)| **r != 0)
        .map(|(r, recs)| (*r, curves(recs, x, Some(*r)).train_loss))
        .filter(|(_, pts)| !pts.is_empty())
        .collect();
    let differ = per_rank.iter().any(|(_, pts)| *pts != main.train_loss);
    let mut loss = Vec::new();
    if differ {
        loss.push(line(t, "train r0", 0, main.train_loss.clone()));
        for (r, pts) in per_rank.drain(..) {
            loss.push(line(t, &format!("train r{r}"), r + 3, pts));
        }
    } else {
        loss.push(line(t, "train", 0, main.train_loss.clone()));
    }
    let figure = Figure::of(&main);
    let (loss_eval, second) = eval_series(t, &main, 1, "", figure);
    loss.extend(loss_eval);
    (loss, second, figure)
}

/// Val and test series of one run's curves (loss; accuracy or perplexity as `figure` says),
/// coloured from `color`.
pub fn eval_series(
    t: Theme,
    c: &Curves,
    color: usize,
    prefix: &str,
    figure: Figure,
) -> (Vec<Series>, Vec<Series>) {
    let mut loss = vec![Series {
        label: format!("{prefix}val"),
        color: t.series(color),
        points: c.val_loss.clone(),
        style: SeriesStyle::Dots,
    }];
    let mut acc = vec![Series {
        label: format!("{prefix}val"),
        color: t.series(color),
        points: match figure {
            Figure::Accuracy => c.val_acc.clone(),
            Figure::Perplexity => c.val_perplexity.clone(),
        },
        style: SeriesStyle::Dots,
    }];
    if let Some(p) = c.test_loss {
        loss.push(Series {
            label: format!("{prefix}test"),
            color: t.series(color + 1),
            points: vec![p],
            style: SeriesStyle::Dots,
        });
    }
    if let Some(p) = c.test_acc.filter(|_| figure == Figure::Accuracy) {
        acc.push(Series {
            label: format!("{prefix}test"),
            color: t.series(color + 1),
            points: vec![p],
            style: SeriesStyle::Dots,
        });
    }
    (loss, acc)
}

pub fn line(t: Theme, label: &str, color: usize, points: Vec<(f64, f64)>) -> Series {
    Series {
        label: label.to_string(),
        color: t.series(color),
        points,
        style: SeriesStyle::Line,
    }
}
