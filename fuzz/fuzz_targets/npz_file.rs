//! Arbitrary bytes read as an `.npz` archive: its zip directory, the headers of its `x.npy` and
//! `y.npy` members, and a batch of their samples. Errors are fine; a panic is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ddp_trainer::data::tensors::read_npz(data);
});
