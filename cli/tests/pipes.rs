//! Every `ddp` command that prints ends quietly when its reader has gone away (`ddp ls | head`),
//! as Unix tools do: no panic, no "Broken pipe" message, no error status of its own.

mod common;
use common::*;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use ddp_workspaces::metrics::MetricKind;
use ddp_workspaces::test_util::{MLP_SPEC, completed_run, gpt_run, metric};

/// Runs `ddp ARGS` with its standard output a pipe whose reading end is already closed, so its
/// first write meets a reader that has gone. It must end by SIGPIPE or with success, silently.
fn into_closed_pipe(ws: &Path, args: &[&str]) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut c = ddp(ws);
    c.args(args)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() || o.status.signal() == Some(libc::SIGPIPE),
        "ddp {args:?} into a closed pipe: {:?}\nstderr:\n{stderr}",
        o.status
    );
    assert!(
        !stderr.contains("panicked")
            && !stderr.contains("Broken pipe")
            && !stderr.contains("error"),
        "ddp {args:?} into a closed pipe said:\n{stderr}"
    );
}

#[test]
fn every_printing_command_ends_quietly_when_its_reader_goes_away() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let a = completed_run(ws, MLP_SPEC);
    let b = completed_run(ws, MLP_SPEC);
    for run in [&a, &b] {
        std::fs::create_dir_all(run.dir.join("metrics")).unwrap();
        let lines: String = (1..=3)
            .map(|e| {
                let m = metric(MetricKind::Val, e, e as u64 * 10, 0.5, Some(0.9)).rank(0);
                serde_json::to_string(&m).unwrap() + "\n"
            })
            .collect();
        std::fs::write(run.metrics_path(0), lines).unwrap();
        std::fs::create_dir_all(run.dir.join("logs")).unwrap();
        std::fs::write(run.log_path(0), "line one\nline two\n").unwrap();
    }
    let gpt = gpt_run(ws);
    let (a, b, gpt) = (
        a.record.id.as_str(),
        b.record.id.as_str(),
        gpt.record.id.as_str(),
    );
    for args in [
        &["ls"][..],
        &["ls", "--json"],
        &["show", a],
        &["show", a, "--json"],
        &["logs", a],
        &["logs", a, "-f"],
        &["compare", a, b],
        &["compare", a, b, "--json"],
        &["export", "--csv", a],
        &["tag", a],
        &["sample", gpt, "--tokens", "20"],
        &["--help"],
    ] {
        into_closed_pipe(ws, args);
    }
}

#[test]
fn a_command_whose_output_is_read_whole_still_prints_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let run = completed_run(tmp.path(), MLP_SPEC);
    let out = ok(run_ddp(tmp.path(), &["ls"], Duration::from_secs(60)));
    assert!(out.contains(&run.record.id), "{out}");
}
