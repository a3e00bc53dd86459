//! Every committed fuzz corpus file (`fuzz/corpus/TARGET/*`) through the function its target
//! fuzzes, on the stable toolchain: whatever the bytes, the parser returns (an error is fine) and
//! never panics. `cargo +nightly fuzz run TARGET` explores further (docs/data.md, "Fuzzing").

use std::path::{Path, PathBuf};

/// The corpus files of `target`, sorted, with their bytes (at least one).
fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: no corpus files", dir.display());
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

#[test]
fn csv_table_corpus_never_panics() {
    let mut read = 0;
    for (path, bytes) in corpus("csv_table") {
        let result = std::panic::catch_unwind(|| ddp_trainer::data::table::read_csv_bytes(&bytes));
        let r = result.unwrap_or_else(|_| panic!("{} panicked", path.display()));
        read += usize::from(r.is_ok());
    }
    assert!(read > 0, "no corpus file reads as a table");
}

#[test]
fn parquet_table_corpus_never_panics() {
    let mut read = 0;
    for (path, bytes) in corpus("parquet_table") {
        let result =
            std::panic::catch_unwind(|| ddp_trainer::data::table::read_parquet_bytes(&bytes));
        let r = result.unwrap_or_else(|_| panic!("{} panicked", path.display()));
        read += usize::from(r.is_ok());
    }
    assert!(read > 0, "no corpus file reads as a table");
}
