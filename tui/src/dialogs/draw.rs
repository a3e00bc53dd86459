//! Dialogs drawn over the views: centred boxes (help, confirmations, the new-run line, tags, the
//! Sample pane's prompt) and bottom input lines (filter, search).

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Widget, Wrap};

use super::input::InputLine;
use super::{Dialog, new_run_usage};
use crate::keys::{self, Context};
use crate::theme::Theme;
use crate::views::run::Pane;

/// The open `dialog` over `area`; `ctx`: the keys that apply under it (the help shows them when
/// the terminal is too short for every view's).
pub fn render(t: Theme, ctx: Context, dialog: &Dialog, area: Rect, buf: &mut Buffer) {
    match dialog {
        Dialog::Help => render_help(t, ctx, area, buf),
        Dialog::Confirm(c) => {
            let lines = vec![
                Line::from(c.question()),
                Line::from(""),
                key_hints(t, &[("y", "yes"), ("n", "no")]),
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
                Line::from(Span::styled(new_run_usage(), t.dim())),
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
                lines.push(key_hints(
                    t,
                    &[
                        ("Tab", "completes paths"),
                        ("Enter", "starts"),
                        ("Esc", "cancels"),
                    ],
                ));
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
                key_hints(t, &[("Enter", "saves"), ("Esc", "cancels")]),
            ];
            boxed(t, " Tags ", lines, 70, area, buf);
        }
        Dialog::Sample { input } => {
            let lines = vec![
                Line::from("The text to continue (\\n: a newline; nothing: a newline):"),
                Line::from(""),
                input_line(t, "> ", input),
                Line::from(""),
                key_hints(t, &[("Enter", "samples"), ("Esc", "cancels")]),
            ];
            boxed(t, " Sample ", lines, 70, area, buf);
        }
        Dialog::Filter { input, .. } => bottom_line(t, "filter /", input, area, buf),
        Dialog::Search { input } => bottom_line(t, "search /", input, area, buf),
    }
}

/// "key what   key what" with the keys highlighted.
fn key_hints(t: Theme, pairs: &[(&str, &str)]) -> Line<'static> {
    let mut spans = Vec::new();
    for (i, (k, what)) in pairs.iter().enumerate() {
        let gap = if i + 1 < pairs.len() { "   " } else { "" };
        spans.push(Span::styled(k.to_string(), t.key()));
        spans.push(Span::raw(format!(" {what}{gap}")));
    }
    Line::from(spans)
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

fn render_help(t: Theme, ctx: Context, area: Rect, buf: &mut Buffer) {
    let all = [
        ("Runs", Context::Runs),
        ("Run: charts", Context::Run(Pane::Charts)),
        ("Run: logs", Context::Run(Pane::Logs)),
        ("Run: sample", Context::Run(Pane::Sample)),
        ("Compare", Context::Compare),
    ];
    // Every view's keys, each pair once (Runs on the left); on a short terminal, this view's.
    let (mut left, mut right) = help_columns(t, &all, true);
    if left.len().max(right.len()) as u16 + 2 > area.height {
        (left, right) = help_columns(t, &[("Keys of this view", ctx)], false);
    }
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

/// The help's two columns: the first section on the left and the others on the right
/// (`by_section`), or one section's pairs split in two halves.
fn help_columns(
    t: Theme,
    sections: &[(&str, Context)],
    by_section: bool,
) -> (Vec<Line<'static>>, Vec<Line<'static>>) {
    let mut seen: Vec<(&str, &str)> = Vec::new();
    let mut columns: Vec<Vec<Line<'static>>> = Vec::new();
    for (name, ctx) in sections {
        let mut col = vec![Line::from(Span::styled(name.to_string(), t.title()))];
        for pair in keys::help(*ctx) {
            if seen.contains(&pair) {
                continue;
            }
            seen.push(pair);
            col.push(Line::from(vec![
                Span::styled(format!("{:<13}", pair.0), t.key()),
                Span::raw(pair.1.to_string()),
            ]));
        }
        col.push(Line::from(""));
        columns.push(col);
    }
    let hint = Line::from(Span::styled(
        "Events, Spec: ↑ ↓ PgUp PgDn scroll; the mouse wheel scrolls",
        t.dim(),
    ));
    if by_section {
        let mut it = columns.into_iter();
        let left = it.next().unwrap_or_default();
        let mut right: Vec<Line> = it.flatten().collect();
        right.push(hint);
        (left, right)
    } else {
        let mut lines: Vec<Line> = columns.into_iter().flatten().collect();
        lines.push(hint);
        let half = lines.len().div_ceil(2);
        let right = lines.split_off(half);
        (lines, right)
    }
}

#[cfg(test)]
mod tests {
    //! The dialogs: help, confirmations, new run, tags, filter and search.

    use crate::ui::tests::*;

    #[test]
    fn help_lists_the_keys() {
        let mut app = app_with_runs(120, 40);
        keys(&mut app, "?");
        let s = screen(&app, 120, 40);
        assert_has(&s, "┌ Keys (any key closes) ─");
        for (k, what) in [
            ("?", "help"),
            ("Esc", "back"),
            ("q", "quit (runs keep running)"),
            ("Enter", "open run"),
            ("/", "filter"),
            ("Space", "mark for compare"),
            ("s", "stop (asks)"),
            ("D", "devices"),
            ("Tab", "next pane"),
            ("f", "follow"),
            ("n N", "next / previous match"),
        ] {
            assert_has(&s, &format!("{k:<13}{what}"));
        }
        for section in ["Runs", "Run: charts", "Run: logs", "Compare"] {
            assert!(
                s.iter()
                    .any(|l| l.contains(&format!(" {section} "))
                        || l.contains(&format!("│{section} "))),
                "{section}:\n{}",
                text(&s)
            );
        }
        assert_has(&s, "Events, Spec: ↑ ↓ PgUp PgDn scroll");
        // At 80×24 the common keys are still there.
        let s = screen(&app, 80, 24);
        for k in [
            "?            help",
            "Esc          back",
            "q            quit",
            "│Enter        open run",
            "w            the run's sweep",
        ] {
            assert_has(&s, k);
        }
    }

    #[test]
    fn confirm_dialogs_ask_the_question() {
        let mut app = app_with_runs(80, 24);
        keys(&mut app, "s");
        let s = screen(&app, 80, 24);
        assert_has(&s, "┌ Confirm ─");
        assert_has(&s, &format!("│ Stop run {A} (mnist)? The replicas    │"));
        assert_has(
            &s,
            "│ finish their step and exit.                              │",
        );
        assert_has(
            &s,
            "│ y yes   n no                                             │",
        );
        key(&mut app, KeyCode::Char('n'));
        assert_lacks(&screen(&app, 80, 24), "Confirm");
        keys(&mut app, "jd");
        let s = screen(&app, 120, 30);
        assert_has(&s, &format!("│ Delete run {B} (cifar) and its folder │"));
        assert_has(&s, &format!("│ /ws/experiments/cifar/runs/{B}?       │"));
    }

    #[test]
    fn new_run_dialog_idle_busy_and_refused() {
        let mut app = app_with_runs(80, 24);
        keys(&mut app, "n");
        let s = screen(&app, 80, 24);
        assert_has(&s, "┌ New run ─");
        assert_has(
            &s,
            "│ ddp run SPEC [--set KEY=VALUE]... [--replicas N] [--precision P]           │",
        );
        assert_has(&s, "│ Tab completes paths   Enter starts   Esc cancels");
        keys(&mut app, "examples/m");
        key(&mut app, KeyCode::Tab);
        app.update(Msg::Completions {
            typed: "examples/m".into(),
            options: vec!["examples/mlp.toml".into(), "examples/mnist.toml".into()],
        });
        let s = screen(&app, 80, 24);
        assert_has(&s, "│ > examples/m ");
        assert_has(&s, "│ mlp.toml  mnist.toml ");
        keys(&mut app, "nist.toml");
        key(&mut app, KeyCode::Enter);
        let s = screen(&app, 80, 24);
        assert_has(&s, "│ > examples/mnist.toml ");
        assert_has(&s, "│ checking the spec and starting … ");
        app.update(Msg::Done(Outcome::StartRefused(
            "spec examples/mnist.toml: no such file".into(),
        )));
        let s = screen(&app, 80, 24);
        assert_has(&s, "│ spec examples/mnist.toml: no such file ");
        assert_has(&s, "│ nothing was created ");
        assert_lacks(&s, "checking the spec");
    }

    #[test]
    fn tags_filter_and_search_lines() {
        let mut app = app_with_runs(80, 24);
        keys(&mut app, "t");
        let s = screen(&app, 80, 24);
        assert_has(&s, "┌ Tags ─");
        assert_has(&s, &format!("│ Tags of run {A} (separated by spaces):"));
        assert_has(&s, "│ > baseline lr-sweep ");
        assert_has(&s, "│ Enter saves   Esc cancels ");
        key(&mut app, KeyCode::Esc);
        // The filter line replaces the footer and narrows as typed.
        keys(&mut app, "/cif");
        let s = screen(&app, 80, 24);
        assert_eq!(s[23], "filter /cif");
        assert!(s[1].contains("filter /cif"), "{}", s[1]);
        assert_eq!(
            s[3],
            "  completed  cifar/wide   120000-bbbbbb  3/3  ██████ -                50.00%"
        );
        assert_eq!(s[4], "");
        key(&mut app, KeyCode::Enter);
        assert_eq!(
            screen(&app, 80, 24)[23],
            " Enter open run  / filter  c compare marked runs  n new run  ? help"
        );
        // The search line of the Logs pane.
        let mut app = run_app(80, 24);
        keys(&mut app, "2/rank 1");
        assert_eq!(screen(&app, 80, 24)[23], "search /rank 1");
    }
}
