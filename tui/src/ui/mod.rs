//! The frame: `impl Widget for &App` lays out the header, the current view, the footer and any
//! dialog. The views and dialogs draw themselves (each folder's `draw.rs`); this draws what is
//! around them. Rendering only reads the state (everything shown is derived from it here).

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;
use unicode_width::UnicodeWidthStr;

use crate::app::{App, View};
use crate::dialogs;
use crate::keys;
use crate::views::{compare, devices, run, runs, sweep};

impl Widget for &App {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let [header, body, footer] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Min(0),
            Constraint::Length(1),
        ])
        .areas(area);
        let t = self.theme;
        render_header(self, header, buf);
        let runs = |buf: &mut Buffer| {
            runs::draw::render(t, &self.runs, &self.workspace, self.now, body, buf);
        };
        match self.view {
            View::Runs => runs(buf),
            View::Run => match &self.run {
                Some(v) => {
                    let listed = self.runs.entry(&v.dir);
                    run::draw::render(t, v, listed, self.now, body, buf);
                }
                None => runs(buf),
            },
            View::Devices => devices::draw::render(t, &self.devices, body, buf),
            View::Compare => match &self.compare {
                Some(c) => compare::draw::render(t, c, body, buf),
                None => runs(buf),
            },
            View::Sweep => match &self.sweep {
                Some(s) => sweep::draw::render(t, s, body, buf),
                None => runs(buf),
            },
        }
        render_footer(self, footer, buf);
        if let Some(d) = &self.dialog {
            dialogs::draw::render(t, self.context(), d, area, buf);
        }
    }
}

fn render_header(app: &App, area: Rect, buf: &mut Buffer) {
    let t = app.theme;
    let views = [
        (View::Runs, "Runs"),
        (View::Run, "Run"),
        (View::Devices, "Devices"),
        (View::Compare, "Compare"),
        (View::Sweep, "Sweep"),
    ];
    let mut spans = vec![Span::styled(" ddp ", t.title()), Span::raw(" ")];
    for (v, name) in views {
        let available = match v {
            View::Run => app.run.is_some(),
            View::Compare => app.compare.is_some(),
            View::Sweep => app.sweep.is_some(),
            _ => true,
        };
        if available {
            spans.push(Span::styled(name, t.tab(app.view == v)));
            spans.push(Span::raw(" "));
        }
    }
    let total = app.runs.entries.len();
    let live = app.runs.live_count();
    spans.push(Span::styled(
        format!(
            " {total} run{}, {live} live  {}",
            if total == 1 { "" } else { "s" },
            app.workspace.display()
        ),
        t.dim(),
    ));
    Line::from(spans).render(area, buf);
}

fn render_footer(app: &App, area: Rect, buf: &mut Buffer) {
    let t = app.theme;
    if let Some(n) = &app.notice {
        let style = if n.error { t.error() } else { t.ok() };
        Line::from(Span::styled(format!(" {}", n.text), style)).render(area, buf);
        return;
    }
    // Whole "key what" pairs only, as many as fit, and always `? help` (the way to the rest).
    let pairs = keys::footer(app.context());
    let cost = |(k, what): &(&str, &str)| k.width() + what.width() + 3;
    let help = pairs.iter().find(|(k, _)| *k == "?").copied();
    let mut room = (area.width as usize)
        .saturating_sub(1)
        .saturating_sub(help.as_ref().map_or(0, cost));
    let mut spans = vec![Span::raw(" ")];
    let mut push = |(k, what): (&'static str, &'static str)| {
        spans.push(Span::styled(k, t.key()));
        spans.push(Span::raw(format!(" {what}  ")));
    };
    let mut help_shown = false;
    for p in pairs {
        if Some(p) == help {
            help_shown = true;
        } else if cost(&p) > room {
            break;
        } else {
            room -= cost(&p);
        }
        push(p);
    }
    if let (Some(h), false) = (help, help_shown) {
        push(h);
    }
    Line::from(spans).style(Style::new()).render(area, buf);
}

#[cfg(test)]
pub(crate) mod tests;
