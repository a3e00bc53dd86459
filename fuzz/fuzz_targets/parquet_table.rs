//! Arbitrary bytes as a Parquet table (the first column the label, every other numeric column a
//! feature), through the reader `data.name = "parquet"` uses: errors are fine, panics are not.
//!
//! The `parquet` crate asserts on some damaged input (a dictionary-encoded page without its
//! dictionary, for one) instead of returning an error; the reader catches those panics and
//! reports the damage as an error. libFuzzer's panic hook would abort on them all the same, so
//! it is kept for panics anywhere else: a panic located in the `parquet` crate or the crates it
//! decodes with is left to the reader's catch; any other is a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;

/// Source paths of the crates whose panics the reader catches.
const CAUGHT: &[&str] = &[
    "/parquet-",
    "/bytes-",
    "/snap-",
    "/lz4_flex-",
    "/zstd",
    "/flate2-",
    "/miniz_oxide-",
];

fuzz_target!(
    init: {
        let crash = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let file = info.location().map_or("", |l| l.file());
            if !CAUGHT.iter().any(|c| file.contains(c)) {
                crash(info);
            }
        }));
    },
    |data: &[u8]| {
        let _ = ddp_trainer::data::table::read_parquet_bytes(data);
    }
);
