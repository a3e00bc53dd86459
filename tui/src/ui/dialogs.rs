//! Dialogs drawn over the views: centred boxes (help, confirmations, the new-run line, tags)
//! and bottom input lines (filter, search).

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Widget, Wrap};

use crate::app::App;
use crate::dialog::{Dialog, NEW_RUN_USAGE};
use crate::input::InputLine;
use crate::keys::{self, Context};
use crate::run_view::Pane;
use crate::theme::Theme;

pub fn render(app: &App, dialog: &Dialog, area: Rect, buf: &mut Buffer) {
    let t = app.theme;
    match dialog {
        Dialog::Help => render_help(t, area, buf),
        Dialog::Confirm(c) => {
            let lines = vec![
                Line::from(c.question()),
                Line::from(""),
                Line::from(vec![
                    Span::styled("y", t.key()),
                    Span::raw(" yes    "),
                    Span::styled("n", t.key()),
                    Span::raw(" no"),
                ]),
            ];
            boxed(t, " Confirm ", lines, 60, area, buf);
        }
        Dialog::NewRun {
            input,
            error,
            hint,
            busy,
        } => {
            let mut lines = vec![
                Line::from(Span::styled(format!("ddp run {NEW_RUN_USAGE}"), t.dim())),
                Line::from(""),
                input_line(t, "> ", input),
            ];
            if let Some(h) = hint {
                lines.push(Line::from(Span::styled(h.clone(), t.dim())));
            }
            lines.push(Line::from(""));
            if *busy {
                lines.push(Line::from(Span::styled(
                    "checking the spec and starting …",
                    t.ok(),
                )));
            } else if let Some(e) = error {
                lines.push(Line::from(Span::styled(e.clone(), t.error())));
                lines.push(Line::from(Span::styled("nothing was created", t.dim())));
            } else {
                lines.push(Line::from(vec![
                    Span::styled("Tab", t.key()),
                    Span::raw(" completes paths   "),
                    Span::styled("Enter", t.key()),
                    Span::raw(" starts   "),
                    Span::styled("Esc", t.key()),
                    Span::raw(" cancels"),
                ]));
            }
            boxed(t, " New run ", lines, 90, area, buf);
        }
        Dialog::Tags { run, input } => {
            let lines = vec![
                Line::from(format!(
                    "Tags of run {} (separated by spaces):",
                    run.record.id
                )),
                Line::from(""),
                input_line(t, "> ", input),
                Line::from(""),
                Line::from(vec![
                    Span::styled("Enter", t.key()),
                    Span::raw(" saves   "),
                    Span::styled("Esc", t.key()),
                    Span::raw(" cancels"),
                ]),
            ];
            boxed(t, " Tags ", lines, 70, area, buf);
        }
        Dialog::Filter { input, .. } => bottom_line(t, "filter /", input, area, buf),
        Dialog::Search { input } => bottom_line(t, "search /", input, area, buf),
    }
}

/// The text of an input line with a visible cursor.
fn input_line(t: Theme, prompt: &str, input: &InputLine) -> Line<'static> {
    let chars: Vec<char> = input.text.chars().collect();
    let before: String = chars[..input.cursor.min(chars.len())].iter().collect();
    let at: String = chars
        .get(input.cursor)
        .map_or(" ".into(), |c| c.to_string());
    let after: String = chars.iter().skip(input.cursor + 1).collect();
    Line::from(vec![
        Span::styled(prompt.to_string(), t.key()),
        Span::raw(before),
        Span::styled(at, Style::new().add_modifier(Modifier::REVERSED)),
        Span::raw(after),
    ])
}

fn bottom_line(t: Theme, prompt: &str, input: &InputLine, area: Rect, buf: &mut Buffer) {
    let line = Rect {
        y: area.bottom().saturating_sub(1),
        height: 1.min(area.height),
        ..area
    };
    Clear.render(line, buf);
    input_line(t, prompt, input).render(line, buf);
}

fn boxed(t: Theme, title: &str, lines: Vec<Line>, width: u16, area: Rect, buf: &mut Buffer) {
    let w = width
        .min(area.width.saturating_sub(2))
        .max(10.min(area.width));
    let inner_w = w.saturating_sub(4).max(1) as usize;
    // Lines wrap: count the rows they take.
    let rows: u16 = lines
        .iter()
        .map(|l| (l.width().max(1)).div_ceil(inner_w) as u16)
        .sum();
    let h = (rows + 2).min(area.height);
    let [r] = Layout::horizontal([Constraint::Length(w)])
        .flex(Flex::Center)
        .areas(area);
    let [r] = Layout::vertical([Constraint::Length(h)])
        .flex(Flex::Center)
        .areas(r);
    Clear.render(r, buf);
    Paragraph::new(lines)
        .wrap(Wrap { trim: false })
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(Span::styled(title.to_string(), t.title()))
                .padding(ratatui::widgets::Padding::horizontal(1)),
        )
        .render(r, buf);
}

fn render_help(t: Theme, area: Rect, buf: &mut Buffer) {
    let sections = [
        ("Runs", Context::Runs),
        ("Run: charts", Context::Run(Pane::Charts)),
        ("Run: logs", Context::Run(Pane::Logs)),
        ("Compare", Context::Compare),
    ];
    let mut left = Vec::new();
    let mut right = Vec::new();
    for (i, (name, ctx)) in sections.iter().enumerate() {
        let col = if i == 0 { &mut left } else { &mut right };
        col.push(Line::from(Span::styled(name.to_string(), t.title())));
        for (k, what) in keys::help(*ctx) {
            if i > 0 && ["?", "Esc", "q", "↑/k ↓/j", "PgUp PgDn", "Home/g End/G"].contains(&k) {
                continue;
            }
            if i > 0 && ["s", "r", "d", "t", "e", "n", "D", "Tab", "1-4"].contains(&k) && i != 1 {
                continue;
            }
            col.push(Line::from(vec![
                Span::styled(format!("{k:<13}"), t.key()),
                Span::raw(what.to_string()),
            ]));
        }
        col.push(Line::from(""));
    }
    right.push(Line::from(Span::styled(
        "Events, Spec: ↑ ↓ PgUp PgDn scroll; mouse wheel scrolls everywhere",
        t.dim(),
    )));
    let w = 100.min(area.width);
    let h = (left.len().max(right.len()) as u16 + 2).min(area.height);
    let [r] = Layout::horizontal([Constraint::Length(w)])
        .flex(Flex::Center)
        .areas(area);
    let [r] = Layout::vertical([Constraint::Length(h)])
        .flex(Flex::Center)
        .areas(r);
    Clear.render(r, buf);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(Span::styled(" Keys (any key closes) ", t.title()));
    let inner = block.inner(r);
    block.render(r, buf);
    let [a, b] =
        Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)]).areas(inner);
    Paragraph::new(left).render(a, buf);
    Paragraph::new(right).render(b, buf);
}
