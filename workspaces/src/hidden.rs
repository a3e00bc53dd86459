//! Running the hidden sub-commands ([`HiddenCommand`]) a front end's own executable is started
//! with: a run's replica, its supervisor, the workspace's Slurm watcher.

use std::ffi::OsString;
use std::process::ExitCode;

use crate::invocation::HiddenCommand;
use crate::runs::run::RunStatus;

/// Runs the hidden sub-command named by `args` (the whole command line, `args[0]` being the
/// executable), if it names one, and returns its exit code; `None` for any other command line.
///
/// **Call this first in `main` of every front end that starts runs** (the `ddp` CLI, a TUI, a
/// notebook kernel), before parsing arguments or starting anything:
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
///     if let Some(code) = ddp_workspaces::run_hidden_command(&args) {
///         return code;
///     }
///     // ... the front end itself
///     std::process::ExitCode::SUCCESS
/// }
/// ```
///
/// A run's supervisor (spawned by [`crate::engine`]), its replicas and the Slurm
/// watcher are started from `std::env::current_exe()`, that is from the front end's own binary:
/// - `EXE __supervise RUN_DIR [--resume]` supervises the run in `RUN_DIR`; exit code 0 when the
///   run completed, 1 otherwise.
/// - `EXE __replica SPEC --out RUN_DIR [--resume]` runs one replica (the trainer's command line).
/// - `EXE __slurm-watch ROOT` keeps the workspace's Slurm runs in step with their jobs.
/// - `EXE __sweep ROOT ID` drives the scheduled search `ID` ([`crate::actions::search`]).
///
/// A hidden sub-command with bad arguments prints clap's message and exits 2.
pub fn run_hidden_command(args: &[OsString]) -> Option<ExitCode> {
    let command = match HiddenCommand::parse(args)? {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return Some(ExitCode::from(e.exit_code().clamp(0, 255) as u8));
        }
    };
    Some(match command {
        HiddenCommand::Replica(a) => {
            ddp_trainer::cli::run_args_as(a, &[crate::invocation::REPLICA])
        }
        HiddenCommand::Supervise { run_dir, resume } => {
            match crate::engine::supervisor::supervise(&run_dir, resume) {
                Ok(RunStatus::Completed) => ExitCode::SUCCESS,
                Ok(status) => {
                    eprintln!("ddp supervisor: run {status}");
                    ExitCode::from(1)
                }
                Err(e) => {
                    eprintln!("ddp supervisor: {e}");
                    ExitCode::from(1)
                }
            }
        }
        HiddenCommand::Sweep { root, id } => {
            match crate::actions::search::driver::drive(&root, &id) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("ddp __sweep: {e}");
                    ExitCode::from(1)
                }
            }
        }
        HiddenCommand::SlurmWatch { root } => match crate::engine::slurm::watcher::watch(&root) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ddp __slurm-watch: {e}");
                ExitCode::from(1)
            }
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hidden_command_lines_are_run() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(run_hidden_command(&args(&["ddp", "ls"])), None);
        assert_eq!(run_hidden_command(&args(&["ddp"])), None);
        assert_eq!(run_hidden_command(&[]), None);
        assert_eq!(
            run_hidden_command(&args(&["ddp", crate::invocation::SUPERVISE])),
            Some(ExitCode::from(2))
        );
    }
}
