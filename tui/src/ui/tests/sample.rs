//! The Run view's Sample pane: a language-model run's tab, the prompt dialog, the options, the
//! status and the text cut into rows (the newest in view).

use super::*;
use crate::sample::SampleEvent;
use ddp_workspaces::sample::Sampled;
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
