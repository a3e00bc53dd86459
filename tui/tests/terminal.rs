//! `ddp-tui` end to end in a real terminal (tmux): a run started by the `ddp` CLI appears live,
//! its logs show rank 1, `s` `y` stops it (run.json says so), `r` resumes it, `q` gives the shell
//! back.
//!
//! Needs `tmux` (the test command in README installs it). With `DDP_TUI_SCREENS=DIR` the screens
//! seen along the way are written to DIR (they are the ones in docs/tui.md).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use ddp_workspaces::test_util::fixtures::workspace_binaries;

const WAIT: Duration = Duration::from_secs(60);
const PROMPT: &str = "tui-e2e$ ";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn tui_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ddp-tui"))
}

/// The `ddp` CLI beside `ddp-tui`, as `cargo test --workspace` builds it.
fn ddp_bin() -> PathBuf {
    let [ddp] = workspace_binaries(["ddp"]);
    ddp
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A tmux session with a plain shell, killed when dropped.
struct Tmux {
    name: String,
    screens: Option<PathBuf>,
}

impl Tmux {
    fn start(name: &str, cwd: &Path, width: u16, height: u16) -> Tmux {
        let version = Command::new("tmux").arg("-V").output();
        assert!(
            version.as_ref().is_ok_and(|o| o.status.success()),
            "tmux is needed for this test (the README's test command installs it): {version:?}"
        );
        let name = format!("{name}-{}", std::process::id());
        let o = Command::new("tmux")
            .args(["new-session", "-d", "-s", &name, "-x", &width.to_string()])
            .args(["-y", &height.to_string(), "-c"])
            .arg(cwd)
            .args(["env", "-i"])
            .arg(format!(
                "PATH={}",
                std::env::var("PATH").unwrap_or_default()
            ))
            .arg(format!(
                "HOME={}",
                std::env::var("HOME").unwrap_or_default()
            ))
            .args(["TERM=xterm-256color", "NO_COLOR=1", "EDITOR=true"])
            .arg(format!("PS1={PROMPT}"))
            .args(["bash", "--norc", "--noprofile"])
            .output()
            .unwrap();
        assert!(o.status.success(), "tmux new-session: {}", text(&o));
        Tmux {
            name,
            screens: std::env::var_os("DDP_TUI_SCREENS").map(PathBuf::from),
        }
    }

    fn keys(&self, keys: &[&str]) {
        let o = Command::new("tmux")
            .args(["send-keys", "-t", &self.name])
            .args(keys)
            .output()
            .unwrap();
        assert!(o.status.success(), "tmux send-keys: {}", text(&o));
    }

    /// Types a line of text literally, then Enter.
    fn type_line(&self, line: &str) {
        let o = Command::new("tmux")
            .args(["send-keys", "-t", &self.name, "-l", line])
            .output()
            .unwrap();
        assert!(o.status.success(), "tmux send-keys: {}", text(&o));
        self.keys(&["Enter"]);
    }

    fn screen(&self) -> String {
        let o = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Waits until the screen satisfies `ok`; panics with the screen after [`WAIT`].
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            if start.elapsed() > WAIT {
                panic!("waited {WAIT:?} for {what}; the screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Saves the current screen as `name.txt` when screens are being collected.
    fn save(&self, name: &str) {
        if let Some(dir) = &self.screens {
            std::fs::create_dir_all(dir).unwrap();
            let screen = self.screen();
            let trimmed: Vec<&str> = screen.lines().map(str::trim_end).collect();
            std::fs::write(dir.join(format!("{name}.txt")), trimmed.join("\n") + "\n").unwrap();
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.name])
            .output();
    }
}

/// Stops the runs of a workspace when the test ends, passed or not (a detached run outlives
/// the terminal by design; a failed test must not leave one training).
struct StopRuns<'a> {
    ddp: &'a Path,
    ws: &'a Path,
}

impl Drop for StopRuns<'_> {
    fn drop(&mut self) {
        let Ok(exps) = std::fs::read_dir(self.ws.join("experiments")) else {
            return;
        };
        for exp in exps.flatten() {
            for run in std::fs::read_dir(exp.path().join("runs"))
                .into_iter()
                .flatten()
                .flatten()
            {
                let id = run.file_name().to_string_lossy().into_owned();
                let _ = Command::new(self.ddp)
                    .args([
                        "--workspace",
                        self.ws.to_str().unwrap_or_default(),
                        "stop",
                        &id,
                    ])
                    .output();
            }
        }
    }
}

/// Whether the Run view's header (its first line starts with the status word) says `status`.
fn header_says(screen: &str, status: &str) -> bool {
    screen.lines().any(|l| l.starts_with(&format!("{status} ")))
}

fn status_of(run_json: &Path) -> String {
    let text = std::fs::read_to_string(run_json).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    v["status"].as_str().unwrap_or("").to_string()
}

#[test]
fn a_cli_run_appears_live_shows_rank_1_and_is_stopped_from_the_dashboard() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let ddp = ddp_bin();
    let _stop = StopRuns { ddp: &ddp, ws: &ws };
    let tmux = Tmux::start("ddp-tui-e2e", &repo(), 120, 36);
    tmux.wait_for("the shell prompt", |s| s.contains(PROMPT.trim_end()));
    tmux.type_line(&format!(
        "{} --workspace {}",
        tui_bin().display(),
        ws.display()
    ));
    tmux.wait_for("the empty runs view", |s| {
        s.contains("No runs in") && s.contains("ddp run examples/mnist.toml")
    });
    tmux.save("empty");

    // A run started by the CLI, elsewhere: long enough to be stopped while it trains.
    let o = Command::new(&ddp)
        .args(["--workspace", ws.to_str().unwrap(), "run", "--detach"])
        .args(["examples/mnist.toml", "--set", "train.epochs=30"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(o.status.success(), "ddp run --detach: {}", text(&o));
    let screen = tmux.wait_for("the run, running", |s| {
        s.contains("running") && s.contains("mnist-cnn")
    });
    assert!(screen.contains("1 run, 1 live"), "{screen}");
    let run_dir = std::fs::read_dir(ws.join("experiments/mnist-cnn/runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let id = run_dir.file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        screen.contains(&id[9..]),
        "run id {id} not shown:\n{screen}"
    );

    // Open it: the header, then its logs with rank 1's lines.
    tmux.keys(&["Enter"]);
    tmux.wait_for("the run view", |s| {
        s.contains(&id) && s.contains("1 Charts")
    });
    tmux.wait_for("a loss chart with data", |s| {
        s.contains("train") && s.chars().any(|c| ('\u{2801}'..='\u{28ff}').contains(&c))
    });
    tmux.save("run-charts");
    tmux.keys(&["2"]);
    tmux.wait_for("the merged log, following", |s| {
        s.contains("[rank 0] epoch")
    });
    // Rank 1 speaks at start-up: the top of the merged log, then its own tab.
    tmux.keys(&["g"]);
    tmux.wait_for("rank 1 in the merged log", |s| {
        s.contains("[rank 1] mnist-cnn | rank 1/2")
    });
    tmux.keys(&["G", "]", "]"]);
    tmux.wait_for("rank 1's own log", |s| {
        s.contains("mnist-cnn | rank 1/2") && !s.contains("[rank 1]")
    });
    tmux.keys(&["[", "["]);
    tmux.wait_for("the merged log again", |s| s.contains("[rank 0] epoch"));
    tmux.save("run-logs");

    // `e`: the dashboard suspends for $EDITOR (here `true`, which saves at once) and comes back.
    tmux.keys(&["e"]);
    tmux.wait_for("back from the editor", |s| {
        s.contains(&format!("notes of {id} saved"))
    });

    // Stop it from the dashboard: asks first, then run.json says stopped.
    tmux.keys(&["s"]);
    tmux.wait_for("the stop question", |s| {
        s.contains(&format!("Stop run {id}"))
    });
    tmux.save("confirm-stop");
    tmux.keys(&["y"]);
    let start = Instant::now();
    while status_of(&run_dir.join("run.json")) != "stopped" {
        assert!(
            start.elapsed() < WAIT,
            "run.json did not become stopped: {}\n{}",
            status_of(&run_dir.join("run.json")),
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    tmux.wait_for("the header saying stopped", |s| header_says(s, "stopped"));

    // Resume it from the dashboard (from its newest checkpoint), then stop it again.
    tmux.keys(&["r"]);
    tmux.wait_for("the run resumed", |s| s.contains("resumed run"));
    let start = Instant::now();
    while status_of(&run_dir.join("run.json")) != "running" {
        assert!(
            start.elapsed() < WAIT,
            "run.json did not become running again\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    tmux.wait_for("the header saying running", |s| header_says(s, "running"));
    tmux.keys(&["s"]);
    tmux.wait_for("the stop question again", |s| {
        s.contains(&format!("Stop run {id}"))
    });
    tmux.keys(&["y"]);
    let start = Instant::now();
    while status_of(&run_dir.join("run.json")) != "stopped" {
        assert!(
            start.elapsed() < WAIT,
            "run.json did not become stopped again\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    tmux.wait_for("the header saying stopped again", |s| {
        header_says(s, "stopped")
    });
    tmux.keys(&["Escape"]);
    tmux.wait_for("the list saying stopped", |s| {
        s.contains("stopped") && s.contains("0 live")
    });
    tmux.save("runs");

    // The other views and dialogs, as a user meets them.
    tmux.keys(&["?"]);
    tmux.wait_for("the help", |s| s.contains("Keys (any key closes)"));
    tmux.save("help");
    tmux.keys(&["Escape"]);
    tmux.wait_for("the help closed", |s| !s.contains("Keys (any key closes)"));
    tmux.keys(&["D"]);
    tmux.wait_for("the devices", |s| s.contains("cores") && s.contains("mem"));
    tmux.save("devices");
    // Escape and a key sent together read as Alt+key: one at a time.
    tmux.keys(&["Escape"]);
    tmux.wait_for("the runs again", |s| {
        s.contains("RUN") && !s.contains("Devices ─")
    });
    tmux.keys(&["n"]);
    tmux.wait_for("the new-run dialog", |s| s.contains("New run"));
    tmux.type_line("examples/nope.toml --set train.epochs=1");
    tmux.wait_for("the spec error", |s| s.contains("nothing was created"));
    tmux.save("new-run-error");
    tmux.keys(&["Escape"]);
    tmux.wait_for("the runs again", |s| {
        s.contains("Runs") && !s.contains("New run")
    });

    // Quit: the shell is back, and quitting touched nothing.
    tmux.keys(&["q"]);
    tmux.wait_for("the shell prompt again", |s| {
        s.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .is_some_and(|l| l.trim_end() == PROMPT.trim_end())
    });
    assert_eq!(status_of(&run_dir.join("run.json")), "stopped");
}
