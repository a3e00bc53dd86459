//! Arbitrary bytes read as an `.npy` file: its header, its first rows as inputs, and a batch of
//! it as both inputs and targets. Errors are fine; a panic is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ddp_trainer::data::tensors::read_npy(data);
});
