//! Loads the table of a spec (`data.name = "csv"` or `"parquet"`) the way a replica does, and
//! prints one JSON line: the seconds `data::table::open` took, the peak resident memory of this
//! process, the rows and features read. `scripts/bench-tables.sh` times it beside pandas.
//!
//!     cargo run --release -p ddp-trainer --example table_load -- SPEC.toml [--set KEY=VALUE]...

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use ddp_trainer::data::{OpenContext, table};
use ddp_trainer::spec::Spec;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(spec_path) = args.next().map(PathBuf::from) else {
        eprintln!("usage: table_load SPEC.toml [--set KEY=VALUE]...");
        return ExitCode::from(2);
    };
    let mut sets = Vec::new();
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--set", Some(kv)) => sets.push(kv),
            _ => {
                eprintln!("usage: table_load SPEC.toml [--set KEY=VALUE]...");
                return ExitCode::from(2);
            }
        }
    }
    let spec = match Spec::load(&spec_path, &sets) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let t0 = Instant::now();
    let parts = match table::open(&spec, &OpenContext { workers }) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let seconds = t0.elapsed().as_secs_f64();
    // SAFETY: getrusage fills the struct it is given.
    let peak_kib = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u.ru_maxrss
    };
    let [_, _, features] = parts.train.shape();
    println!(
        "{{\"seconds\": {seconds:.4}, \"peak_rss_mib\": {:.1}, \"rows\": {}, \"features\": {features}, \"threads\": {workers}}}",
        peak_kib as f64 / 1024.0,
        parts.train.len() + parts.test.len(),
    );
    ExitCode::SUCCESS
}
