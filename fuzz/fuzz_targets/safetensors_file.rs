//! Arbitrary bytes read as a `.safetensors` file holding `x` and `y`: its header, the two
//! tensors, and a batch of their samples. Errors are fine; a panic is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ddp_trainer::data::tensors::read_safetensors(data);
});
