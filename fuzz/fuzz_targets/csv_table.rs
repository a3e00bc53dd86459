//! Arbitrary bytes as a CSV table (the first column the label, every other numeric column a
//! feature), through the reader `data.name = "csv"` uses: errors are fine, panics are not.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ddp_trainer::data::table::read_csv_bytes(data);
});
