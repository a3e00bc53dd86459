//! The text renderings of runs that every front end shows the same way: the `ddp ls` table, what
//! `ddp show` prints, the `ddp compare` table. Each function returns data or a string and prints
//! nothing; the `ddp` CLI prints them as they are and the Jupyter kernel uses them as the
//! `text/plain` of its outputs (and [`Table`] as the cells of its HTML tables).
//!
//! The functions read what the run folder holds beyond its record (rank 0's metrics, tags, the
//! frozen spec, notes) like [`Summary::of`] does; they never fail (what cannot be read is shown
//! as `-` or left out).
//!
//! Layout:
//! - [`Table`]: a header and rows of cells, and its plain text form ([`Table::to_text`]).
//! - [`runs_table`]: `ddp ls`.
//! - [`RunDetails`], [`run_details`], [`show_text`]: `ddp show`.
//! - [`comparison_table`], [`comparison_text`]: `ddp compare`.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::present::analysis::{ComparedRun, Comparison};
use crate::present::format::{self, opt_duration, percent, timestamp};
use crate::runs::plan::Plan;
use crate::{Run, Summary};

/// A table of text cells (values formatted with [`crate::present::format`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str], rows: Vec<Vec<String>>) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows,
        }
    }

    /// The index of the column named `name`, if any.
    pub fn column(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    /// Plain text: left-aligned columns two spaces apart, no trailing spaces, one line per row
    /// (header first), each ending in a newline.
    pub fn to_text(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cells: &[String]| -> String {
            let mut s = String::new();
            for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
                if i + 1 == cells.len() {
                    s.push_str(c);
                } else {
                    let _ = write!(s, "{c:<w$}  ");
                }
            }
            s.trim_end().to_string()
        };
        let mut out = line(&self.header);
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        out
    }
}

/// The `ddp ls` table, one row per run in the order given (each run's metrics read).
pub fn runs_table(runs: &[&Run]) -> Table {
    let summaries: Vec<Summary> = runs.iter().map(|r| Summary::of(r)).collect();
    let rows: Vec<(&Run, &Summary)> = runs.iter().copied().zip(&summaries).collect();
    runs_table_of(&rows)
}

/// The `ddp ls` table of runs whose summaries are known (the run index's).
pub fn runs_table_of(runs: &[(&Run, &Summary)]) -> Table {
    let rows = runs
        .iter()
        .map(|(r, s)| {
            let rec = &r.record;
            vec![
                rec.id.clone(),
                rec.experiment.clone(),
                rec.name.clone().unwrap_or_default(),
                rec.runs_on().status_text(rec.status),
                rec.replicas.to_string(),
                rec.restarts.to_string(),
                timestamp(rec.created),
                opt_duration(s.duration_s),
                percent(s.test_accuracy.or(s.final_val_accuracy)),
            ]
        })
        .collect();
    Table::new(
        &[
            "ID",
            "EXPERIMENT",
            "NAME",
            "STATUS",
            "REPLICAS",
            "RESTARTS",
            "CREATED",
            "DURATION",
            "ACCURACY",
        ],
        rows,
    )
}

/// What `ddp show RUN` shows, read once: `key → value` fields, the frozen spec, the notes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDetails {
    /// `run`, `experiment`, `status`, `folder`, `host`, `replicas`, `restarts`, `created`,
    /// `duration`, `epochs`, `train loss`, `val`, `test`, `tags`, `spec hash`, `command`, with
    /// their values as `ddp show` prints them; a language model's run has `steps`, `train loss`,
    /// `lr`, `tokens/s` and `val` (loss, perplexity, bits) instead of `epochs` to `test`.
    pub fields: Vec<(&'static str, String)>,
    pub spec_path: PathBuf,
    /// The frozen spec's text (empty when it cannot be read).
    pub spec: String,
    pub notes_path: PathBuf,
    /// The notes without trailing white space (empty when there are none).
    pub notes: String,
}

impl RunDetails {
    /// Everything `ddp show RUN` prints: the fields as `key  value` lines, then the spec and the
    /// notes (when there are any).
    pub fn to_text(&self) -> String {
        let mut o = String::new();
        for (key, value) in &self.fields {
            let _ = writeln!(o, "{key:<12}{value}");
        }
        let _ = writeln!(o, "\nspec ({}):", self.spec_path.display());
        o.push_str(&self.spec);
        if !self.notes.trim().is_empty() {
            let _ = writeln!(
                o,
                "\nnotes ({}):\n{}",
                self.notes_path.display(),
                self.notes
            );
        }
        o
    }
}

/// Reads what `ddp show RUN` shows (figures from rank 0's metrics, tags, spec, notes).
pub fn run_details(run: &Run) -> RunDetails {
    let summary = Summary::of(run);
    let r = &run.record;
    let name = r.name.as_ref().map(|n| format!(" ({n})"));
    let error = r.error.as_ref().map(|e| format!(": {e}"));
    let devices = if r.devices.is_empty() {
        "-"
    } else {
        &r.devices
    };
    let mut fields = vec![
        ("run", r.id.clone()),
        (
            "experiment",
            format!("{}{}", r.experiment, name.unwrap_or_default()),
        ),
        (
            "status",
            format!("{}{}", r.status, error.unwrap_or_default()),
        ),
        ("folder", run.dir.display().to_string()),
        ("host", r.host.clone()),
        ("replicas", format!("{} on {devices}", r.replicas)),
        ("restarts", r.restarts.to_string()),
        ("created", timestamp(r.created)),
        ("duration", opt_duration(summary.duration_s)),
    ];
    if let Some(line) = r.runs_on().line() {
        fields.insert(3, line);
    }
    if summary.language_model {
        fields.extend(language_model_fields(
            &summary,
            &Plan::read(&run.spec_path()),
        ));
    } else {
        fields.extend([
            (
                "epochs",
                format!("{} done, {} steps", summary.epochs_done, summary.steps),
            ),
            ("train loss", format::loss(summary.last_train_loss)),
            (
                "val",
                format!(
                    "loss {}  accuracy {} (best {})",
                    format::loss(summary.final_val_loss),
                    percent(summary.final_val_accuracy),
                    percent(summary.best_val_accuracy)
                ),
            ),
            (
                "test",
                format!(
                    "loss {}  accuracy {}",
                    format::loss(summary.test_loss),
                    percent(summary.test_accuracy)
                ),
            ),
        ]);
    }
    if let Some(b) = &summary.step_breakdown {
        fields.push(("step time", format::breakdown(b)));
    }
    if let Some(p) = &summary.precision {
        fields.push(("precision", format::precision(p)));
    }
    if let Some(s) = &summary.sync {
        fields.push(("sync", format::sync(s, summary.steps)));
    }
    if let Some(d) = crate::runs::run::DataSummary::read(&run.dir) {
        fields.push(("data", d.text()));
    }
    // An elastic run's membership changes, one line each.
    for e in run.events().unwrap_or_default() {
        if let Some(text) = e.event.membership_text() {
            fields.push(("membership", text));
        }
    }
    fields.extend([
        ("tags", run.tags().join(", ")),
        ("spec hash", r.spec_hash.clone()),
        ("command", r.command.join(" ")),
    ]);
    if let Some(t) = &r.trainer {
        fields.push(("trainer", t.display().to_string()));
    }
    let notes = run.notes();
    RunDetails {
        fields,
        spec_path: run.spec_path(),
        spec: std::fs::read_to_string(run.spec_path()).unwrap_or_default(),
        notes_path: run.dir.join(crate::runs::run::NOTES),
        notes: if notes.trim().is_empty() {
            String::new()
        } else {
            notes.trim_end().to_string()
        },
    }
}

/// What `ddp show` says of a language model's figures instead of epochs, accuracy and test:
/// the steps done (of the plan's), the last train loss, learning rate and tokens/s, the last
/// validation's loss, perplexity and bits.
fn language_model_fields(s: &Summary, plan: &Plan) -> [(&'static str, String); 5] {
    let steps = match plan.steps {
        Some(total) => format!("{}/{total}", s.steps),
        None => s.steps.to_string(),
    };
    let bits = format::bits(s.final_val_bits_per_char, s.final_val_bits_per_byte)
        .map(|b| format!("  {b}"))
        .unwrap_or_default();
    [
        ("steps", steps),
        ("train loss", format::loss(s.last_train_loss)),
        ("lr", s.last_lr.map_or("-".into(), format::lr)),
        ("tokens/s", format::rate(s.tokens_per_sec)),
        (
            "val",
            format!(
                "loss {}  perplexity {}{bits}",
                format::loss(s.final_val_loss),
                format::perplexity(s.final_val_perplexity)
            ),
        ),
    ]
}

/// Everything `ddp show RUN` prints without `--json` ([`RunDetails::to_text`]).
pub fn show_text(run: &Run) -> String {
    run_details(run).to_text()
}

/// What [`comparison_table`] adds under a table of several runs whose specs are all the same.
pub const NO_DIFFERING_KEY: &str = "(no spec key differs between these runs)";

/// The `ddp compare` table (one row per run: id, `RUN NAME` when any run has one, status, the
/// differing spec keys ([`spec_key_header`]), then figures: best and final val accuracy, test
/// loss and accuracy; a language model's val loss, perplexity and tokens/s instead, or both sets
/// when the runs are of both kinds; where any run has one, its step time, exposed communication
/// and what bounds it; the duration) and the note printed under it, if any
/// ([`NO_DIFFERING_KEY`]).
pub fn comparison_table(c: &Comparison) -> (Table, Option<String>) {
    let named = c.runs.iter().any(|r| r.name.is_some());
    let mut header: Vec<String> = vec!["RUN".into()];
    if named {
        header.push("RUN NAME".into());
    }
    header.push("STATUS".into());
    header.extend(c.differing_keys.iter().map(|k| spec_key_header(k)));
    // A language model's figures, a classifier's, or both side by side (each run's `-` where
    // its kind has no such figure); a run without figures yet fits either.
    let lm = |r: &&ComparedRun| r.summary.language_model;
    let figures = |r: &&ComparedRun| r.summary.steps > 0;
    let language_models = c.runs.iter().any(|r| lm(&r));
    let others = !language_models || c.runs.iter().any(|r| !lm(&r) && figures(&r));
    if others {
        header.extend(["BEST VAL ACC", "FINAL VAL ACC", "TEST LOSS", "TEST ACC"].map(String::from));
    }
    if language_models {
        header.extend(["VAL LOSS", "PERPLEXITY", "TOKENS/S"].map(String::from));
    }
    // Where the steps went, where any run says so.
    let timed = c.runs.iter().any(|r| r.summary.step_breakdown.is_some());
    if timed {
        header.extend(["STEP", "COMM EXPOSED", "BOUND"].map(String::from));
    }
    header.push("DURATION".into());
    let rows: Vec<Vec<String>> = c
        .runs
        .iter()
        .map(|r| {
            let s = &r.summary;
            let mut row = vec![r.id.clone()];
            if named {
                row.push(r.name.clone().unwrap_or_else(|| "-".into()));
            }
            row.push(r.status.to_string());
            row.extend(r.cells.iter().cloned());
            if others {
                row.extend([
                    percent(s.best_val_accuracy),
                    percent(s.final_val_accuracy),
                    format::loss(s.test_loss),
                    percent(s.test_accuracy),
                ]);
            }
            if language_models {
                row.extend([
                    format::loss(s.final_val_loss),
                    format::perplexity(s.final_val_perplexity),
                    format::rate(s.tokens_per_sec),
                ]);
            }
            if timed {
                let b = s.step_breakdown.as_ref();
                row.extend([
                    b.map_or("-".into(), |b| format!("{:.3}s", b.step_s)),
                    b.map_or("-".into(), |b| {
                        let share = 100.0 * b.comm_exposed_s / b.step_s;
                        format!("{:.3}s ({share:.0}%)", b.comm_exposed_s)
                    }),
                    b.map_or("-".into(), |b| b.bound().into()),
                ]);
            }
            row.push(opt_duration(s.duration_s));
            row
        })
        .collect();
    let note = (c.differing_keys.is_empty() && c.runs.len() > 1).then(|| NO_DIFFERING_KEY.into());
    (Table { header, rows }, note)
}

/// The column header of a spec key: the dotted key (lower case, unlike the run's own columns),
/// a top-level key prefixed with `spec.` (`spec.name`, the experiment's name, is not the run's
/// name).
pub fn spec_key_header(key: &str) -> String {
    if key.contains('.') {
        key.to_string()
    } else {
        format!("spec.{key}")
    }
}

/// Everything `ddp compare` prints without `--json`: the table, then the note on a line of its
/// own.
pub fn comparison_text(c: &Comparison) -> String {
    let (table, note) = comparison_table(c);
    let mut text = table.to_text();
    if let Some(note) = note {
        text.push_str(&note);
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::run::{RunRecord, RunStatus};
    use crate::test_util::lm_run_in;

    #[test]
    fn renders_aligned_columns() {
        let t = Table::new(
            &["ID", "STATUS"],
            vec![
                vec!["a".into(), "running".into()],
                vec!["bbbb".into(), "failed".into()],
            ],
        );
        assert_eq!(t.to_text(), "ID    STATUS\na     running\nbbbb  failed\n");
        assert_eq!(t.column("STATUS"), Some(1));
        assert_eq!(t.column("NAME"), None);
        // Widths count characters; an empty last cell leaves no trailing spaces.
        let t = Table::new(
            &["É", "X"],
            vec![vec!["ü".into(), String::new()], vec!["abc".into()]],
        );
        assert_eq!(t.to_text(), "É    X\nü\nabc\n");
    }

    fn run(dir: &std::path::Path, status: RunStatus, name: Option<&str>) -> Run {
        RunRecord::sample()
            .status(status)
            .name(name.map(String::from))
            .command(vec!["ddp".into(), "run".into(), "x.toml".into()])
            .devices("")
            .created(0.0)
            .started(Some(10.0))
            .ended(Some(22.5))
            .in_dir(dir)
    }

    #[test]
    fn ls_and_show() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = run(dir.path(), RunStatus::Failed, Some("first"));
        r.record.error = Some("rank 1 exited with code 1".into());
        let t = runs_table(&[&r]);
        assert_eq!(t.header.len(), 9);
        assert_eq!(
            t.rows,
            [[
                "20261121-101500-abc123",
                "mnist",
                "first",
                "failed",
                "2",
                "0",
                "1970-01-01 00:00:00",
                "12.5s",
                "-"
            ]]
        );
        std::fs::write(r.spec_path(), "[train]\nepochs = 3\n").unwrap();
        std::fs::write(dir.path().join("notes.md"), "tried lr 0.1\n\n").unwrap();
        let text = show_text(&r);
        assert!(text.starts_with(
            "run         20261121-101500-abc123\nexperiment  mnist (first)\n\
             status      failed: rank 1 exited with code 1\n"
        ));
        assert!(text.contains("replicas    2 on -\n"));
        assert!(text.contains("command     ddp run x.toml\n"));
        let spec = format!(
            "\nspec ({}):\n[train]\nepochs = 3\n",
            r.spec_path().display()
        );
        assert!(text.contains(&spec), "{text}");
        assert!(text.ends_with("notes.md):\ntried lr 0.1\n"), "{text}");
        let d = run_details(&r);
        assert_eq!(d.fields.len(), 16);
        assert_eq!(d.fields[13], ("tags", String::new()));
        assert_eq!(d.notes, "tried lr 0.1");
        assert!(text.contains("\ntags        \n"), "{text}");
    }

    #[test]
    fn comparison_note_only_for_identical_specs() {
        let dir = tempfile::tempdir().unwrap();
        let compared = |id: &str| ComparedRun {
            id: id.into(),
            experiment: "mnist".into(),
            name: None,
            sweep: None,
            status: RunStatus::Completed,
            error: None,
            dir: dir.path().into(),
            keys: Default::default(),
            summary: Summary::default(),
            cells: vec![],
        };
        let mut c = Comparison {
            sweep: None,
            differing_keys: vec![],
            runs: vec![compared("a"), compared("b")],
        };
        let (t, note) = comparison_table(&c);
        assert_eq!(t.header[..2], ["RUN", "STATUS"]);
        assert_eq!(note.as_deref(), Some(NO_DIFFERING_KEY));
        assert!(comparison_text(&c).ends_with("-\n(no spec key differs between these runs)\n"));
        c.differing_keys = vec!["train.lr".into()];
        c.runs[0].cells = vec!["0.1".into()];
        c.runs[1].cells = vec!["0.2".into()];
        c.runs[1].name = Some("b2".into());
        let (t, note) = comparison_table(&c);
        assert_eq!(note, None);
        assert_eq!(t.header[..4], ["RUN", "RUN NAME", "STATUS", "train.lr"]);
        assert_eq!(t.rows[0][..4], ["a", "-", "completed", "0.1"]);
        assert_eq!(comparison_text(&c), t.to_text());
        // A top-level spec key is not mistaken for a column of the run's own.
        c.differing_keys = vec!["name".into(), "train.lr".into()];
        let (t, _) = comparison_table(&c);
        assert_eq!(
            t.header[..5],
            ["RUN", "RUN NAME", "STATUS", "spec.name", "train.lr"]
        );
        // Where any run's steps are timed: step, exposed communication and what bounds it.
        c.differing_keys = vec!["train.lr".into()];
        c.runs[1].summary.step_breakdown = Some(crate::metrics::StepBreakdown {
            step_s: 0.5,
            compute_s: 0.1,
            comm_exposed_s: 0.3,
            data_s: 0.05,
            optimizer_s: 0.05,
            comm_s: 0.4,
            bytes_sent: None,
        });
        let (t, _) = comparison_table(&c);
        let n = t.header.len();
        assert_eq!(t.header[n - 4..n - 1], ["STEP", "COMM EXPOSED", "BOUND"]);
        assert_eq!(t.rows[0][n - 4..n - 1], ["-", "-", "-"]);
        assert_eq!(
            t.rows[1][n - 4..n - 1],
            ["0.500s", "0.300s (60%)", "communication"]
        );
    }

    /// The trainer's `membership` event line, as its rank 0 appends it, shows in `ddp show`.
    #[test]
    fn show_lists_an_elastic_runs_membership_changes() {
        let dir = tempfile::tempdir().unwrap();
        let run = lm_run_in(dir.path());
        let line = r#"{"event":"membership","generation":1,"joined":[],"left":[2],"members":[0,1,3],"seconds_lost":1.02,"step":9,"time":1795904555.43,"world_after":3,"world_before":4}"#;
        std::fs::write(run.dir.join(crate::runs::run::EVENTS), format!("{line}\n")).unwrap();
        let d = run_details(&run);
        let lines: Vec<&str> = d
            .fields
            .iter()
            .filter(|f| f.0 == "membership")
            .map(|f| f.1.as_str())
            .collect();
        assert_eq!(
            lines,
            ["replica 2 left at step 9: 4 -> 3 replicas (1.0 s lost)"]
        );
    }

    #[test]
    fn show_names_the_runs_own_data() {
        let dir = tempfile::tempdir().unwrap();
        let run = lm_run_in(dir.path());
        let record = ddp_trainer::data::DataRecord {
            format: "image-folder".into(),
            classes: Some((0..10).map(|c| c.to_string()).collect()),
            train_samples: 8000,
            test_samples: 2000,
            test_held_out: true,
            skipped: vec![ddp_trainer::data::parts::Skipped {
                path: "train/3/bad.png".into(),
                why: "truncated".into(),
            }],
            ..Default::default()
        };
        record.write(&run.dir).unwrap();
        let d = run_details(&run);
        let data = d
            .fields
            .iter()
            .find(|f| f.0 == "data")
            .map(|f| f.1.as_str());
        assert_eq!(
            data,
            Some(
                "image-folder: 8000 train, 2000 test (held out), 10 classes, 1 file skipped (data.json)"
            )
        );
        std::fs::remove_file(run.dir.join("data.json")).unwrap();
        assert!(run_details(&run).fields.iter().all(|f| f.0 != "data"));
    }

    #[test]
    fn ls_names_a_live_slurm_job() {
        let mut rec = RunRecord::sample();
        assert_eq!(
            rec.runs_on().status_text(rec.status),
            rec.status.to_string()
        );
        rec.slurm = Some(crate::engine::slurm::SlurmJob {
            state: "PENDING".into(),
            reason: Some("Priority".into()),
            node_list: None,
            ..crate::engine::slurm::SlurmJob::sample()
        });
        rec.status = crate::runs::run::RunStatus::Queued;
        assert_eq!(
            rec.runs_on().status_text(rec.status),
            "queued (slurm 42: Priority)"
        );
        rec.status = crate::runs::run::RunStatus::Running;
        assert_eq!(rec.runs_on().status_text(rec.status), "running (slurm 42)");
        rec.status = crate::runs::run::RunStatus::Completed;
        assert_eq!(rec.runs_on().status_text(rec.status), "completed");
    }

    #[test]
    fn show_names_the_slurm_job() {
        let dir = tempfile::tempdir().unwrap();
        let mut run = lm_run_in(dir.path());
        assert!(run_details(&run).fields.iter().all(|f| f.0 != "slurm"));
        run.record.slurm = Some(crate::engine::slurm::SlurmJob {
            requeues: 1,
            ..crate::engine::slurm::SlurmJob::sample()
        });
        let d = run_details(&run);
        assert_eq!(d.fields[3].0, "slurm");
        assert_eq!(d.fields[3].1, "job 42 RUNNING on n[1-2], requeued 1 time");
    }

    #[test]
    fn ls_and_show_follow_a_spark_application() {
        let mut rec = RunRecord::sample();
        let waiting = "waiting for executors: the barrier stage needs 2 task slots at once, the \
                       cluster offers 0 now";
        rec.spark = Some(crate::runs::run::SparkApp {
            master: "spark://h:7077".into(),
            tasks: 2,
            waiting: Some(waiting.into()),
            ..Default::default()
        });
        rec.status = crate::runs::run::RunStatus::Queued;
        assert_eq!(
            rec.runs_on().status_text(rec.status),
            format!("queued (spark: {waiting})")
        );
        let app = rec.spark.as_mut().unwrap();
        app.waiting = None;
        app.app_id = Some("app-20261129-0001".into());
        app.ui = Some("http://h:4040".into());
        app.stage_retries = 1;
        rec.status = crate::runs::run::RunStatus::Running;
        assert_eq!(
            rec.runs_on().status_text(rec.status),
            "running (spark app-20261129-0001)"
        );
        rec.status = crate::runs::run::RunStatus::Completed;
        assert_eq!(rec.runs_on().status_text(rec.status), "completed");

        let dir = tempfile::tempdir().unwrap();
        let mut run = lm_run_in(dir.path());
        run.record.spark = rec.spark.clone();
        let d = run_details(&run);
        assert_eq!(d.fields[3].0, "spark");
        assert_eq!(
            d.fields[3].1,
            "app-20261129-0001 on spark://h:7077 (2 tasks), UI http://h:4040, stage run again 1 \
             time(s)"
        );
    }

    #[test]
    fn show_a_language_model() {
        let dir = tempfile::tempdir().unwrap();
        let run = lm_run_in(dir.path());
        let d = run_details(&run);
        let keys: Vec<&str> = d.fields.iter().map(|f| f.0).collect();
        assert_eq!(
            keys,
            [
                "run",
                "experiment",
                "status",
                "folder",
                "host",
                "replicas",
                "restarts",
                "created",
                "duration",
                "steps",
                "train loss",
                "lr",
                "tokens/s",
                "val",
                "tags",
                "spec hash",
                "command"
            ]
        );
        let text = d.to_text();
        assert!(
            text.contains(
                "duration    2m05s\n\
                 steps       1200/2000\n\
                 train loss  1.4000\n\
                 lr          0.0005\n\
                 tokens/s    16640\n\
                 val         loss 1.4500  perplexity 4.26  bits/char 2.092\n\
                 tags        \n"
            ),
            "{text}"
        );
        assert!(
            !text.contains("accuracy") && !text.contains("epoch"),
            "{text}"
        );
        // Without a readable plan, the steps done alone.
        std::fs::remove_file(run.spec_path()).unwrap();
        assert!(show_text(&run).contains("\nsteps       1200\n"));
    }

    #[test]
    fn compare_language_models_alone_and_beside_a_classifier() {
        let dir = tempfile::tempdir().unwrap();
        let lm = lm_run_in(dir.path().join("lm"));
        let compared = |run: &Run, summary: Summary| ComparedRun {
            id: run.record.id.clone(),
            experiment: run.record.experiment.clone(),
            name: None,
            sweep: None,
            status: run.record.status,
            error: None,
            dir: run.dir.clone(),
            keys: Default::default(),
            summary,
            cells: vec![],
        };
        let a = compared(&lm, Summary::of(&lm));
        let mut c = Comparison {
            sweep: None,
            differing_keys: vec![],
            runs: vec![a.clone()],
        };
        assert_eq!(
            comparison_text(&c),
            "RUN                     STATUS   VAL LOSS  PERPLEXITY  TOKENS/S  DURATION\n\
             20261121-101500-abc123  stopped  1.4500    4.26        16640     2m05s\n"
        );
        // A language model that has recorded nothing yet is no classifier.
        let mut fresh = a.clone();
        fresh.id = "new".into();
        fresh.summary = Summary::default();
        c.runs.push(fresh);
        assert_eq!(comparison_table(&c).0.header.len(), 6);
        // Beside a classifier: both kinds of figures, `-` where a run has none.
        let mnist = Summary {
            steps: 40,
            best_val_accuracy: Some(0.97),
            final_val_accuracy: Some(0.965),
            final_val_loss: Some(0.11),
            test_loss: Some(0.1),
            test_accuracy: Some(0.969),
            duration_s: Some(30.0),
            ..Summary::default()
        };
        c.runs[1] = ComparedRun {
            id: "cnn".into(),
            ..compared(&lm, mnist)
        };
        assert_eq!(
            comparison_text(&c),
            "RUN                     STATUS   BEST VAL ACC  FINAL VAL ACC  TEST LOSS  TEST ACC  VAL LOSS  PERPLEXITY  TOKENS/S  DURATION\n\
             20261121-101500-abc123  stopped  -             -              -          -         1.4500    4.26        16640     2m05s\n\
             cnn                     stopped  97.00%        96.50%         0.1000     96.90%    0.1100    -           -         30.0s\n\
             (no spec key differs between these runs)\n"
        );
    }
}
