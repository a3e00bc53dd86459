//! `ddp-kernel`: the Jupyter kernel (`-f CONNECTION_FILE`, as Jupyter starts it) and its
//! kernelspec installer (`install [--warm]`, `uninstall`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ddp_kernel::install::{self, InstallArgs, Where};

#[derive(Parser, Debug)]
#[command(
    name = "ddp-kernel",
    version,
    about = "Jupyter kernel for ddp: Rust cells (evcxr) and %ddp magics with live run cards",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// The connection file Jupyter wrote for this kernel (how Jupyter starts it).
    #[arg(short = 'f', long = "connection-file", value_name = "FILE")]
    connection_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Install the kernelspec `ddp` (display name "Rust (ddp)") for this executable; `--warm`
    /// also prepares the `%%ddp train` cells' build cache.
    Install(InstallArgs),
    /// Remove the kernelspec `ddp`.
    Uninstall(Where),
}

fn main() -> ExitCode {
    // evcxr runs cells in a child process of this executable: in that child this never returns.
    evcxr::runtime_hook();
    // evcxr's cells and `%%ddp train` cells are generated crates built with cargo: a workspace
    // wrapper in the environment (clippy's, as `cargo clippy` and the test command set it) would
    // lint them and fail their builds on warnings. Set before any thread starts.
    // SAFETY: no other thread exists yet.
    unsafe { std::env::set_var("RUSTC_WORKSPACE_WRAPPER", "") };
    // Runs started from a notebook are supervised by this executable too.
    if let Some(code) = ddp_workspaces::run_hidden_command(&std::env::args_os().collect::<Vec<_>>())
    {
        return code;
    }
    let cli = Cli::parse();
    let result = match (&cli.command, &cli.connection_file) {
        (Some(Command::Install(args)), _) => std::env::current_exe()
            .map_err(|e| ddp_kernel::Error::io("current executable", e))
            .and_then(|exe| install::run(args, &exe)),
        (Some(Command::Uninstall(w)), _) => {
            install::uninstall(&w.destination()).map(|dir| match dir {
                Some(dir) => println!(
                    "removed kernelspec {} from {}",
                    install::KERNEL_NAME,
                    dir.display()
                ),
                None => println!("kernelspec {} is not installed there", install::KERNEL_NAME),
            })
        }
        (None, Some(file)) => ddp_kernel::server::serve(file),
        (None, None) => {
            eprintln!(
                "ddp-kernel: Jupyter starts the kernel with `-f CONNECTION_FILE`; install it with `ddp-kernel install` (see --help)"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ddp-kernel: {e}");
            ExitCode::FAILURE
        }
    }
}
