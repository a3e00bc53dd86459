//! The committed fuzz corpora (`fuzz/corpus/TARGET/*`) replayed on stable through the function
//! each fuzz target calls: no file may make it panic. The seeds written by the real tools
//! (NumPy, safetensors) must also be read without error, and the broken ones refused.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

/// Every file of `fuzz/corpus/TARGET` through `read`, by file name: `Ok` or the error's text.
/// Panics naming the file that made `read` panic.
fn replay<T, E: std::fmt::Display>(
    target: &str,
    read: impl Fn(&[u8]) -> Result<T, E>,
) -> BTreeMap<String, Result<(), String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        let bytes = std::fs::read(&p).unwrap();
        let got = catch_unwind(AssertUnwindSafe(|| read(&bytes)))
            .unwrap_or_else(|_| panic!("{} panicked", p.display()));
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        out.insert(name, got.map(|_| ()).map_err(|e| e.to_string()));
    }
    assert!(!out.is_empty(), "no corpus files in {}", dir.display());
    out
}

/// The seeds named in `ok` were read; every other seed was refused.
fn read_only(got: &BTreeMap<String, Result<(), String>>, ok: &[&str]) {
    for name in ok {
        assert!(
            matches!(got.get(*name), Some(Ok(()))),
            "{name}: {:?}",
            got.get(*name)
        );
    }
    for (name, r) in got {
        if !ok.contains(&name.as_str()) {
            assert!(r.is_err(), "{name} was read");
        }
    }
}

#[test]
fn safetensors_file_corpus() {
    let got = replay(
        "safetensors_file",
        ddp_trainer::data::tensors::read_safetensors,
    );
    read_only(&got, &["bf16-values", "f16-f64", "f32-i64", "u8-image"]);
}

#[test]
fn npy_file_corpus() {
    let got = replay("npy_file", ddp_trainer::data::tensors::read_npy);
    read_only(&got, &["f2", "negative", "v1-f4", "v2-u1", "v3-i8"]);
}

#[test]
fn npz_file_corpus() {
    let got = replay("npz_file", ddp_trainer::data::tensors::read_npz);
    read_only(&got, &["savez", "savez-u8"]);
}
