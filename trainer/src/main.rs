//! `ddp-trainer`: one data-parallel replica (see [`ddp_trainer::cli`]).

fn main() -> std::process::ExitCode {
    ddp_trainer::cli::main()
}
