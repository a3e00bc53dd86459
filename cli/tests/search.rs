//! Scheduled searches end to end (`ddp sweep --scheduler asha`): the real binary, its driver
//! process, real supervisors and replicas training a small MNIST CNN on the embedded sample.

mod common;
use common::*;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use ddp_workspaces::actions::search::driver_pid;
use ddp_workspaces::sweep::SweepRecord;
use ddp_workspaces::sweep::trials::{SearchState, SearchStatus, TrialState};
use ddp_workspaces::{Run, RunStatus, SupervisorEvent, Workspace};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The search's state in its manifest.
fn state(ws: &Path, id: &str) -> SearchState {
    SweepRecord::load(ws, id).unwrap().search.unwrap()
}

/// What the search's drivers said.
fn driver_log(ws: &Path, id: &str) -> String {
    std::fs::read_to_string(ddp_workspaces::actions::search::driver_log(ws, id)).unwrap_or_default()
}

/// Waits until the search's state satisfies `done`; on a timeout, panics with the state and
/// the drivers' log.
fn wait_search(
    ws: &Path,
    id: &str,
    what: &str,
    limit: Duration,
    done: impl Fn(&SearchState) -> bool,
) {
    let start = std::time::Instant::now();
    loop {
        let st = state(ws, id);
        if done(&st) {
            return;
        }
        if start.elapsed() > limit {
            panic!(
                "timed out after {limit:?} waiting for {what}\n{st:#?}\ndriver log:\n{}",
                driver_log(ws, id)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn bad(o: Output, wanted: &[&str]) {
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    for w in wanted {
        assert!(err.contains(w), "stderr lacks {w:?}\n{}", text(&o));
    }
}

/// Six random trials with ASHA (rungs 1 and 3 epochs, eta 3), two at a time. The driver is
/// killed once a trial has paused and started again with `sweep resume`; the search is then
/// stopped and resumed; it completes: every trial has its rung-1 result, the trials in the top
/// third went on to 3 epochs in the same run folder (paused, then resumed), the others stayed
/// paused with a checkpoint and no final model.
#[test]
fn an_asha_search_pauses_promotes_and_survives_its_driver_being_killed_and_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let spec = TestSpec::small_mnist_cnn()
        .name("asha")
        .set("data.limit_train", 320)
        .set("data.limit_test", 64)
        .set("data.val_fraction", 0.2)
        .set("train.log_every", 4)
        .write(dir.path());
    let out = ok(run_ddp(
        &ws,
        &[
            "sweep",
            s(&spec),
            "--param",
            "train.lr=loguniform:1e-4:3e-2",
            "--param",
            "train.batch_size=choice:16,32",
            "--trials",
            "6",
            "--seed",
            "3",
            "--scheduler",
            "asha",
            "--metric",
            "val_accuracy",
            "--max-budget",
            "3",
            "--max-parallel",
            "2",
            "--detach",
            "--json",
        ],
        Duration::from_secs(60),
    ));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(v["search"]["search"]["trials"], 6);
    // The driver: killed once a trial paused; the search stays `running`, its trials in flight
    // go on under their supervisors, and `sweep show` says nobody drives it.
    wait_search(&ws, &id, "a paused trial", Duration::from_secs(120), |st| {
        st.trials.iter().any(|t| t.state == TrialState::Paused)
    });
    let pid = driver_pid(&ws, &id).unwrap().expect("the driver runs");
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    wait_for("the killed driver's lock", Duration::from_secs(10), || {
        driver_pid(&ws, &id).unwrap().is_none()
    });
    let shown = ok(run_ddp(
        &ws,
        &["sweep", "show", &id],
        Duration::from_secs(30),
    ));
    assert!(shown.contains("running, no driver"), "{shown}");
    assert_eq!(state(&ws, &id).status, SearchStatus::Running);
    let resumed = ok(run_ddp(
        &ws,
        &["sweep", "resume", &id],
        Duration::from_secs(30),
    ));
    assert!(resumed.contains("resumed: driver pid"), "{resumed}");
    // A second driver is refused while one runs.
    let twice = run_ddp(&ws, &["sweep", "resume", &id], Duration::from_secs(30));
    assert_eq!(twice.status.code(), Some(1), "{}", text(&twice));
    assert!(
        text(&twice).contains("its driver is process"),
        "{}",
        text(&twice)
    );
    // Stopped while trials are in flight: they checkpoint and stop, the search is `stopped`.
    wait_for("a trial in flight", Duration::from_secs(60), || {
        let st = state(&ws, &id);
        st.status == SearchStatus::Running
            && st
                .trials
                .iter()
                .any(|t| !t.run.is_empty() && t.state == TrialState::Running)
    });
    let stopped = ok(run_ddp(
        &ws,
        &["sweep", "stop", &id],
        Duration::from_secs(200),
    ));
    assert!(stopped.contains("stopped:"), "{stopped}");
    let st = state(&ws, &id);
    if st.status == SearchStatus::Stopped {
        let again = run_ddp(&ws, &["sweep", "stop", &id], Duration::from_secs(30));
        assert!(text(&again).contains("already stopped"), "{}", text(&again));
        ok(run_ddp(
            &ws,
            &["sweep", "resume", &id],
            Duration::from_secs(30),
        ));
    }
    wait_search(
        &ws,
        &id,
        "the search to complete",
        Duration::from_secs(300),
        |st| st.status == SearchStatus::Completed,
    );
    let st = state(&ws, &id);
    assert_eq!(st.trials.len(), 6);
    assert!(
        st.trials.iter().all(|t| t
            .results
            .first()
            .is_some_and(|r| r.budget == 1 && r.value.is_some())),
        "{st:#?}\n{}",
        driver_log(&ws, &id)
    );
    // At least the top third of rung 1 went on; a promoted trial trained on in its own folder.
    let promoted = &st.promoted[0];
    assert!(promoted.len() >= 2, "{st:#?}\n{}", driver_log(&ws, &id));
    let ws_handle = Workspace::open(&ws).unwrap();
    for t in &st.trials {
        let run = Run::load(&ws_handle.run(&t.run).unwrap().dir).unwrap();
        let events: Vec<SupervisorEvent> =
            run.events().unwrap().into_iter().map(|e| e.event).collect();
        match t.state {
            TrialState::Completed => {
                assert_eq!(run.record.status, RunStatus::Completed);
                assert!(run.dir.join("model.safetensors").is_file());
                assert_eq!(t.last().unwrap().budget, 3);
                assert!(promoted.contains(&t.number), "{t:?}");
                assert!(
                    events
                        .iter()
                        .any(|e| matches!(e, SupervisorEvent::Paused { epoch: 1, .. })),
                    "{events:?}"
                );
                assert!(
                    events
                        .iter()
                        .any(|e| matches!(e, SupervisorEvent::Started { resume: true, .. })),
                    "{events:?}"
                );
            }
            TrialState::Paused => {
                assert_eq!(run.record.status, RunStatus::Paused);
                assert!(!run.dir.join("model.safetensors").exists());
                assert!(
                    run.dir
                        .join("checkpoints")
                        .read_dir()
                        .unwrap()
                        .next()
                        .is_some()
                );
            }
            other => panic!(
                "trial {} ended {other:?}: {st:#?}\n{}",
                t.number,
                driver_log(&ws, &id)
            ),
        }
    }
    let (used, full) = st.budget_used();
    assert!(used < full, "{used} of {full}");
    // `sweep show`: the leaderboard, best first, and the rungs.
    let shown = ok(run_ddp(
        &ws,
        &["sweep", "show", &id],
        Duration::from_secs(30),
    ));
    let best = st.leaderboard()[0];
    assert!(
        shown.contains(&format!("budget: {used} of {full} epochs")),
        "{shown}"
    );
    assert!(shown.contains("rung 1 (1 epoch): 6 results"), "{shown}");
    let first_row = shown
        .lines()
        .skip_while(|l| !l.starts_with('#'))
        .nth(1)
        .unwrap();
    assert!(
        first_row.contains(&best.run) && first_row.contains("completed"),
        "{shown}"
    );
    // Promoted by hand after the search completed: the best paused trial trains on to the last
    // rung, and the search, going on for it, completes again.
    let best_paused = st
        .leaderboard()
        .into_iter()
        .find(|t| t.state == TrialState::Paused)
        .map(|t| t.number)
        .unwrap();
    let name = format!("t{best_paused:02}");
    let said = ok(run_ddp(
        &ws,
        &["sweep", "promote", &id, &name],
        Duration::from_secs(30),
    ));
    assert!(said.contains("trains on to 3"), "{said}");
    wait_search(
        &ws,
        &id,
        "the hand-promoted trial to complete",
        Duration::from_secs(120),
        |st| {
            st.status == SearchStatus::Completed
                && st.trials[best_paused as usize].state == TrialState::Completed
        },
    );
    let st = state(&ws, &id);
    assert!(st.promoted[0].contains(&best_paused), "{st:#?}");
    let refused = run_ddp(
        &ws,
        &["sweep", "promote", &id, &name],
        Duration::from_secs(30),
    );
    assert!(
        text(&refused).contains("only a paused trial can be promoted"),
        "{}",
        text(&refused)
    );
    // The trials are the sweep's runs for every view.
    let listed = ok(run_ddp(
        &ws,
        &[
            "ls",
            "--sweep",
            &id,
            "--where",
            "status = \"paused\"",
            "--json",
        ],
        Duration::from_secs(30),
    ));
    let paused = st
        .trials
        .iter()
        .filter(|t| t.state == TrialState::Paused)
        .count();
    assert_eq!(listed.lines().count(), paused, "{listed}");
    for line in listed.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(r["status"], "paused", "{line}");
    }
}

/// Bad searches are refused with exit 2 before anything exists.
#[test]
fn bad_searches_are_refused_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let spec = TestSpec::small_mnist_cnn().write(dir.path());
    let sweep = |extra: &[&str]| {
        let mut args = vec!["sweep", s(&spec)];
        args.extend_from_slice(extra);
        run_ddp(&ws, &args, Duration::from_secs(30))
    };
    bad(
        sweep(&["--param", "train.lrr=uniform:0.1:0.2", "--trials", "2"]),
        &["no such spec key `train.lrr`", "did you mean `train.lr`?"],
    );
    bad(
        sweep(&["--param", "train.lr=loguniform:0:0.1", "--trials", "2"]),
        &["loguniform needs positive bounds"],
    );
    bad(
        sweep(&["--param", "train.lr=uniform:0.1:0.2"]),
        &["a random search needs --trials N"],
    );
    bad(
        sweep(&[
            "--param",
            "train.lr=uniform:0.001:0.002",
            "--trials",
            "2",
            "--scheduler",
            "asha",
            "--set",
            "data.val_fraction=0",
        ]),
        &["data.val_fraction above 0"],
    );
    bad(
        sweep(&[
            "--grid",
            "train.lr=0.1,0.2",
            "--scheduler",
            "asha",
            "--min-budget",
            "2",
            "--max-budget",
            "1",
        ]),
        &["1 <= min <= max"],
    );
    let file = dir.path().join("sweep.toml");
    std::fs::write(
        &file,
        "[search]\nmethod = \"random\"\nparams = { \"train.lr\" = { uniform = [0.1, 0.2] } }\n",
    )
    .unwrap();
    bad(
        run_ddp(
            &ws,
            &["sweep", s(&spec), "--file", s(&file)],
            Duration::from_secs(30),
        ),
        &["sweep.toml", "trials"],
    );
    assert!(!ws.exists(), "a refused search created the workspace");
    let o = run_ddp(&ws, &["sweep", "show", "nosuch"], Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// A driver that dies after creating a trial's run and before starting it (fault injected)
/// leaves a queued run nobody supervises; the next driver starts it once it has waited
/// `ORPHAN_AFTER`, and the search completes.
#[test]
fn a_trial_whose_driver_died_before_starting_it_is_started_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let spec = TestSpec::small_mnist_cnn()
        .name("orphan")
        .set("data.limit_train", 160)
        .set("data.limit_test", 32)
        .set("data.val_fraction", 0.2)
        .write(dir.path());
    let mut c = ddp(&ws);
    c.env(
        ddp_workspaces::actions::search::driver::CRASH_AFTER_CREATE,
        "1",
    );
    c.args([
        "sweep",
        s(&spec),
        "--param",
        "train.lr=loguniform:1e-4:1e-2",
        "--trials",
        "2",
        "--scheduler",
        "asha",
        "--max-budget",
        "1",
        "--detach",
        "--json",
    ]);
    let v: serde_json::Value =
        serde_json::from_str(&ok(output(c, Duration::from_secs(60)))).unwrap();
    let id = v["id"].as_str().unwrap().to_string();
    wait_search(
        &ws,
        &id,
        "the first trial's run",
        Duration::from_secs(60),
        |st| st.trials.first().is_some_and(|t| !t.run.is_empty()),
    );
    wait_for("the crashed driver's lock", Duration::from_secs(10), || {
        driver_pid(&ws, &id).unwrap().is_none()
    });
    let orphan = state(&ws, &id).trials[0].run.clone();
    let run = Workspace::open(&ws).unwrap().run(&orphan).unwrap();
    assert_eq!(run.record.status, RunStatus::Queued);
    assert!(run.record.supervisor.is_none());
    ok(run_ddp(
        &ws,
        &["sweep", "resume", &id],
        Duration::from_secs(30),
    ));
    wait_search(
        &ws,
        &id,
        "the search to complete",
        Duration::from_secs(120),
        |st| st.status == SearchStatus::Completed,
    );
    let st = state(&ws, &id);
    assert!(
        st.trials.iter().all(|t| t.state == TrialState::Completed),
        "{st:#?}"
    );
    assert!(driver_log(&ws, &id).contains("was never started: starting it"));
}
