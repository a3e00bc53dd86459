//! Dialogs and input lines over the views: help, confirmations, the new-run command line (with
//! path completion), tags, the runs filter, the log search and the Sample pane's prompt. Keys go
//! to the open dialog first: [`Dialog::key`] changes the dialog and says what the key came to
//! ([`DialogOutcome`]), which [`App::update`](crate::app::App::update) applies. [`draw`] draws
//! them; [`input`] is their one-line input.

pub mod draw;
pub mod input;

use crossterm::event::{KeyCode, KeyEvent};
use ddp_workspaces::Run;
use ddp_workspaces::actions::NewRun;
use ddp_workspaces::actions::NewSweep;
use ddp_workspaces::commands::{self, RunArgs, SweepArgs};

use self::input::{Edit, InputLine};

/// An action that asks `y`/`n` first.
#[derive(Debug, Clone, PartialEq)]
pub enum Confirm {
    Stop(Run),
    Delete(Run),
}

impl Confirm {
    pub fn question(&self) -> String {
        match self {
            Confirm::Stop(r) => format!(
                "Stop run {} ({})? The replicas finish their step and exit.",
                r.record.id, r.record.experiment
            ),
            Confirm::Delete(r) => format!(
                "Delete run {} ({}) and its folder {}?",
                r.record.id,
                r.record.experiment,
                r.dir.display()
            ),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Dialog {
    Help,
    Confirm(Confirm),
    /// `n`: `ddp run`'s arguments ([`RunArgs`]), started as a [`NewRun`].
    NewRun {
        input: InputLine,
        /// Why the last request was refused (nothing was created).
        error: Option<String>,
        /// Completion candidates shown under the line.
        hint: Option<String>,
        /// A request is being carried out.
        busy: bool,
    },
    Tags {
        run: Run,
        input: InputLine,
    },
    /// `/` in the runs list: filters as it is typed; `Esc` restores `before`.
    Filter {
        input: InputLine,
        before: String,
    },
    /// `/` in a log: searched on Enter.
    Search {
        input: InputLine,
    },
    /// `p` in a language-model run: the prompt to continue (`\n` for a newline).
    Sample {
        input: InputLine,
    },
}

/// The usage line of the new-run dialog: `ddp run`'s arguments, from their one definition, and
/// the word that starts a sweep instead.
pub fn new_run_usage() -> String {
    format!(
        "ddp run {}   (or: sweep SPEC --param ... --trials N --scheduler asha ...)",
        commands::synopsis::<RunArgs>()
    )
}

/// What the new-run dialog asks for: a run, or (a line starting with `sweep`) a sweep.
#[derive(Debug, Clone, PartialEq)]
pub enum NewRequest {
    Run(NewRun),
    Sweep(NewSweep),
}

/// Parses the new-run dialog's line: `sweep ARGS` as `ddp sweep`'s arguments, anything else
/// as `ddp run`'s ([`parse_new_run`]).
pub fn parse_request(line: &str) -> Result<NewRequest, String> {
    let refusal = |e: ddp_workspaces::Error| commands::one_line(&e.to_string());
    let words = commands::split(line).map_err(refusal)?;
    if words.first().map(String::as_str) != Some("sweep") {
        return parse_new_run(line).map(NewRequest::Run);
    }
    #[derive(clap::Parser)]
    struct Sweep {
        #[command(flatten)]
        args: SweepArgs,
    }
    let args = commands::parse_words::<Sweep>("sweep", &words[1..])
        .map_err(refusal)?
        .args;
    let command = ["ddp-tui"].map(String::from).into_iter().chain(words);
    Ok(NewRequest::Sweep(args.new_sweep(command.collect())))
}

/// Parses the new-run command line as `ddp run`'s arguments into the library's request, which
/// records the line as typed (`ddp-tui run ...`); a refusal is one line.
pub fn parse_new_run(line: &str) -> Result<NewRun, String> {
    let refusal = |e: ddp_workspaces::Error| commands::one_line(&e.to_string());
    let words = commands::split(line).map_err(refusal)?;
    let args: RunArgs = commands::parse_words("run", &words).map_err(refusal)?;
    let command = ["ddp-tui", "run"]
        .map(String::from)
        .into_iter()
        .chain(words);
    Ok(args.new_run(command.collect()))
}

/// Applies completion candidates for `typed` (the last word when Tab was pressed): one
/// candidate replaces the word, several extend it to their common prefix and are listed.
pub fn complete(input: &mut InputLine, hint: &mut Option<String>, typed: &str, options: &[String]) {
    if input.last_word() != typed {
        return; // typed on since: stale
    }
    match options {
        [] => *hint = Some("no match".into()),
        [one] => {
            input.replace_last_word(one);
            *hint = None;
        }
        many => {
            let prefix = common_prefix(many);
            if prefix.len() > typed.len() {
                input.replace_last_word(&prefix);
            }
            let names: Vec<&str> = many
                .iter()
                .map(|o| {
                    let t = o.trim_end_matches('/');
                    match t.rfind('/') {
                        Some(i) => &o[i + 1..],
                        None => o.as_str(),
                    }
                })
                .collect();
            *hint = Some(names.join("  "));
        }
    }
}

fn common_prefix(words: &[String]) -> String {
    let first = &words[0];
    let mut end = first.len();
    for w in &words[1..] {
        end = end.min(
            first
                .char_indices()
                .zip(w.chars())
                .find(|((_, a), b)| a != b)
                .map_or(end.min(w.len()), |((i, _), _)| i),
        );
    }
    first[..end].to_string()
}

/// What a key in an open dialog came to, for [`App::update`](crate::app::App::update) to
/// apply; the dialog has already changed itself (e.g. a new-run dialog became busy).
#[derive(Debug, Clone, PartialEq)]
pub enum DialogOutcome {
    /// The dialog stays open; nothing else happens.
    Open,
    /// The dialog closes; nothing else happens.
    Close,
    /// The dialog closes and the dashboard quits (`q` in the help).
    Quit,
    /// The dialog closes: carry out the confirmed action.
    Confirmed(Confirm),
    /// The dialog stays open, busy: start the run.
    StartRun(NewRun),
    /// The dialog stays open, busy: start the sweep.
    StartSweep(NewSweep),
    /// The dialog stays open: complete the word typed (Tab).
    Complete(String),
    /// The dialog closes: set the run's tags.
    SetTags(Run, Vec<String>),
    /// The runs filter becomes `text` (as it is typed); `close`: the dialog closes.
    Filter { text: String, close: bool },
    /// The dialog closes: search the open log.
    Search(String),
    /// The dialog closes: generate from this prompt (as typed).
    Sample(String),
}

impl DialogOutcome {
    /// Whether the dialog closes.
    pub fn closes(&self) -> bool {
        match self {
            DialogOutcome::Open
            | DialogOutcome::StartRun(_)
            | DialogOutcome::StartSweep(_)
            | DialogOutcome::Complete(_) => false,
            DialogOutcome::Filter { close, .. } => *close,
            DialogOutcome::Close
            | DialogOutcome::Quit
            | DialogOutcome::Confirmed(_)
            | DialogOutcome::SetTags(..)
            | DialogOutcome::Search(_)
            | DialogOutcome::Sample(_) => true,
        }
    }
}

impl Dialog {
    /// A key while this dialog is open.
    pub fn key(&mut self, key: KeyEvent) -> DialogOutcome {
        match self {
            Dialog::Help => {
                // Any key closes the help; `q` still quits from anywhere.
                if key.code == KeyCode::Char('q') {
                    DialogOutcome::Quit
                } else {
                    DialogOutcome::Close
                }
            }
            Dialog::Confirm(c) => match key.code {
                KeyCode::Char('y') | KeyCode::Char('Y') => DialogOutcome::Confirmed(c.clone()),
                KeyCode::Char('n') | KeyCode::Char('N') | KeyCode::Esc | KeyCode::Char('q') => {
                    DialogOutcome::Close
                }
                _ => DialogOutcome::Open,
            },
            Dialog::NewRun {
                input,
                error,
                hint,
                busy,
            } => {
                if *busy {
                    // A request is on its way: only its answer closes the dialog.
                    return DialogOutcome::Open;
                }
                match input.key(key) {
                    Edit::Cancel => DialogOutcome::Close,
                    Edit::Submit => match parse_request(&input.text) {
                        Ok(req) => {
                            *error = None;
                            *hint = None;
                            *busy = true;
                            match req {
                                NewRequest::Run(r) => DialogOutcome::StartRun(r),
                                NewRequest::Sweep(s) => DialogOutcome::StartSweep(s),
                            }
                        }
                        Err(e) => {
                            *error = Some(e);
                            DialogOutcome::Open
                        }
                    },
                    Edit::Complete => DialogOutcome::Complete(input.last_word().to_string()),
                    Edit::Changed | Edit::Ignored => {
                        *hint = None;
                        DialogOutcome::Open
                    }
                }
            }
            Dialog::Tags { run, input } => match input.key(key) {
                Edit::Cancel => DialogOutcome::Close,
                Edit::Submit => {
                    let mut tags: Vec<String> = Vec::new();
                    for t in input.text.split([' ', ',']).filter(|t| !t.is_empty()) {
                        if !tags.iter().any(|x| x == t) {
                            tags.push(t.to_string());
                        }
                    }
                    DialogOutcome::SetTags(run.clone(), tags)
                }
                _ => DialogOutcome::Open,
            },
            Dialog::Filter { input, before } => match input.key(key) {
                Edit::Cancel => DialogOutcome::Filter {
                    text: before.clone(),
                    close: true,
                },
                Edit::Submit => DialogOutcome::Filter {
                    text: input.text.clone(),
                    close: true,
                },
                _ => DialogOutcome::Filter {
                    text: input.text.clone(),
                    close: false,
                },
            },
            Dialog::Search { input } => match input.key(key) {
                Edit::Cancel => DialogOutcome::Close,
                Edit::Submit => DialogOutcome::Search(input.text.clone()),
                _ => DialogOutcome::Open,
            },
            Dialog::Sample { input } => match input.key(key) {
                Edit::Cancel => DialogOutcome::Close,
                Edit::Submit => DialogOutcome::Sample(input.text.clone()),
                _ => DialogOutcome::Open,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use ddp_workspaces::commands::path_candidates;

    use super::*;

    #[test]
    fn new_run_lines_parse_like_ddp_run() {
        let r = parse_new_run("examples/mnist.toml --set train.lr=0.01 --set=train.epochs=1 --name 'quick one' --replicas 2").unwrap();
        assert_eq!(r.spec, PathBuf::from("examples/mnist.toml"));
        assert_eq!(r.overrides, ["train.lr=0.01", "train.epochs=1"]);
        assert_eq!(r.name.as_deref(), Some("quick one"));
        assert_eq!(r.replicas, Some(2));
        assert_eq!(
            r.command,
            [
                "ddp-tui",
                "run",
                "examples/mnist.toml",
                "--set",
                "train.lr=0.01",
                "--set=train.epochs=1",
                "--name",
                "quick one",
                "--replicas",
                "2"
            ]
        );
        let r = parse_new_run("custom.toml --trainer target/release/custom-model").unwrap();
        assert_eq!(
            r.trainer,
            Some(PathBuf::from("target/release/custom-model"))
        );
        assert_eq!(
            parse_new_run("").unwrap_err(),
            "the following required arguments were not provided: <SPEC>"
        );
        assert_eq!(
            parse_new_run("a.toml --set").unwrap_err(),
            "a value is required for '--set <KEY=VALUE>' but none was supplied"
        );
        assert_eq!(
            parse_new_run("a.toml --set x").unwrap_err(),
            "invalid value 'x' for '--set <KEY=VALUE>': expected KEY=VALUE, e.g. train.lr=0.01"
        );
        assert_eq!(
            parse_new_run("a.toml --replicas two").unwrap_err(),
            "invalid value 'two' for '--replicas <N>': invalid digit found in string"
        );
        assert_eq!(
            parse_new_run("a.toml --detach").unwrap_err(),
            "unexpected argument '--detach' found"
        );
        assert_eq!(
            parse_new_run("a.toml b.toml").unwrap_err(),
            "unexpected argument 'b.toml' found"
        );
        assert_eq!(
            parse_new_run("'a.toml").unwrap_err(),
            "unbalanced quotes in `'a.toml`"
        );
        assert_eq!(
            new_run_usage(),
            "ddp run SPEC [--set KEY=VALUE]... [--replicas N] [--precision P] [--trainer PATH] \
             [--name NAME] [--on WHERE] [--nodes N] [--gpus-per-node G] [--partition PARTITION] [--time LIMIT] \
             [--account ACCOUNT] [--qos QOS] [--constraint CONSTRAINT] [--sbatch-arg ARG]... \
             [--master URL] [--tasks N] [--gpus-per-task G] [--spark-conf KEY=VALUE]...   \
             (or: sweep SPEC --param ... --trials N --scheduler asha ...)"
        );
        // A line starting with `sweep` is `ddp sweep`'s arguments.
        let Ok(NewRequest::Sweep(req)) = parse_request(
            "sweep s.toml --param train.lr=loguniform:1e-4:1e-1 --trials 9 --scheduler asha --max-parallel 2",
        ) else {
            panic!("not a sweep")
        };
        assert_eq!(req.params, ["train.lr=loguniform:1e-4:1e-1"]);
        assert_eq!((req.trials, req.max_parallel), (Some(9), Some(2)));
        assert_eq!(req.scheduler.unwrap().name, "asha");
        assert_eq!(req.command[..2], ["ddp-tui", "sweep"]);
        assert!(matches!(parse_request("s.toml"), Ok(NewRequest::Run(_))));
        assert_eq!(
            parse_request("sweep s.toml").unwrap_err(),
            "the following required arguments were not provided: --grid <KEY=V1,V2,...>"
        );
    }

    #[test]
    fn completion_of_paths() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("examples/data")).unwrap();
        std::fs::write(dir.path().join("examples/mnist.toml"), "").unwrap();
        std::fs::write(dir.path().join("examples/mlp.toml"), "").unwrap();
        std::fs::write(dir.path().join("examples/.hidden"), "").unwrap();
        assert_eq!(path_candidates(dir.path(), "ex"), ["examples/"]);
        assert_eq!(
            path_candidates(dir.path(), "examples/m"),
            ["examples/mlp.toml", "examples/mnist.toml"]
        );
        assert_eq!(
            path_candidates(dir.path(), "examples/"),
            ["examples/data/", "examples/mlp.toml", "examples/mnist.toml"]
        );
        assert!(path_candidates(dir.path(), "nope/x").is_empty());

        let mut input = InputLine::new("ex");
        let mut hint = None;
        // What Tab does: candidates for the last word, applied.
        let tab = |input: &mut InputLine, hint: &mut Option<String>| {
            let typed = input.last_word().to_string();
            complete(input, hint, &typed, &path_candidates(dir.path(), &typed));
        };
        complete(
            &mut input,
            &mut hint,
            "ex",
            &path_candidates(dir.path(), "ex"),
        );
        assert_eq!(input.text, "examples/");
        tab(&mut input, &mut hint);
        assert_eq!(input.text, "examples/");
        assert_eq!(hint.as_deref(), Some("data/  mlp.toml  mnist.toml"));
        input.key(KeyEvent::from(KeyCode::Char('m')));
        tab(&mut input, &mut hint);
        assert_eq!(input.text, "examples/m");
        input.key(KeyEvent::from(KeyCode::Char('n')));
        tab(&mut input, &mut hint);
        assert_eq!(input.text, "examples/mnist.toml");
        // Stale candidates (the user typed on) are ignored.
        complete(&mut input, &mut hint, "ex", &["examples/".into()]);
        assert_eq!(input.text, "examples/mnist.toml");
    }
}
