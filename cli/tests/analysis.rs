//! `ddp sweep`, `compare`, `plot` and `export` end to end: the real binary, real supervisors and
//! replicas training a tiny MNIST CNN on the embedded sample (a few steps each).

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use ddp_workspaces::present::analysis::CSV_HEADER;
use ddp_workspaces::spec::Spec;
use ddp_workspaces::sweep::{GridAxis, SweepPlan};
use ddp_workspaces::{Run, RunStatus, SupervisorEvent, Workspace};

/// The small MNIST CNN on 256 samples, stopped after `max_steps` steps.
fn spec(dir: &Path, max_steps: usize) -> PathBuf {
    TestSpec::small_mnist_cnn()
        .name("tiny")
        .set("data.limit_train", 256)
        .set("data.limit_test", 128)
        .set("train.max_steps", max_steps)
        .write(dir)
}

/// Exit code 2 (bad input) and a message containing every one of `wanted`.
fn bad(o: Output, wanted: &[&str]) {
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    for w in wanted {
        assert!(err.contains(w), "stderr lacks {w:?}\n{}", text(&o));
    }
}

fn runs(ws: &Path) -> Vec<Run> {
    let (runs, bad) = Workspace::open(ws).unwrap().runs().unwrap();
    assert!(bad.is_empty(), "{bad:?}");
    runs
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_sweep_of_four_completes_and_compare_lists_the_differing_keys() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let spec = spec(dir.path(), 4);
    let out = ok(run_ddp(
        &ws,
        &[
            "sweep",
            s(&spec),
            "--grid",
            "train.lr=0.001,0.01",
            "--grid",
            "train.batch_size=16,32",
            "--name",
            "grid",
        ],
        Duration::from_secs(240),
    ));
    // A line per finished run, then the comparison table.
    for k in 1..=4 {
        assert!(out.contains(&format!("[{k}/4] ")), "{out}");
    }
    assert_eq!(out.matches(": completed").count(), 4, "{out}");
    let header = out
        .lines()
        .find(|l| l.starts_with("RUN") && l.contains("STATUS"))
        .unwrap_or_else(|| panic!("no comparison table\n{out}"));
    assert!(
        header.contains("train.batch_size") && header.contains("train.lr"),
        "{header}"
    );
    assert!(header.contains("TEST ACC"), "{header}");

    let all = runs(&ws);
    assert_eq!(all.len(), 4);
    let sweep = all[0]
        .record
        .sweep
        .clone()
        .expect("runs carry their sweep id");
    for r in &all {
        assert_eq!(r.record.sweep.as_deref(), Some(sweep.as_str()));
        assert_eq!(r.record.status, RunStatus::Completed, "{:?}", r.record);
        assert!(r.record.name.as_deref().unwrap().starts_with("grid/lr="));
    }
    assert!(ws.join(format!("sweeps/{sweep}.json")).is_file());

    // compare --sweep (by name) as JSON: the four runs, the two keys, every combination once.
    let json = ok(run_ddp(
        &ws,
        &["compare", "--sweep", "grid", "--json"],
        Duration::from_secs(30),
    ));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["sweep"], sweep.as_str());
    assert_eq!(
        v["differing_keys"],
        serde_json::json!(["train.batch_size", "train.lr"])
    );
    let compared = v["runs"].as_array().unwrap();
    assert_eq!(compared.len(), 4);
    let mut combos: Vec<(String, i64)> = compared
        .iter()
        .map(|r| {
            assert_eq!(r["status"], "completed");
            assert!(r["summary"]["test_accuracy"].is_f64(), "{r}");
            assert!(r["summary"]["duration_s"].is_f64(), "{r}");
            (
                r["keys"]["train.lr"].as_f64().unwrap().to_string(),
                r["keys"]["train.batch_size"].as_i64().unwrap(),
            )
        })
        .collect();
    combos.sort();
    assert_eq!(
        combos,
        [
            ("0.001".to_string(), 16),
            ("0.001".to_string(), 32),
            ("0.01".to_string(), 16),
            ("0.01".to_string(), 32)
        ]
    );
    // In combination order (the first --grid slowest).
    assert_eq!(compared[1]["keys"]["train.batch_size"], 32);
    assert_eq!(compared[2]["keys"]["train.lr"], 0.01);

    // Two runs that differ only in the batch size: only that key is listed.
    let id = |i: usize| compared[i]["id"].as_str().unwrap().to_string();
    let two = ok(run_ddp(
        &ws,
        &["compare", &id(0), &id(1)],
        Duration::from_secs(30),
    ));
    let header = two.lines().next().unwrap();
    assert!(
        header.contains("train.batch_size") && !header.contains("train.lr"),
        "{two}"
    );
    assert_eq!(two.lines().count(), 3, "{two}");

    // ls --sweep: the four runs, by id prefix too.
    let ls = ok(run_ddp(
        &ws,
        &["ls", "--sweep", &sweep[..17], "--json"],
        Duration::from_secs(30),
    ));
    assert_eq!(ls.lines().count(), 4, "{ls}");
    for line in ls.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(r["sweep"], sweep.as_str());
    }

    // ls --where on spec keys and the status, sorted by a spec key descending, limited.
    let ls = ok(run_ddp(
        &ws,
        &[
            "ls",
            "--where",
            "spec.train.batch_size = 32 and status = \"completed\" and test_accuracy >= 0",
            "--sort",
            "-spec.train.lr",
            "--json",
        ],
        Duration::from_secs(30),
    ));
    let picked: Vec<serde_json::Value> = ls
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = picked.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["grid/lr=0.01,batch_size=32", "grid/lr=0.001,batch_size=32"],
        "{ls}"
    );
    let limited = ok(run_ddp(
        &ws,
        &["ls", "--sort", "spec.train.lr", "--limit", "1", "--json"],
        Duration::from_secs(30),
    ));
    assert_eq!(limited.lines().count(), 1, "{limited}");
    assert!(limited.contains("grid/lr=0.001"), "{limited}");
    // A mistyped field is named with the nearest one, exit 2.
    bad(
        run_ddp(
            &ws,
            &["ls", "--where", "spec.train.lrr < 1"],
            Duration::from_secs(30),
        ),
        &["no field `spec.train.lrr`; did you mean `spec.train.lr`?"],
    );
}

#[test]
fn max_parallel_one_runs_the_sweep_one_run_at_a_time_after_detach() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let spec = spec(dir.path(), 6);
    let out = ok(run_ddp(
        &ws,
        &[
            "sweep",
            s(&spec),
            "--grid",
            "train.seed=1,2,3",
            "--max-parallel",
            "1",
            "--detach",
            "--json",
        ],
        Duration::from_secs(30),
    ));
    let detached_at = ddp_workspaces::runs::run::now();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let sweep = v["id"].as_str().unwrap().to_string();
    assert_eq!(v["max_parallel"], 1);
    assert_eq!(v["runs"].as_array().unwrap().len(), 3);
    assert!(Path::new(v["manifest"].as_str().unwrap()).is_file());
    let dirs: Vec<PathBuf> = v["dirs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| PathBuf::from(d.as_str().unwrap()))
        .collect();
    wait_for("the sweep to end", Duration::from_secs(240), || {
        dirs.iter()
            .all(|d| Run::load_checked(d).unwrap().record.status.is_terminal())
    });
    let mut done: Vec<Run> = dirs.iter().map(|d| Run::load(d).unwrap()).collect();
    for r in &done {
        assert_eq!(r.record.status, RunStatus::Completed, "{:?}", r.record);
        assert_eq!(r.record.sweep.as_deref(), Some(sweep.as_str()));
    }
    // Never two at once: each run started after the previous one ended.
    done.sort_by(|a, b| a.record.started.partial_cmp(&b.record.started).unwrap());
    for pair in done.windows(2) {
        let (a, b) = (&pair[0].record, &pair[1].record);
        assert!(
            b.started.unwrap() >= a.ended.unwrap(),
            "run {} started at {} before run {} ended at {}",
            b.id,
            b.started.unwrap(),
            a.id,
            a.ended.unwrap()
        );
    }
    // The limit outlived the CLI: the last run started after `ddp sweep --detach` returned.
    assert!(done[2].record.started.unwrap() > detached_at);
    // The runs that waited said why.
    let waited = done
        .iter()
        .filter(|r| {
            r.events().unwrap().iter().any(|e| {
                matches!(&e.event, SupervisorEvent::Queued { waiting_for }
                    if waiting_for.starts_with("waiting for a sweep slot"))
            })
        })
        .count();
    assert!(waited >= 2, "only {waited} run(s) waited for a slot");
    let table = ok(run_ddp(
        &ws,
        &["compare", "--sweep", &sweep],
        Duration::from_secs(30),
    ));
    assert!(
        table.lines().next().unwrap().contains("train.seed"),
        "{table}"
    );
    assert_eq!(table.lines().count(), 4, "{table}");
}

#[test]
fn plot_two_runs_as_svg_and_png_and_export_csv() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let spec = spec(dir.path(), 4);
    let out = ok(run_ddp(
        &ws,
        &[
            "sweep",
            s(&spec),
            "--grid",
            "train.lr=0.001,0.01",
            "--replicas",
            "2",
            "--json",
        ],
        Duration::from_secs(240),
    ));
    // With --json, stdout is only the comparison document.
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["differing_keys"], serde_json::json!(["train.lr"]));
    let all = runs(&ws);
    assert_eq!(all.len(), 2);
    let (a, b) = (&all[0], &all[1]);
    let plots = dir.path().join("plots");
    std::fs::create_dir_all(&plots).unwrap();

    let svg = plots.join("two.svg");
    let out = ok(run_ddp(
        &ws,
        &["plot", &a.record.id, &b.record.id, "-o", s(&svg)],
        Duration::from_secs(60),
    ));
    assert!(out.contains("2 runs"), "{out}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.trim_start().starts_with("<svg") || text.trim_start().starts_with("<?xml"),
        "{}",
        &text[..text.len().min(200)]
    );
    assert!(text.trim_end().ends_with("</svg>"));
    // The legend names each run by its name.
    assert!(text.contains("lr=0.001") && text.contains("lr=0.01"));

    let png = plots.join("two.png");
    ok(run_ddp(
        &ws,
        &["plot", "--sweep", "latest", "-o", s(&png), "--x", "epoch"],
        Duration::from_secs(60),
    ));
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(bytes.len() > 1000);

    // Export: rank 0's records on stdout, one line each after the header.
    let csv = ok(run_ddp(
        &ws,
        &["export", &a.record.id, "--csv"],
        Duration::from_secs(30),
    ));
    let records = a.metrics().unwrap();
    assert!(!records.is_empty());
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], CSV_HEADER);
    assert_eq!(
        CSV_HEADER,
        "time,rank,kind,epoch,step,loss,accuracy,lr,samples_per_sec,samples,world_size"
    );
    assert_eq!(lines.len(), 1 + records.len());
    for (line, m) in lines[1..].iter().zip(&records) {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), 11, "{line}");
        assert_eq!(f[1], "0");
        assert_eq!(f[4], m.step.to_string());
        assert_eq!(f[10], "2");
    }
    assert!(lines.iter().any(|l| l.contains(",test,")), "{csv}");
    // Every rank, into a file.
    let file = dir.path().join("all.csv");
    ok(run_ddp(
        &ws,
        &[
            "export",
            &a.record.id,
            "--csv",
            "--all-ranks",
            "-o",
            s(&file),
        ],
        Duration::from_secs(30),
    ));
    let all_ranks = std::fs::read_to_string(&file).unwrap();
    let rank1 = ddp_workspaces::metrics::read_metrics(a.metrics_path(1)).unwrap();
    assert_eq!(all_ranks.lines().count(), 1 + records.len() + rank1.len());
    assert!(all_ranks.lines().any(|l| l.split(',').nth(1) == Some("1")));

    // A plot file type other than SVG or PNG is refused, and nothing is written.
    let jpg = plots.join("two.jpg");
    bad(
        run_ddp(
            &ws,
            &["plot", &a.record.id, "-o", s(&jpg)],
            Duration::from_secs(30),
        ),
        &["two.jpg", "must end in .svg or .png"],
    );
    assert!(!jpg.exists());
    // export needs its format.
    let o = run_ddp(&ws, &["export", &a.record.id], Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(2), "{}", self::text(&o));
}

#[test]
fn bad_inputs_are_refused_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let spec = spec(dir.path(), 2);
    let sweep = |extra: &[&str]| {
        let mut args = vec!["sweep", s(&spec)];
        args.extend_from_slice(extra);
        run_ddp(&ws, &args, Duration::from_secs(30))
    };
    // An unknown key, named with a suggestion.
    bad(
        sweep(&["--grid", "train.lr=0.1,0.2", "--grid", "train.lrr=1,2"]),
        &["--grid train.lrr=1,2", "did you mean `train.lr`?"],
    );
    // A bad value in one combination fails the whole sweep, naming it.
    bad(
        sweep(&["--grid", "train.seed=1,2", "--grid", "train.lr=0.1,fast"]),
        &["combination 2 of 4", "train.lr=fast"],
    );
    // A bad --set for every run.
    bad(
        sweep(&["--grid", "train.seed=1,2", "--set", "train.epoch=2"]),
        &["train.epoch", "did you mean `train.epochs`"],
    );
    // --grid without values.
    bad(
        sweep(&["--grid", "train.lr"]),
        &["--grid train.lr: no values"],
    );
    bad(
        sweep(&["--grid", "train.lr="]),
        &["--grid train.lr=: no values"],
    );
    bad(sweep(&["--grid", "train.lr=1,,2"]), &["value 2 is empty"]);
    bad(sweep(&[]), &["--grid"]);
    bad(
        sweep(&["--grid", "train.seed=1", "--max-parallel", "0"]),
        &["--max-parallel must be at least 1"],
    );
    // None of that created anything, not even the workspace.
    assert!(!ws.exists(), "a refused sweep created {}", ws.display());

    // Runs to compare (created through the library: queued, never started).
    let w = Workspace::open_or_create(&ws).unwrap();
    let plan = SweepPlan::new(
        &spec,
        vec![],
        vec!["train.seed=1,2".parse::<GridAxis>().unwrap()],
    )
    .unwrap();
    let (sweep_record, created) =
        ddp_workspaces::sweep::create(&w, &plan, None, None, vec![], None).unwrap();
    let lone = w
        .create_run(&Spec::load(&spec, &[]).unwrap(), vec![], None, None)
        .unwrap();
    let id = &created[0].record.id;
    // An unknown run: the closest ids are suggested.
    let typo = format!("{}x", &id[..id.len() - 1]);
    bad(
        run_ddp(
            &ws,
            &["compare", &typo, &lone.record.id],
            Duration::from_secs(30),
        ),
        &[&format!("no run `{typo}`"), "did you mean", id],
    );
    // A sweep id given as a run.
    bad(
        run_ddp(&ws, &["compare", &sweep_record.id], Duration::from_secs(30)),
        &[&format!("use --sweep {}", sweep_record.id)],
    );
    // An unknown sweep, and nothing to compare.
    bad(
        run_ddp(
            &ws,
            &["compare", "--sweep", "nope"],
            Duration::from_secs(30),
        ),
        &["no sweep `nope`"],
    );
    bad(
        run_ddp(&ws, &["ls", "--sweep", "nope"], Duration::from_secs(30)),
        &["no sweep `nope`"],
    );
    bad(
        run_ddp(&ws, &["compare"], Duration::from_secs(30)),
        &["name at least one run"],
    );
    // Queued runs compare fine (no figures yet).
    let table = ok(run_ddp(
        &ws,
        &["compare", "--sweep", &sweep_record.id, &lone.record.id],
        Duration::from_secs(30),
    ));
    assert!(
        table.lines().next().unwrap().contains("train.seed"),
        "{table}"
    );
    assert_eq!(table.matches("queued").count(), 3, "{table}");
    // export of a run without metrics.
    bad(
        run_ddp(&ws, &["export", id, "--csv"], Duration::from_secs(30)),
        &["has no metrics yet"],
    );
    // The plot's file type is checked (before any drawing).
    bad(
        run_ddp(
            &ws,
            &["plot", id, "-o", s(&dir.path().join("x.pdf"))],
            Duration::from_secs(30),
        ),
        &["must end in .svg or .png"],
    );
}

/// `ddp export --kubeflow/--trainjob`: a spec's job on stdout creating nothing, a run's job into
/// a file; bad options refused with exit code 2 and nothing written.
#[test]
fn export_writes_kubernetes_jobs_for_a_spec_and_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let spec = spec(dir.path(), 2);
    let image = [
        "--image",
        "registry.example.com/ddp:1",
        "--volume",
        "shared",
    ];
    let export = |args: &[&str]| {
        let mut all = vec!["export"];
        all.extend_from_slice(args);
        run_ddp(&ws, &all, Duration::from_secs(30))
    };

    // A spec: its ConfigMap and the job on stdout; nothing created, not even the workspace.
    let yaml = ok(export(
        &[
            &[
                s(&spec),
                "--trainjob",
                "--nodes",
                "2",
                "--procs-per-node",
                "2",
            ],
            &image[..],
        ]
        .concat(),
    ));
    assert!(!ws.exists(), "exporting a spec created {}", ws.display());
    for want in [
        "kind: \"ConfigMap\"",
        "    replicas = 4\n",
        "kind: \"TrainJob\"",
        "numNodes: 2\n",
        "numProcPerNode: 2\n",
        "- \"/etc/ddp/spec.toml\"",
        &format!("- \"{}/kubernetes/tiny\"", ws.display()),
        "claimName: \"shared\"",
    ] {
        assert!(yaml.contains(want), "no {want:?} in\n{yaml}");
    }

    // A run: its job into a file, training in the run's folder.
    let text = std::fs::read_to_string(&spec).unwrap();
    let run = ddp_workspaces::test_util::completed_run(&ws, &text);
    let id = run.record.id.clone();
    let file = dir.path().join("job.yaml");
    let o = export(&[&[id.as_str(), "--kubeflow", "-o", s(&file)], &image[..]].concat());
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    ok(o);
    assert!(
        err.contains(&format!("wrote PyTorchJob tiny-{id} for run {id}"))
            && err.contains(&format!(
                "start it with: kubectl apply -f {}",
                file.display()
            )),
        "{err}"
    );
    let yaml = std::fs::read_to_string(&file).unwrap();
    let dir_in_pods = run.dir.display().to_string();
    for want in [
        "kind: \"PyTorchJob\"".to_string(),
        "nprocPerNode: \"1\"\n".to_string(),
        "backoffLimit: 0\n".to_string(),
        format!("- \"{dir_in_pods}/spec.toml\"\n"),
        format!("- \"{dir_in_pods}\"\n"),
        format!("mountPath: \"{}\"\n", ws.display()),
    ] {
        assert!(yaml.contains(&want), "no {want:?} in\n{yaml}");
    }
    assert!(!yaml.contains("Worker"), "{yaml}");

    // Bad options: exit 2, nothing written.
    let bad_file = dir.path().join("bad.yaml");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["nosuch", "--kubeflow", "--image", "i", "--volume", "v"],
            "no run `nosuch`",
        ),
        (
            vec![&id, "--kubeflow", "--image", "i"],
            "--volume CLAIM is required",
        ),
        (
            vec![&id, "--trainjob", "--volume", "v"],
            "--image IMAGE is required",
        ),
        (
            vec![
                &id,
                "--trainjob",
                "--image",
                "i",
                "--volume",
                "v",
                "--nodes",
                "0",
            ],
            "--nodes must be at least 1",
        ),
        (
            vec![
                &id,
                "--kubeflow",
                "--image",
                "i",
                "--volume",
                "v",
                "--nodes",
                "2",
            ],
            "ddp.replicas = 1 does not spread evenly over --nodes 2",
        ),
        (
            vec!["other.toml", "--kubeflow", "--image", "i", "--volume", "v"],
            "spec file other.toml not found",
        ),
        (vec![&id, "--csv", "--kubeflow"], "cannot be used with"),
        (vec![&id, "--csv", "--volume", "v"], "cannot be used with"),
        (
            vec![&id, "--kubeflow", "--all-ranks"],
            "cannot be used with",
        ),
    ];
    for (args, want) in cases {
        bad(
            export(&[&args[..], &["-o", s(&bad_file)]].concat()),
            &[want],
        );
        assert!(!bad_file.exists(), "{args:?} wrote {}", bad_file.display());
    }

    // A run that is still live is refused: only the job may write its folder.
    let mut live = ddp_workspaces::test_util::completed_run(&ws, &text);
    live.update(|r| r.status = RunStatus::Running).unwrap();
    let o = export(
        &[
            &[live.record.id.as_str(), "--kubeflow", "-o", s(&bad_file)],
            &image[..],
        ]
        .concat(),
    );
    assert_eq!(o.status.code(), Some(1), "{}", self::text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is running: stop it first"),
        "{}",
        self::text(&o)
    );
    assert!(!bad_file.exists());
}
