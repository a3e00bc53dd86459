//! The committed fuzz corpora (`fuzz/corpus/TARGET/*`) replayed through the functions their
//! targets call, on stable Rust: none may panic. One test per target.

use std::path::{Path, PathBuf};

/// The files of `fuzz/corpus/target`, sorted, with their bytes; panics when there are none.
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
fn image_decode() {
    for (path, bytes) in corpus("image_decode") {
        // The seeds are real images: each decodes (to inputs in [0, 1]).
        let inputs = ddp_trainer::data::images::fuzz_decode(&bytes)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!inputs.is_empty(), "{}", path.display());
        // Cut short or with a byte flipped, it may fail but must not panic.
        for cut in [1, 2, bytes.len() / 2, bytes.len() - 1] {
            let _ = ddp_trainer::data::images::fuzz_decode(&bytes[..cut]);
        }
        let mut flipped = bytes.clone();
        for i in (1..flipped.len()).step_by(7) {
            flipped[i] ^= 0x5a;
        }
        let _ = ddp_trainer::data::images::fuzz_decode(&flipped);
    }
}
