//! Image folders (`data.name = "image-folder"`), torchvision's `ImageFolder` layout:
//! `path/train/<class>/<image>` and optionally `path/test/<class>/<image>` (without `test/`,
//! `data.test_fraction` of `train/` is held out, seeded). Classes are the sorted folder names;
//! PNG, JPEG, BMP and WebP images are decoded to `[C, H, W]` samples with pixels scaled to
//! `[0, 1]` (torchvision's `ToTensor`), converted to `data.channels`, resized and centre-cropped
//! to `data.size` (torchvision's `Resize` + `CenterCrop`, bit for bit), and normalised with
//! `data.mean`/`data.std` or figures computed over the training part (`normalize = "auto"`).
//! Images are decoded on background threads, once into memory when they fit (`data.cache`), or
//! each time a batch is filled. See `docs/data.md`, "Image folders".
//!
//! Layout:
//! - this file: [`open`] and [`fuzz_decode`].
//! - [`load`]: opening a folder: the walk, the first image, every image decoded or checked in
//!   parallel, unreadable ones refused or skipped, the test part, the normalisation, the record.
//! - [`scan`]: the folder walk: classes and image files in torchvision's order, and the layout
//!   errors.
//! - [`decode`]: one file's bytes to planar 8-bit pixels of the folder's channels and size.
//! - [`resize`]: PIL's bilinear resize to cover `[H, W]`, and torchvision's centre crop.
//! - [`normalize`]: pixels to `f32` inputs (a table per channel), and the histogram behind
//!   `normalize = "auto"`.
//! - [`source`]: the [`Dataset`](crate::data::Dataset)s: [`source::Cached`] (decoded in
//!   memory) and [`source::Lazy`] (decoded when filled).
//! - [`cache`]: whether the decoded images fit in memory (`data.cache = "auto"`).
//! - [`parallel`]: work over items on threads, results in item order.

pub mod cache;
pub mod decode;
pub mod load;
pub mod normalize;
pub mod parallel;
pub mod resize;
pub mod scan;
pub mod source;

pub use load::open;

/// Decodes arbitrary `data` as an image file, as the folder would: the first byte picks the
/// channels (bit 0: 1 or 3), whether to resize (bit 1) and the size (bits 2–4: height − 1,
/// bits 5–7: width − 1); the rest is the file. Returns the sample's inputs (`p / 255`), or why
/// the bytes are not a readable image. Never panics, whatever the bytes (the `image_decode`
/// fuzz target).
pub fn fuzz_decode(data: &[u8]) -> Result<Vec<f32>, String> {
    let (&knobs, bytes) = data.split_first().ok_or("no bytes")?;
    let channels = if knobs & 1 == 0 { 1 } else { 3 };
    let max_bytes = 16 << 20;
    let mut raw = Vec::new();
    let mut planar = Vec::new();
    let (h, w) = decode::decode(bytes, channels, max_bytes, &mut raw, &mut planar)?;
    let settings = decode::Settings {
        channels,
        size: if knobs & 2 != 0 {
            [1 + (knobs as usize >> 2 & 7), 1 + (knobs as usize >> 5)]
        } else {
            [h, w]
        },
        resize: knobs & 2 != 0,
        max_bytes,
    };
    let mut pixels = vec![0u8; settings.sample_len()];
    decode::load_into(
        bytes,
        &settings,
        &mut decode::Scratch::default(),
        &mut pixels,
    )
    .map_err(|p| format!("{p:?}"))?;
    let mut out = Vec::with_capacity(pixels.len());
    normalize::Lut::new(channels, None).extend(&pixels, &mut out);
    assert!(out.iter().all(|v| (0.0..=1.0).contains(v)));
    Ok(out)
}
