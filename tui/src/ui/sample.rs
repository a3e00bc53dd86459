//! The Run view's Sample pane: the options of the generation, where it stands, and its text cut
//! into rows (the newest in view unless scrolled back).

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget, Wrap};

use crate::sample::{SampleState, SampleStatus, rows};
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
