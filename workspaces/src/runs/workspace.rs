//! A workspace: `<ws>/.ddp-workspace` (marker), `<ws>/experiments/<experiment>/runs/<id>/` (run
//! folders), `<ws>/locks/` (device locks). Runs are addressed by full id, unique id prefix,
//! `<experiment>@latest` or `latest`.

use std::path::{Path, PathBuf};

use ddp_trainer::spec::{Spec, edit_distance};

use crate::runs::run::{Run, RunRecord, RunStatus, now};
use crate::{Error, Result};

pub const MARKER: &str = ".ddp-workspace";
const MARKER_CONTENT: &str = "{\"format\": \"ddp-workspace/1\"}\n";

/// Where a new run comes from, recorded in its `run.json` ([`Workspace::create_run_with`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunOrigin {
    /// The command line that asked for the run.
    pub command: Vec<String>,
    pub name: Option<String>,
    /// The sweep the run belongs to.
    pub sweep: Option<String>,
    /// The executable the replicas run instead of the built-in trainer (absolute).
    pub trainer: Option<PathBuf>,
    /// A folder moved into the run as `code/` (a notebook cell's crate and its build); a
    /// `trainer` inside it is recorded at its new place.
    pub code: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct Workspace {
    pub root: PathBuf,
}

/// A run folder that could not be read, reported instead of listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub dir: PathBuf,
    pub error: String,
}

impl Workspace {
    /// `--workspace DIR`, else `$DDP_WORKSPACE`, else `./ddp-workspace`.
    pub fn resolve(explicit: Option<&Path>) -> PathBuf {
        explicit
            .map(Path::to_path_buf)
            .or_else(|| {
                std::env::var_os("DDP_WORKSPACE")
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            })
            .unwrap_or_else(|| PathBuf::from("ddp-workspace"))
    }

    /// Opens a workspace, creating it when the folder does not exist or is empty. A non-empty
    /// folder without the marker is refused: it is not ours to fill.
    pub fn open_or_create(root: &Path) -> Result<Workspace> {
        if root.join(MARKER).is_file() {
            return Ok(Workspace {
                root: root.to_path_buf(),
            });
        }
        let empty = match std::fs::read_dir(root) {
            Ok(mut entries) => entries.next().is_none(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => return Err(Error::io(root, e)),
        };
        if !empty {
            return Err(not_a_workspace(root));
        }
        std::fs::create_dir_all(root.join("experiments")).map_err(|e| Error::io(root, e))?;
        crate::files::fsutil::write_atomic(&root.join(MARKER), MARKER_CONTENT.as_bytes())?;
        Ok(Workspace {
            root: root.to_path_buf(),
        })
    }

    /// Opens an existing workspace (commands that only read).
    pub fn open(root: &Path) -> Result<Workspace> {
        if root.join(MARKER).is_file() {
            return Ok(Workspace {
                root: root.to_path_buf(),
            });
        }
        if !root.exists() {
            return Err(Error::NotFound(format!(
                "no workspace at {} (it does not exist yet: `ddp run` creates it; or pass --workspace / set DDP_WORKSPACE)",
                root.display()
            )));
        }
        Err(not_a_workspace(root))
    }

    pub fn experiments_dir(&self) -> PathBuf {
        self.root.join("experiments")
    }

    pub fn locks_dir(&self) -> PathBuf {
        self.root.join("locks")
    }

    /// Creates the folder and first record of a new run (status queued), freezing the resolved
    /// spec: [`Workspace::create_run_with`] with only a command, a name and a sweep.
    pub fn create_run(
        &self,
        spec: &Spec,
        command: Vec<String>,
        name: Option<String>,
        sweep: Option<String>,
    ) -> Result<Run> {
        self.create_run_with(
            spec,
            RunOrigin {
                command,
                name,
                sweep,
                ..RunOrigin::default()
            },
        )
    }

    /// Creates the folder and first record of a new run (status queued), freezing the resolved
    /// spec. `run.json` is written last, in one atomic write, so a run is either fully recorded
    /// or not listed at all; if anything fails before, the folder is removed (and `origin.code`,
    /// if it was already moved in, is moved back).
    pub fn create_run_with(&self, spec: &Spec, origin: RunOrigin) -> Result<Run> {
        let experiment = sanitize(&spec.name);
        let id = new_run_id();
        let dir = self
            .experiments_dir()
            .join(&experiment)
            .join("runs")
            .join(&id);
        let mut moved_code = None;
        let made = (|| {
            std::fs::create_dir_all(dir.join("logs")).map_err(|e| Error::io(&dir, e))?;
            crate::files::fsutil::write_atomic(
                &dir.join(crate::runs::run::SPEC),
                spec.to_toml().as_bytes(),
            )?;
            // The user's annotations, empty until edited (any time, with any editor, or `ddp tag`).
            for file in [crate::runs::run::NOTES, crate::runs::run::TAGS] {
                crate::files::fsutil::write_atomic(&dir.join(file), b"")?;
            }
            let mut trainer = origin.trainer.clone();
            if let Some(code) = &origin.code {
                let to = dir.join(crate::runs::run::CODE);
                std::fs::rename(code, &to).map_err(|e| {
                    Error::io(
                        code,
                        std::io::Error::new(
                            e.kind(),
                            format!("moving it into the run as {}: {e}", to.display()),
                        ),
                    )
                })?;
                moved_code = Some((code.clone(), to.clone()));
                if let Some(inside) = trainer.as_ref().and_then(|t| t.strip_prefix(code).ok()) {
                    trainer = Some(to.join(inside));
                }
            }
            let run = Run {
                dir: dir.clone(),
                record: RunRecord {
                    id: id.clone(),
                    experiment: experiment.clone(),
                    name: origin.name.clone(),
                    sweep: origin.sweep.clone(),
                    status: RunStatus::Queued,
                    spec_hash: spec.hash(),
                    command: origin.command.clone(),
                    host: ddp_trainer::env::hostname(),
                    replicas: spec.ddp.replicas,
                    devices: String::new(),
                    supervisor: None,
                    replica_pids: Default::default(),
                    created: now(),
                    started: None,
                    ended: None,
                    exit_codes: Default::default(),
                    restarts: 0,
                    trainer,
                    error: None,
                    data: None,
                    slurm: None,
                    spark: None,
                    pause_at: None,
                },
            };
            run.save()?;
            Ok(run)
        })();
        if made.is_err() {
            if let Some((from, to)) = moved_code {
                let _ = std::fs::rename(to, from);
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
        made
    }

    /// Every run folder, newest first; unreadable ones are returned separately (never fatal).
    pub fn runs(&self) -> Result<(Vec<Run>, Vec<Unreadable>)> {
        let mut runs = Vec::new();
        let mut bad = Vec::new();
        for dir in self.run_dirs()? {
            match Run::load_checked(&dir) {
                Ok(r) => runs.push(r),
                Err(e) => bad.push(Unreadable {
                    dir,
                    error: e.to_string(),
                }),
            }
        }
        runs.sort_by(|a, b| b.record.id.cmp(&a.record.id));
        Ok((runs, bad))
    }

    fn run_dirs(&self) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        let exp_root = self.experiments_dir();
        for exp in read_dir_sorted(&exp_root)? {
            for run in read_dir_sorted(&exp.join("runs"))? {
                if run.is_dir() {
                    out.push(run);
                }
            }
        }
        Ok(out)
    }

    /// Finds a run by full id, unique id prefix, `<experiment>@latest` or `latest`.
    pub fn run(&self, address: &str) -> Result<Run> {
        let (runs, _) = self.runs()?;
        resolve_address(&runs, address).cloned()
    }
}

/// The address resolution, separate from I/O.
pub fn resolve_address<'a>(runs: &'a [Run], address: &str) -> Result<&'a Run> {
    let newest =
        |it: &mut dyn Iterator<Item = &'a Run>| it.max_by(|a, b| a.record.id.cmp(&b.record.id));
    if address == "latest" {
        return newest(&mut runs.iter())
            .ok_or_else(|| Error::NotFound("the workspace has no runs yet".into()));
    }
    if let Some(exp) = address.strip_suffix("@latest") {
        return newest(&mut runs.iter().filter(|r| r.record.experiment == exp)).ok_or_else(|| {
            let mut exps: Vec<&str> = runs.iter().map(|r| r.record.experiment.as_str()).collect();
            exps.sort();
            exps.dedup();
            Error::NotFound(format!(
                "no runs of experiment `{exp}`{}",
                closest(exp, &exps, "experiments")
            ))
        });
    }
    let matches: Vec<&Run> = runs
        .iter()
        .filter(|r| r.record.id.starts_with(address))
        .collect();
    match matches.len() {
        1 => Ok(matches[0]),
        0 => {
            let ids: Vec<&str> = runs.iter().map(|r| r.record.id.as_str()).collect();
            Err(Error::NotFound(format!(
                "no run `{address}`{}",
                closest(address, &ids, "runs")
            )))
        }
        n => Err(Error::Invalid(format!(
            "`{address}` matches {n} runs ({}); give more of the id",
            matches
                .iter()
                .take(5)
                .map(|r| r.record.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// "; did you mean X?" for the nearest candidates by edit distance (or a hint to list them).
fn closest(wanted: &str, candidates: &[&str], what: &str) -> String {
    let good = nearest(wanted, candidates);
    if good.is_empty() {
        format!(" (`ddp ls` lists the {what})")
    } else {
        format!(
            "; did you mean {}?",
            good.iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(" or ")
        )
    }
}

/// Up to 3 candidates close to `wanted` by edit distance, nearest first (for "did you mean").
pub(crate) fn nearest<'a>(wanted: &str, candidates: &[&'a str]) -> Vec<&'a str> {
    let mut scored: Vec<(usize, &str)> = candidates
        .iter()
        .map(|c| (edit_distance(wanted, c), *c))
        .collect();
    scored.sort();
    scored
        .iter()
        .filter(|(d, c)| *d <= c.len().max(wanted.len()) / 2)
        .take(3)
        .map(|x| x.1)
        .collect()
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut v: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    v.sort();
    Ok(v)
}

fn not_a_workspace(root: &Path) -> Error {
    Error::Invalid(format!(
        "{} is not a ddp workspace (no {MARKER} file) and is not empty; pass --workspace with a new or existing workspace folder",
        root.display()
    ))
}

/// `<YYYYmmdd-HHMMSS>-<6 hex>` in UTC (run ids, and sweep ids: [`crate::sweep`]).
pub(crate) fn new_run_id() -> String {
    let t = time::OffsetDateTime::now_utc();
    let mut b = [0u8; 3];
    getrandom::fill(&mut b).expect("the OS random source works");
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}-{:02x}{:02x}{:02x}",
        t.year(),
        t.month() as u8,
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        b[0],
        b[1],
        b[2]
    )
}

/// Experiment names become folder names: keep `[A-Za-z0-9._-]`, replace the rest.
pub(crate) fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("x{s}")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Spec {
        Spec::parse(
            "name='mnist cnn'\n[model]\nname='mlp'\n[data]\nname='synthetic'\n",
            Path::new("s.toml"),
            &[],
        )
        .unwrap()
    }

    #[test]
    fn creates_workspace_and_refuses_foreign_folders() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open_or_create(&dir.path().join("ws")).unwrap();
        assert!(ws.root.join(MARKER).is_file());
        Workspace::open(&ws.root).unwrap();
        std::fs::write(dir.path().join("other.txt"), "x").unwrap();
        let e = Workspace::open_or_create(dir.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a ddp workspace"), "{e}");
        let e = Workspace::open(&dir.path().join("nope"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not exist yet"), "{e}");
    }

    #[test]
    fn a_runs_code_is_moved_in_and_its_trainer_recorded_there() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open_or_create(&dir.path().join("ws")).unwrap();
        let staged = ws.root.join(".build/cells/abc");
        std::fs::create_dir_all(staged.join("target/release")).unwrap();
        std::fs::write(staged.join("target/release/ddp-cell"), "#!/bin/sh\n").unwrap();
        let run = ws
            .create_run_with(
                &spec(),
                RunOrigin {
                    trainer: Some(staged.join("target/release/ddp-cell")),
                    code: Some(staged.clone()),
                    ..RunOrigin::default()
                },
            )
            .unwrap();
        let code = run.dir.join(crate::runs::run::CODE);
        assert!(!staged.exists());
        assert!(code.join("target/release/ddp-cell").is_file());
        let saved = Run::load(&run.dir).unwrap();
        assert_eq!(
            saved.record.trainer,
            Some(code.join("target/release/ddp-cell"))
        );

        // Code that cannot be moved: an error naming it, and no run folder left behind.
        let missing = ws.root.join(".build/cells/gone");
        let e = ws
            .create_run_with(
                &spec(),
                RunOrigin {
                    code: Some(missing.clone()),
                    ..RunOrigin::default()
                },
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains(&*missing.to_string_lossy()), "{e}");
        assert_eq!(ws.runs().unwrap().0.len(), 1);
        assert!(ws.runs().unwrap().1.is_empty());
    }

    #[test]
    fn run_ids_and_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open_or_create(dir.path()).unwrap();
        let a = ws.create_run(&spec(), vec![], None, None).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let b = ws.create_run(&spec(), vec![], None, None).unwrap();
        assert_eq!(a.record.experiment, "mnist-cnn");
        assert_eq!(a.record.id.len(), "20261121-101500-abc123".len());
        assert!(a.dir.join("spec.toml").is_file());
        assert_eq!(ws.run("latest").unwrap().record.id, b.record.id);
        assert_eq!(ws.run("mnist-cnn@latest").unwrap().record.id, b.record.id);
        assert_eq!(ws.run(&a.record.id).unwrap().record.id, a.record.id);
        assert_eq!(ws.run(&b.record.id[..17]).unwrap().record.id, b.record.id);
        let e = ws.run("2026").unwrap_err().to_string();
        assert!(e.contains("matches 2 runs"), "{e}");
        let e = ws.run("mnist-cnm@latest").unwrap_err().to_string();
        assert!(e.contains("did you mean `mnist-cnn`"), "{e}");
        let mut typo = a.record.id.clone();
        typo.replace_range(0..1, "3");
        let e = ws.run(&typo).unwrap_err().to_string();
        assert!(
            e.contains(&format!("did you mean `{}`", a.record.id)),
            "{e}"
        );
    }

    #[test]
    fn corrupt_run_is_reported_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open_or_create(dir.path()).unwrap();
        let good = ws.create_run(&spec(), vec![], None, None).unwrap();
        let bad_dir = good.dir.parent().unwrap().join("20260101-000000-badbad");
        std::fs::create_dir_all(&bad_dir).unwrap();
        std::fs::write(bad_dir.join("run.json"), "{").unwrap();
        let (runs, bad) = ws.runs().unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(bad.len(), 1);
        assert!(bad[0].error.contains("not a valid run record"));
    }
}
