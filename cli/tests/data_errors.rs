//! Bad data through the real `ddp run`: data the replicas read whole (a text, token files, a
//! table) is refused before anything is created, with the replicas' own message; data only a
//! replica finds bad (a truncated image, a token id out of range) fails the run with that
//! replica's error line, exit code 2 and no empty summary.

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use ddp_workspaces::{Run, RunStatus, SupervisorEvent, Workspace};

const LIMIT: Duration = Duration::from_secs(120);

fn write(path: &Path, bytes: impl AsRef<[u8]>) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
    path.to_path_buf()
}

/// `ddp run SPEC --replicas 1` in the workspace `ws`.
fn run(ws: &Path, spec: &Path) -> Output {
    let mut c = ddp(ws);
    c.arg("run").arg(spec).args(["--replicas", "1"]);
    output(c, LIMIT)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A spec named `name` whose `[data]` section is `data` (plus `extra` sections).
fn spec(dir: &Path, name: &str, model: &str, data: &str, extra: &str) -> PathBuf {
    write(
        &dir.join(format!("{name}.toml")),
        format!("name = \"{name}\"\n[model]\n{model}\n[data]\n{data}\n{extra}"),
    )
}

/// A small GPT counted in 4 steps, one replica, no restarts.
const GPT: &str = "name = \"gpt\"\nlayers = 1\nheads = 2\nembd = 32\nblock = 8";
const STEPS: &str =
    "[train]\nsteps = 4\nbatch_size = 2\n[restart]\nmax_restarts = 2\nbackoff_s = 0.1\n";

/// Refused as bad input before anything is created: exit code 2, every needle in stderr, and no
/// workspace (so no experiment and no run folder) at `ws`.
fn refused(ws: &Path, spec: &Path, needles: &[&str]) {
    let o = run(ws, spec);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    for n in needles {
        assert!(stderr(&o).contains(n), "expected {n:?} in\n{}", text(&o));
    }
    assert!(!ws.exists(), "{} was created:\n{}", ws.display(), text(&o));
}

#[test]
fn data_read_whole_is_checked_before_the_run_folder_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    // A text that is not UTF-8, for the char tokenizer: the byte and its offset.
    let mut bytes = "To be, or not to be: that is the question.\n"
        .repeat(20)
        .into_bytes();
    bytes[100] = 0xff;
    let corpus = write(&dir.path().join("corpus.txt"), &bytes);
    let text_data = format!("name = \"text\"\npath = \"{}\"", corpus.display());
    let s = spec(dir.path(), "bad-text", GPT, &text_data, STEPS);
    refused(
        &ws,
        &s,
        &[&format!(
            "{}: not a UTF-8 text file: the byte 0xff at offset 100 is not valid UTF-8; use \
             tokenizer = \"byte\" to train on its bytes",
            corpus.display()
        )],
    );
    // A CSV table with a ragged row: the file and the line.
    let mut csv = String::from("label,a,b\n");
    for i in 0..40 {
        csv.push_str(&format!("{},{}.5,{}\n", i % 2, i, i * 2));
    }
    csv.push_str("1,7.5\n");
    let table = write(&dir.path().join("table.csv"), csv);
    let s = spec(
        dir.path(),
        "ragged",
        "name = \"mlp\"",
        &format!(
            "name = \"csv\"\npath = \"{}\"\ntarget = \"label\"",
            table.display()
        ),
        "[train]\nepochs = 1\n",
    );
    refused(
        &ws,
        &s,
        &[&format!(
            "{}: line 42 has 2 fields but the header has 3 columns",
            table.display()
        )],
    );

    // Token files: a length that is not a multiple of the id size, found without reading ids.
    let tokens = dir.path().join("tokens");
    write(&tokens.join("train.bin"), vec![1u8; 101]);
    write(&tokens.join("val.bin"), vec![1u8; 100]);
    let s = spec(
        dir.path(),
        "odd-tokens",
        GPT,
        &format!(
            "name = \"tokens\"\npath = \"{}\"\nvocab_size = 300",
            tokens.display()
        ),
        STEPS,
    );
    refused(
        &ws,
        &s,
        &[&format!(
            "{}: the token file has 101 bytes, not a multiple of 2 (u16 ids)",
            tokens.join("train.bin").display()
        )],
    );
    // A sweep over such data creates nothing either.
    let mut c = ddp(&ws);
    c.arg("sweep")
        .arg(&s)
        .args(["--grid", "train.lr=0.1,0.01", "--replicas", "1"]);
    let o = output(c, LIMIT);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(stderr(&o).contains("not a multiple of 2"), "{}", text(&o));
    assert!(!ws.exists());
}

fn only_run(ws: &Path) -> Run {
    let (runs, bad) = Workspace::open(ws).unwrap().runs().unwrap();
    assert!(bad.is_empty());
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs.into_iter().next().unwrap()
}

/// A run that failed on `rank 0`'s data error: exit code 2, its error line on stderr and in the
/// run's record, no results table, no restart although restarts were left.
fn failed_on_data(o: &Output, ws: &Path, needles: &[&str]) -> Run {
    assert_eq!(o.status.code(), Some(2), "{}", text(o));
    let run = only_run(ws);
    let r = &run.record;
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.exit_codes.get(&0), Some(&2));
    assert_eq!(r.restarts, 0, "a data error is not restarted");
    let error = r.error.clone().unwrap_or_default();
    let log = std::fs::read_to_string(run.log_path(0)).unwrap();
    let line = log
        .lines()
        .rev()
        .find(|l| l.starts_with("ddp-trainer: "))
        .unwrap_or_else(|| panic!("no error line in\n{log}"));
    assert_eq!(
        error,
        format!("rank 0 exited with code 2, a configuration or data error (not restarted): {line}")
    );
    for n in needles {
        assert!(line.contains(n), "expected {n:?} in {line:?}");
    }
    assert_eq!(
        stderr(o).lines().last(),
        Some(format!("ddp: run {} failed: {error}", r.id).as_str()),
        "{}",
        text(o)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !out.contains("accuracy") && !out.contains("perplexity") && !out.contains("status"),
        "no results table:\n{}",
        text(o)
    );
    let events: Vec<SupervisorEvent> = run.events().unwrap().into_iter().map(|e| e.event).collect();
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, SupervisorEvent::Restarting { .. })),
        "{events:?}"
    );
    run
}

#[test]
fn a_replicas_data_error_is_the_runs_error() {
    let dir = tempfile::tempdir().unwrap();
    // An image folder of 2 classes × 4 shipped digits (2 × 2 to test), one PNG cut short.
    let shipped = repo().join("examples/data/mnist-png");
    let pngs = dir.path().join("pngs");
    for (part, n) in [("train", 4), ("test", 2)] {
        for class in ["0", "1"] {
            let mut files: Vec<PathBuf> = std::fs::read_dir(shipped.join(part).join(class))
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            files.sort();
            for f in &files[..n] {
                let to = pngs.join(part).join(class).join(f.file_name().unwrap());
                write(&to, std::fs::read(f).unwrap());
            }
        }
    }
    let bad = std::fs::read_dir(pngs.join("train/1"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .min()
        .unwrap();
    let bytes = std::fs::read(&bad).unwrap();
    std::fs::write(&bad, &bytes[..bytes.len() - 30]).unwrap();
    let s = spec(
        dir.path(),
        "cut-png",
        "name = \"mnist-cnn\"",
        &format!(
            "name = \"image-folder\"\npath = \"{}\"\ncache = \"memory\"",
            pngs.display()
        ),
        "[train]\nepochs = 1\nbatch_size = 4\n[restart]\nmax_restarts = 2\nbackoff_s = 0.1\n",
    );
    let ws = dir.path().join("ws");
    let o = run(&ws, &s);
    let failed = failed_on_data(
        &o,
        &ws,
        &[&format!("{}: cannot be decoded as PNG", bad.display())],
    );
    // `ddp show` says it too.
    let mut c = ddp(&ws);
    c.args(["show", &failed.record.id]);
    let shown = output(c, LIMIT);
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains(&format!(
            "failed: {}",
            failed.record.error.as_deref().unwrap()
        )),
        "{}",
        text(&shown)
    );

    // A token id outside the vocabulary: only a replica reads the ids.
    let tokens = dir.path().join("tokens");
    let ids: Vec<u8> = (0..400u16)
        .map(|i| if i == 150 { 12 } else { i % 10 })
        .flat_map(u16::to_le_bytes)
        .collect();
    write(&tokens.join("train.bin"), &ids);
    write(&tokens.join("val.bin"), &ids[..200]);
    let s = spec(
        dir.path(),
        "bad-id",
        GPT,
        &format!(
            "name = \"tokens\"\npath = \"{}\"\nvocab_size = 10",
            tokens.display()
        ),
        STEPS,
    );
    let ws = dir.path().join("ws-tokens");
    let o = run(&ws, &s);
    failed_on_data(
        &o,
        &ws,
        &[&format!(
            "{}: token 150 has id 12, not below vocab_size = 10",
            tokens.join("train.bin").display()
        )],
    );
}
