//! The Run view's Sample pane: the options of the generation, where it stands, and its text cut
//! into rows (the newest in view unless scrolled back).

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget, Wrap};

use super::{SampleState, SampleStatus, rows};
use crate::theme::Theme;

pub fn render(t: Theme, s: &SampleState, area: Rect, buf: &mut Buffer) {
    let note = |text: String, style| Paragraph::new(text).style(style).wrap(Wrap { trim: false });
    match &s.lm {
        None => return note(" Reading spec.toml …".into(), t.dim()).render(area, buf),
        Some(Err(e)) => return note(format!(" {e}"), t.error()).render(area, buf),
        Some(Ok(())) => {}
    }
    let Some(o) = &s.options else {
        let lines = vec![
            Line::from(format!(" Nothing sampled yet (seed {}).", s.seed)),
            Line::from(vec![
                Span::raw(" "),
                Span::styled("p", t.key()),
                Span::raw(" types a prompt and samples; "),
                Span::styled("Enter", t.key()),
                Span::raw(" samples from a newline"),
            ]),
        ];
        return Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .render(area, buf);
    };
    let label = |l: &str| Span::styled(format!("{l} "), t.dim());
    let top_k = match o.top_k {
        0 => "all".to_string(),
        k => k.to_string(),
    };
    let options = Line::from(vec![
        Span::raw(" "),
        label("prompt"),
        Span::raw(format!("{:?}  ", o.prompt)),
        label("seed"),
        Span::raw(format!("{}  ", o.seed)),
        label("tokens"),
        Span::raw(format!("{}  ", o.tokens)),
        label("temperature"),
        Span::raw(format!("{}  ", o.temperature)),
        label("top-k"),
        Span::raw(top_k),
    ]);
    let status = match &s.status {
        SampleStatus::Idle => Span::raw(""),
        SampleStatus::Running => Span::styled(" sampling …", t.ok()),
        SampleStatus::Done(d) if d.stopped => {
            Span::styled(format!(" stopped after {} tokens", d.tokens), t.dim())
        }
        SampleStatus::Done(d) => Span::styled(
            format!(" {} tokens in {:.2} s", d.tokens, d.seconds),
            t.ok(),
        ),
        SampleStatus::Failed(e) => Span::styled(format!(" {e}"), t.error()),
    };
    let head = vec![options, Line::from(status)];
    // The head's lines wrap on a narrow terminal: the rows they take, then a blank row.
    let width = area.width.max(1) as usize;
    let head_rows: usize = head.iter().map(|l| l.width().max(1).div_ceil(width)).sum();
    let [head_area, _, body] = Layout::vertical([
        Constraint::Length(head_rows as u16),
        Constraint::Length(1),
        Constraint::Min(0),
    ])
    .areas(area);
    Paragraph::new(head)
        .wrap(Wrap { trim: false })
        .render(head_area, buf);
    let all = rows(&s.text, (body.width as usize).saturating_sub(2));
    let h = body.height as usize;
    let last_top = all.len().saturating_sub(h);
    let top = if s.follow {
        last_top
    } else {
        s.top.min(last_top)
    };
    let lines: Vec<Line> = all[top..]
        .iter()
        .take(h)
        .map(|r| Line::from(format!(" {r}")))
        .collect();
    Paragraph::new(lines).render(body, buf);
}

#[cfg(test)]
mod tests {
    //! The Run view's Sample pane: a language-model run's tab, the prompt dialog, the options, the
    //! status and the text cut into rows (the newest in view).

    use crate::ui::tests::*;
    use crate::views::run::sample::SampleEvent;
    use ddp_workspaces::present::sample::Sampled;
    use ddp_workspaces::test_util::GPT_SPEC;

    /// Run A as a language model, its spec read.
    fn lm_app(w: u16, h: u16) -> App {
        let mut app = run_app(w, h);
        app.update(Msg::Spec {
            dir: dir("mnist", A),
            text: Ok(GPT_SPEC.into()),
        });
        app
    }

    fn sample_event(app: &mut App, event: SampleEvent) {
        app.update(Msg::Sample {
            dir: dir("mnist", A),
            generation: 1,
            event,
        });
    }

    fn sample_done(app: &mut App, tokens: usize, seconds: f64, stopped: bool) {
        let done = Sampled {
            tokens,
            seconds,
            stopped,
        };
        sample_event(app, SampleEvent::Done(Ok(done)));
    }

    const TABS: &str = " 1 Charts  2 Logs  3 Events  4 Spec  5 Sample";
    /// The tabs and the options of a generation of "KING", 60 columns wide.
    const KING_60: [&str; 3] = [
        TABS,
        r#" prompt "KING"  seed 1337  tokens 500  temperature 0.8"#,
        "top-k 200",
    ];
    const FOOTER: &str = " Tab next pane  p prompt and sample  ? help";

    #[test]
    fn sample_pane_before_during_and_after_a_generation() {
        let mut app = lm_app(60, 20);
        key(&mut app, KeyCode::Char('5'));
        let s = screen(&app, 60, 20);
        assert_rows(
            &s,
            6,
            &[
                TABS,
                " Nothing sampled yet (seed 1337).",
                " p types a prompt and samples; Enter samples from a newline",
                "",
            ],
        );
        assert_eq!(s[19], FOOTER);

        keys(&mut app, "p");
        let s = screen(&app, 60, 20);
        assert_rows(
            &s,
            6,
            &[
                " ┌ Sample ────────────────────────────────────────────────┐",
                " │ The text to continue (\\n: a newline; nothing: a        │",
                " │ newline):                                              │",
                " │                                                        │",
                " │ >                                                      │",
                " │                                                        │",
                " │ Enter samples   Esc cancels                            │",
                " └────────────────────────────────────────────────────────┘",
            ],
        );
        keys(&mut app, "KING");
        assert_has(&screen(&app, 60, 20), " │ > KING ");
        key(&mut app, KeyCode::Enter);
        let s = screen(&app, 60, 20);
        assert_rows(&s, 6, &[&KING_60[..], &[" sampling …", "", ""]].concat());

        // The text as it came, cut at the pane's width, then the figures.
        sample_event(&mut app, SampleEvent::Text("KING".into()));
        sample_event(
            &mut app,
            SampleEvent::Text(":\nWhat say you? ".to_string() + &"ab".repeat(40)),
        );
        sample_done(&mut app, 95, 0.25, false);
        let s = screen(&app, 60, 20);
        let (long, rest) = (
            format!(" What say you? {}", "ab".repeat(22)),
            format!(" {}", "ab".repeat(18)),
        );
        let text = [" 95 tokens in 0.25 s", "", " KING:", &long, &rest, ""];
        assert_rows(&s, 6, &[&KING_60[..], &text].concat());
        assert_eq!(s[19], FOOTER);
    }

    #[test]
    fn only_the_newest_rows_show_until_scrolled_back() {
        let mut app = lm_app(100, 20);
        key(&mut app, KeyCode::Char('p'));
        key(&mut app, KeyCode::Enter);
        let lines: Vec<String> = (0..30).map(|i| format!("line {i}")).collect();
        sample_event(&mut app, SampleEvent::Text(lines.join("\n")));
        sample_done(&mut app, 3, 0.01, true);
        let s = screen(&app, 100, 20);
        assert_rows(
            &s,
            7,
            &[
                r#" prompt "\n"  seed 1337  tokens 500  temperature 0.8  top-k 200"#,
                " stopped after 3 tokens",
                "",
                " line 21",
            ],
        );
        assert_eq!(s[18], " line 29");
        keys(&mut app, "g");
        let s = screen(&app, 100, 20);
        assert_eq!((s[10].as_str(), s[18].as_str()), (" line 0", " line 8"));
    }

    #[test]
    fn the_help_has_the_sample_keys() {
        let mut app = lm_app(120, 50);
        keys(&mut app, "?");
        let s = screen(&app, 120, 50);
        assert_has(&s, "Run: sample");
        for (k, what) in [
            ("1-5", "charts logs events spec sample"),
            ("p", "sample text (language models)"),
            ("Enter", "sample again (next seed)"),
        ] {
            assert_has(&s, &format!("{k:<13}{what}"));
        }
    }
}
