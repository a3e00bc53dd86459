//! The Sample pane: which runs have one, the prompt dialog, generations as effects and their
//! text as events, scrolling.

use super::*;
use crate::views::run::sample::{SampleEvent, SampleStatus};
use ddp_workspaces::commands::SampleOptions;
use ddp_workspaces::present::sample::Sampled;
use ddp_workspaces::test_util::{GPT_SPEC, MLP_SPEC};

/// Run `id` open, its spec read.
fn open_with_spec(app: &mut App, id: &str, spec: &str) {
    open(app, id);
    app.update(Msg::Spec {
        dir: dir(id),
        text: Ok(spec.into()),
    });
}

fn sample(app: &App) -> &crate::views::run::sample::SampleState {
    &app.run.as_ref().unwrap().sample
}

fn text(app: &mut App, generation: u64, piece: &str) {
    app.update(Msg::Sample {
        dir: dir(A),
        generation,
        event: SampleEvent::Text(piece.into()),
    });
}

#[test]
fn a_run_that_is_not_a_language_model_says_so() {
    let mut app = app();
    open(&mut app, B);
    // Before its spec is read.
    assert_eq!(press_char(&mut app, 'p'), []);
    assert_eq!(
        app.notice,
        notice(
            "the run's spec is not read yet: try again in a moment",
            true
        )
    );
    app.update(Msg::Spec {
        dir: dir(B),
        text: Ok(MLP_SPEC.into()),
    });
    let refusal = format!(
        "run {B} is not a language model (model \"mlp\" on data \"synthetic\"): sampling \
         generates text from a model.name = \"gpt\" run on data.name = \"text\""
    );
    for key in ['p', '5'] {
        app.notice = None;
        assert_eq!(press_char(&mut app, key), []);
        assert_eq!(app.notice, notice(&refusal, true), "{key}");
        assert_eq!(pane(&app), Pane::Charts);
        assert_eq!(app.dialog, None);
    }
    // Tab goes round the four panes only.
    for want in [Pane::Logs, Pane::Events, Pane::Spec, Pane::Charts] {
        press(&mut app, KeyCode::Tab);
        assert_eq!(pane(&app), want);
    }
    // A spec that cannot be read is the reason given.
    app.update(Msg::Spec {
        dir: dir(B),
        text: Err("spec.toml: gone".into()),
    });
    press_char(&mut app, 'p');
    assert_eq!(
        app.notice,
        notice("cannot read the run's spec: spec.toml: gone", true)
    );
}

#[test]
fn the_prompt_dialog_starts_a_generation_whose_text_arrives_as_events() {
    let mut app = app();
    open_with_spec(&mut app, A, GPT_SPEC);
    assert_eq!(sample(&app).lm, Some(Ok(())));
    // `5` shows the pane, idle; `p` opens the prompt dialog over it.
    assert_eq!(press_char(&mut app, '5'), []);
    assert_eq!(pane(&app), Pane::Sample);
    press_char(&mut app, '1');
    assert_eq!(press_char(&mut app, 'p'), []);
    assert_eq!(pane(&app), Pane::Sample);
    assert_eq!(
        app.dialog,
        Some(Dialog::Sample {
            input: InputLine::default()
        })
    );
    type_text(&mut app, "KING\\nhe");
    let effects = press(&mut app, KeyCode::Enter);
    let options = |prompt: &str, seed: u64| SampleOptions {
        prompt: prompt.into(),
        seed,
        ..SampleOptions::default()
    };
    assert_eq!(
        effects,
        [Effect::Sample {
            run: run(A),
            generation: 1,
            options: options("KING\nhe", 1337),
        }]
    );
    assert_eq!(app.dialog, None);
    assert_eq!(sample(&app).status, SampleStatus::Running);
    text(&mut app, 1, "KING\nhe");
    text(&mut app, 1, "r");
    // Another run's and an older generation's events are not mixed in.
    app.update(Msg::Sample {
        dir: dir(B),
        generation: 1,
        event: SampleEvent::Text("other run".into()),
    });
    text(&mut app, 0, "stale");
    assert_eq!(sample(&app).text, "KING\nher");
    let done = Sampled {
        tokens: 1,
        seconds: 0.5,
        stopped: false,
    };
    app.update(Msg::Sample {
        dir: dir(A),
        generation: 1,
        event: SampleEvent::Done(Ok(done)),
    });
    assert_eq!(sample(&app).status, SampleStatus::Done(done));

    // Enter: again with the next seed; the dialog keeps the prompt as typed.
    assert_eq!(
        press(&mut app, KeyCode::Enter),
        [Effect::Sample {
            run: run(A),
            generation: 2,
            options: options("KING\nhe", 1338),
        }]
    );
    assert_eq!(sample(&app).text, "");
    press_char(&mut app, 'p');
    assert_eq!(
        app.dialog,
        Some(Dialog::Sample {
            input: InputLine::new("KING\\nhe")
        })
    );
    // Esc leaves it as it was; an empty prompt is a newline.
    press(&mut app, KeyCode::Esc);
    assert_eq!((app.dialog.is_none(), sample(&app).generation), (true, 2));
    press_char(&mut app, 'p');
    app.update(Msg::Key(KeyEvent::new(
        KeyCode::Char('u'),
        KeyModifiers::CONTROL,
    )));
    let effects = press(&mut app, KeyCode::Enter);
    assert_eq!(
        effects,
        [Effect::Sample {
            run: run(A),
            generation: 3,
            options: options("\n", 1338),
        }]
    );
    app.update(Msg::Sample {
        dir: dir(A),
        generation: 3,
        event: SampleEvent::Done(Err("no weights yet".into())),
    });
    assert_eq!(
        sample(&app).status,
        SampleStatus::Failed("no weights yet".into())
    );
    // Tab goes round five panes; leaving the run unwatches it (the runtime stops its sample).
    press(&mut app, KeyCode::Tab);
    assert_eq!(pane(&app), Pane::Charts);
    for _ in 0..4 {
        press(&mut app, KeyCode::Tab);
    }
    assert_eq!(pane(&app), Pane::Sample);
    assert_eq!(press(&mut app, KeyCode::Esc), [Effect::UnwatchRun(dir(A))]);
}

#[test]
fn the_text_scrolls_and_follows_the_end() {
    let mut app = app();
    open_with_spec(&mut app, A, GPT_SPEC);
    press_char(&mut app, 'p');
    press(&mut app, KeyCode::Enter);
    // 40 rows of text on a 30-row terminal (a page of 22 rows).
    let lines: Vec<String> = (0..40).map(|i| format!("line {i}")).collect();
    text(&mut app, 1, &lines.join("\n"));
    let at = |app: &App| (sample(app).top, sample(app).follow);
    assert_eq!(at(&app), (0, true));
    press_char(&mut app, 'k');
    assert_eq!(at(&app), (17, false));
    press_char(&mut app, 'g');
    assert_eq!(at(&app), (0, false));
    // New text does not move a view scrolled back.
    text(&mut app, 1, "\nmore");
    assert_eq!(at(&app), (0, false));
    press_char(&mut app, 'G');
    assert_eq!(at(&app), (19, true));
}
