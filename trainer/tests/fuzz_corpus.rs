//! The committed fuzz corpora (`fuzz/corpus/TARGET/*`) replayed on stable through the function
//! each fuzz target calls: no file may make it panic. The seeds written by the real tools
//! (image encoders, NumPy, safetensors) must also be read without error, and the broken ones
//! refused.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

/// The files of `fuzz/corpus/TARGET` by file name, with their bytes; panics when there are none.
fn files(target: &str) -> BTreeMap<String, Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_file() {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            out.insert(name, std::fs::read(&p).unwrap());
        }
    }
    assert!(!out.is_empty(), "no corpus files in {}", dir.display());
    out
}

/// `read` on `bytes`: `Ok` or the error's text; panics naming `what` when `read` panics.
fn attempt<T, E: std::fmt::Display>(
    what: &str,
    bytes: &[u8],
    read: &impl Fn(&[u8]) -> Result<T, E>,
) -> Result<(), String> {
    catch_unwind(AssertUnwindSafe(|| read(bytes)))
        .unwrap_or_else(|_| panic!("{what} panicked"))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Every file of `fuzz/corpus/TARGET` through `read`, by file name: `Ok` or the error's text.
/// Panics naming the file that made `read` panic.
fn replay<T, E: std::fmt::Display>(
    target: &str,
    read: impl Fn(&[u8]) -> Result<T, E>,
) -> BTreeMap<String, Result<(), String>> {
    files(target)
        .into_iter()
        .map(|(name, bytes)| {
            let got = attempt(&format!("{target}/{name}"), &bytes, &read);
            (name, got)
        })
        .collect()
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

#[test]
fn image_decode() {
    let read = |b: &[u8]| ddp_trainer::data::images::fuzz_decode(b);
    for (name, bytes) in files("image_decode") {
        // The seeds are real images: each decodes (to inputs in [0, 1]).
        let inputs = read(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!inputs.is_empty(), "{name}");
        // Cut short or with bytes flipped, it may fail but must not panic.
        for cut in [1, 2, bytes.len() / 2, bytes.len() - 1] {
            let _ = attempt(&format!("{name} cut to {cut} bytes"), &bytes[..cut], &read);
        }
        let mut flipped = bytes.clone();
        for i in (1..flipped.len()).step_by(7) {
            flipped[i] ^= 0x5a;
        }
        let _ = attempt(&format!("{name} with bytes flipped"), &flipped, &read);
    }
}

#[test]
fn csv_table_corpus() {
    let got = replay("csv_table", ddp_trainer::data::table::read_csv_bytes);
    assert!(
        got.values().any(Result::is_ok),
        "no corpus file reads as a table: {got:?}"
    );
}

#[test]
fn parquet_table_corpus() {
    let got = replay(
        "parquet_table",
        ddp_trainer::data::table::read_parquet_bytes,
    );
    assert!(
        got.values().any(Result::is_ok),
        "no corpus file reads as a table: {got:?}"
    );
}
