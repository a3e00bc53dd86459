//! Arbitrary bytes as an image folder's file: the first byte picks the channels and the resize,
//! the rest is decoded (PNG, JPEG, BMP, WebP, told by the content). Errors are fine; a panic is
//! a bug (see `ddp_trainer::data::images::fuzz_decode`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ddp_trainer::data::images::fuzz_decode(data);
});
