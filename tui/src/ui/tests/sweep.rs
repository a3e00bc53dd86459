//! The Sweep view on a `TestBackend`: opened from a run of the sweep, its search in words, the
//! leaderboard, the parallel coordinates, and its actions.

use std::collections::BTreeMap;

use ddp_workspaces::sweep::SweepRecord;
use ddp_workspaces::sweep::asha::{Asha, Mode};
use ddp_workspaces::sweep::file::{Method, Metric, Scheduler, Unit};
use ddp_workspaces::sweep::trials::{Search, SearchState, Seen};

use super::*;
use crate::app::{Effect, View};
use crate::views::sweep::SweepRequest;

const SWEEP: &str = "20261104-110000-ssssss";

/// A search of 3 trials (runs A, B, C): A completed at rung 3 epochs, B and C paused at 1.
pub(crate) fn record() -> SweepRecord {
    let search = Search::new(
        Method::Random,
        vec!["train.lr=loguniform:1e-4:1e-1".parse().unwrap()],
        Some(3),
        7,
        Scheduler {
            asha: Asha::new(1, 3, 3, Mode::Min).unwrap(),
            metric: Metric::ValLoss,
            unit: Unit::Epochs,
        },
    )
    .unwrap();
    let mut st = SearchState::new(search);
    let seen = |pairs: &[(u32, Seen)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();
    st.advance(&BTreeMap::new(), 3);
    for (t, run) in st.trials.iter_mut().zip([A, B, C]) {
        t.run = run.into();
    }
    st.advance(&seen(&[(1, Seen::Reached(Some(0.9)))]), 3);
    st.advance(&seen(&[(2, Seen::Reached(Some(0.8)))]), 3);
    st.advance(&seen(&[(0, Seen::Reached(Some(0.3)))]), 3);
    st.advance(&seen(&[(0, Seen::Reached(Some(0.1)))]), 3);
    let text = format!(
        r#"{{"id": "{SWEEP}", "spec": "/s.toml", "grid": [], "created": 1795000000.0, "runs": []}}"#
    );
    let mut r: SweepRecord = serde_json::from_str(&text).unwrap();
    r.search = Some(st);
    r
}

/// The runs view with run A in the sweep, the Sweep view opened on it and its manifest read.
pub(crate) fn sweep_app(w: u16, h: u16) -> App {
    let mut app = app_sized(w, h);
    let mut runs = entries();
    for e in runs.iter_mut() {
        e.run.record.sweep = Some(SWEEP.into());
    }
    app.update(Msg::RunList(RunListEvent::Snapshot {
        entries: runs,
        unreadable: vec![],
    }));
    assert_eq!(
        app.update(Msg::Key(KeyEvent::from(KeyCode::Char('w')))),
        [Effect::WatchSweep(SWEEP.into())]
    );
    app.update(Msg::Sweep {
        id: SWEEP.into(),
        record: Ok(record()),
    });
    app
}

#[test]
fn the_sweep_view_shows_the_search_its_leaderboard_and_parallel_coordinates() {
    let app = sweep_app(120, 36);
    assert_eq!(app.view, View::Sweep);
    let s = screen(&app, 120, 36);
    assert_has(&s, &format!(" Sweep {SWEEP} "));
    assert_has(&s, "completed  2 paused, 1 completed");
    assert_has(&s, "rung 1 (1 epoch): 3 results, promoted t00 (1)");
    assert_has(&s, "budget: 5 of 9 epochs (56 %)");
    assert_has(&s, "#   TRIAL RUN");
    // The best trial first: t00 at rung 3 with 0.1.
    let first = s.iter().position(|l| l.contains("#   TRIAL")).unwrap() + 1;
    assert!(
        s[first].contains("t00") && s[first].contains("0.1000"),
        "{}",
        s[first]
    );
    // The chart's axes are named under it.
    assert!(
        s.iter().any(|l| l.contains("lr") && l.contains("val_loss")),
        "{}",
        text(&s)
    );
}

#[test]
fn the_sweep_view_s_keys_stop_resume_promote_and_open_a_trial() {
    let mut app = sweep_app(120, 36);
    let press = |app: &mut App, c: char| app.update(Msg::Key(KeyEvent::from(KeyCode::Char(c))));
    assert_eq!(
        press(&mut app, 's'),
        [Effect::Sweep(SweepRequest::Stop(SWEEP.into()))]
    );
    assert_eq!(
        press(&mut app, 'r'),
        [Effect::Sweep(SweepRequest::Resume(SWEEP.into()))]
    );
    // The best trial completed: not promotable; the last one (t01) is paused.
    assert_eq!(press(&mut app, 'p'), []);
    assert!(
        app.notice
            .as_ref()
            .unwrap()
            .text
            .contains("only a paused trial")
    );
    press(&mut app, 'G');
    assert_eq!(
        press(&mut app, 'p'),
        [Effect::Sweep(SweepRequest::Promote {
            sweep: SWEEP.into(),
            trial: "t01".into()
        })]
    );
    // Enter opens the selected trial's run (t01 is run B).
    let effects = app.update(Msg::Key(KeyEvent::from(KeyCode::Enter)));
    assert_eq!(effects[0], Effect::UnwatchSweep);
    assert!(
        matches!(&effects[1], Effect::WatchRun(r) if r.record.id == B),
        "{effects:?}"
    );
    assert_eq!(app.view, View::Run);
    // A run of no sweep: told so.
    let mut plain = app_with_runs(120, 36);
    assert_eq!(press(&mut plain, 'w'), []);
    assert!(plain.notice.as_ref().unwrap().text.contains("no sweep"));
}
