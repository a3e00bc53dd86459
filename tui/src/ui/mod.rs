//! Drawing: `impl Widget for &App` lays out the header, the current view, the footer and any
//! dialog. Rendering only reads the state (everything shown is derived from it here).

mod compare;
mod devices;
mod dialogs;
mod run;
mod runs;
mod sample;
pub(crate) mod text;

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;
use unicode_width::UnicodeWidthStr;

use crate::app::{App, View};
use crate::keys;

impl Widget for &App {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let [header, body, footer] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Min(0),
            Constraint::Length(1),
        ])
        .areas(area);
        render_header(self, header, buf);
        match self.view {
            View::Runs => runs::render(self, body, buf),
            View::Run => match &self.run {
                Some(v) => run::render(self, v, body, buf),
                None => runs::render(self, body, buf),
            },
            View::Devices => devices::render(self, body, buf),
            View::Compare => match &self.compare {
                Some(c) => compare::render(self, c, body, buf),
                None => runs::render(self, body, buf),
            },
        }
        render_footer(self, footer, buf);
        if let Some(d) = &self.dialog {
            dialogs::render(self, d, area, buf);
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
    ];
    let mut spans = vec![Span::styled(" ddp ", t.title()), Span::raw(" ")];
    for (v, name) in views {
        let available = match v {
            View::Run => app.run.is_some(),
            View::Compare => app.compare.is_some(),
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
mod tests;
