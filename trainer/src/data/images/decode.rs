//! One image file's bytes to the 8-bit planar pixels (channel, row, column) a sample is made of.
//!
//! The format is told by the content (PNG, JPEG, BMP or WebP, whatever the file's extension),
//! decoded with the `image` crate, and converted to the folder's channel count as PIL converts:
//! RGB to grayscale with ITU-R 601-2 luma in PIL's fixed point
//! (`(19595·R + 38470·G + 7471·B + 32768) >> 16`), grayscale to RGB by repeating the channel,
//! alpha dropped (torchvision's loader does `convert("RGB")`). 16-bit images are rounded to 8
//! bits. With `data.size`, the image is then resized and centre-cropped ([`super::resize`]);
//! without it, it must have the folder's size. The orientation tag of a JPEG is not applied
//! (PIL does not either).

use std::io::{BufReader, Cursor, Read, Seek};
use std::path::Path;

use image::{ColorType, ImageDecoder, ImageFormat, ImageReader};

use super::resize::resize_crop;

/// The formats read.
pub const FORMATS: [ImageFormat; 4] = [
    ImageFormat::Png,
    ImageFormat::Jpeg,
    ImageFormat::Bmp,
    ImageFormat::WebP,
];

/// Most bytes one decoded image may take (the `image` crate's default limit).
pub const MAX_BYTES: u64 = 512 << 20;

/// An image's header: its size and its channels (1 for grayscale, 3 for colour; alpha aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub height: usize,
    pub width: usize,
    pub channels: usize,
}

/// What turns an image into a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// 1 or 3.
    pub channels: usize,
    /// The sample's `[H, W]`.
    pub size: [usize; 2],
    /// Resize and centre-crop to `size` (`data.size`); without it an image of another size is a
    /// [`Problem::Size`].
    pub resize: bool,
    /// Most bytes one decoded image may take.
    pub max_bytes: u64,
}

impl Settings {
    /// Values per sample: `C·H·W`.
    pub fn sample_len(&self) -> usize {
        self.channels * self.size[0] * self.size[1]
    }
}

/// Why an image did not become a sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// Not an image of a format read, or corrupt or truncated: what was wrong.
    Unreadable(String),
    /// Decoded, but `height`×`width` without `data.size` to bring it to the folder's size.
    Size { height: usize, width: usize },
}

/// Buffers reused from image to image.
#[derive(Default)]
pub struct Scratch {
    raw: Vec<u8>,
    planar: Vec<u8>,
    resized: Vec<u8>,
}

/// The format of `bytes`, told by their content; an error says what they are instead.
pub fn sniff(bytes: &[u8]) -> Result<ImageFormat, String> {
    if bytes.is_empty() {
        return Err("is empty (0 bytes), not an image".into());
    }
    match image::guess_format(bytes) {
        Ok(f) if FORMATS.contains(&f) => Ok(f),
        Ok(f) => Err(format!(
            "is an image in the {} format: only PNG, JPEG, BMP and WebP are read; convert it, or remove it",
            format!("{f:?}").to_uppercase()
        )),
        Err(_) => {
            let head: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
            Err(format!(
                "is not an image: its content is not PNG, JPEG, BMP or WebP (it starts with the bytes {})",
                head.join(" ")
            ))
        }
    }
}

/// The channels of a decoder's pixels (1 or 3), or what is unsupported.
fn channels_of(color: ColorType) -> usize {
    if color.has_color() { 3 } else { 1 }
}

/// A decoder of `format` whose own allocations stay within `max_bytes`.
fn decoder_of<'a, R: std::io::BufRead + Seek + 'a>(
    reader: R,
    format: ImageFormat,
    max_bytes: u64,
) -> Result<impl ImageDecoder + 'a, String> {
    let mut r = ImageReader::with_format(reader, format);
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(max_bytes);
    r.limits(limits);
    r.into_decoder()
        .map_err(|e| decode_error(format, e, max_bytes))
}

fn decode_error(format: ImageFormat, e: image::ImageError, max_bytes: u64) -> String {
    if let image::ImageError::Limits(_) = e {
        return format!(
            "is too large: decoding it would take more than the {} an image may",
            amount(max_bytes)
        );
    }
    format!(
        "cannot be decoded as {}: {e} (corrupt or truncated)",
        format!("{format:?}").to_uppercase()
    )
}

/// Reads the header of the image file at `path` (its format told by the content).
pub fn header(path: &Path) -> Result<Header, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot be read: {e}"))?;
    let mut reader = BufReader::new(file);
    let mut start = Vec::with_capacity(16);
    (&mut reader)
        .take(16)
        .read_to_end(&mut start)
        .map_err(|e| format!("cannot be read: {e}"))?;
    let format = sniff(&start)?;
    reader
        .rewind()
        .map_err(|e| format!("cannot be read: {e}"))?;
    let dec = decoder_of(reader, format, MAX_BYTES)?;
    let (w, h) = dec.dimensions();
    Ok(Header {
        height: h as usize,
        width: w as usize,
        channels: channels_of(dec.color_type()),
    })
}

/// Decodes `bytes` into `out` as planar 8-bit pixels with `channels` channels; returns the
/// image's `(height, width)`.
pub fn decode(
    bytes: &[u8],
    channels: usize,
    max_bytes: u64,
    raw: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Result<(usize, usize), String> {
    let format = sniff(bytes)?;
    let dec = decoder_of(Cursor::new(bytes), format, max_bytes)?;
    let (w, h) = dec.dimensions();
    let (w, h) = (w as usize, h as usize);
    let total = dec.total_bytes();
    if total > max_bytes {
        return Err(format!(
            "is {w}×{h} pixels: decoded it would take {}, more than the {} an image may",
            amount(total),
            amount(max_bytes)
        ));
    }
    if h == 0 || w == 0 {
        return Err(format!("is {w}×{h} pixels: an image without pixels"));
    }
    let color = dec.color_type();
    raw.clear();
    raw.resize(total as usize, 0);
    dec.read_image(raw)
        .map_err(|e| decode_error(format, e, max_bytes))?;
    let n = h * w;
    out.clear();
    out.resize(channels * n, 0);
    match color {
        ColorType::L8 => interleaved(raw, 1, channels, n, out),
        ColorType::La8 => interleaved(raw, 2, channels, n, out),
        ColorType::Rgb8 => interleaved(raw, 3, channels, n, out),
        ColorType::Rgba8 => interleaved(raw, 4, channels, n, out),
        ColorType::L16 | ColorType::La16 | ColorType::Rgb16 | ColorType::Rgba16 => {
            let stride = color.channel_count() as usize;
            let eight: Vec<u8> = raw
                .chunks_exact(2)
                .map(|b| to_8_bits(u16::from_ne_bytes([b[0], b[1]])))
                .collect();
            interleaved(&eight, stride, channels, n, out);
        }
        other => {
            return Err(format!(
                "has {other:?} pixels, which are not read: save it with 8-bit channels"
            ));
        }
    }
    Ok((h, w))
}

/// `b` bytes for a message: in MiB from 1 MiB on.
fn amount(b: u64) -> String {
    if b >= 1 << 20 {
        format!("{} MiB", b >> 20)
    } else {
        format!("{b} bytes")
    }
}

/// A 16-bit value rounded to 8 bits.
fn to_8_bits(v: u16) -> u8 {
    ((v as u32 * 255 + 32767) / 65535) as u8
}

/// `src` (`n` pixels of `stride` bytes: gray, gray + alpha, RGB or RGBA) to `channels` planes.
fn interleaved(src: &[u8], stride: usize, channels: usize, n: usize, out: &mut [u8]) {
    let px = src.chunks_exact(stride).take(n);
    match (stride >= 3, channels) {
        (false, 1) => {
            for (o, p) in out.iter_mut().zip(px) {
                *o = p[0];
            }
        }
        (false, _) => {
            let (r, rest) = out.split_at_mut(n);
            let (g, b) = rest.split_at_mut(n);
            for (i, p) in px.enumerate() {
                (r[i], g[i], b[i]) = (p[0], p[0], p[0]);
            }
        }
        (true, 1) => {
            for (o, p) in out.iter_mut().zip(px) {
                *o = luma(p[0], p[1], p[2]);
            }
        }
        (true, _) => {
            let (r, rest) = out.split_at_mut(n);
            let (g, b) = rest.split_at_mut(n);
            for (i, p) in px.enumerate() {
                (r[i], g[i], b[i]) = (p[0], p[1], p[2]);
            }
        }
    }
}

/// PIL's RGB → L: ITU-R 601-2 luma in 16-bit fixed point, rounded.
pub fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((r as u32 * 19595 + g as u32 * 38470 + b as u32 * 7471 + 0x8000) >> 16) as u8
}

/// Decodes `bytes` into `dst` (`settings.sample_len()` planar 8-bit values): converted to the
/// channels, resized and cropped where `settings.resize`.
pub fn load_into(
    bytes: &[u8],
    settings: &Settings,
    scratch: &mut Scratch,
    dst: &mut [u8],
) -> Result<(), Problem> {
    let c = settings.channels;
    let (h, w) = decode(
        bytes,
        c,
        settings.max_bytes,
        &mut scratch.raw,
        &mut scratch.planar,
    )
    .map_err(Problem::Unreadable)?;
    if settings.resize {
        resize_crop(
            &scratch.planar,
            c,
            (h, w),
            settings.size,
            &mut scratch.resized,
            dst,
        );
    } else if [h, w] == settings.size {
        dst.copy_from_slice(&scratch.planar);
    } else {
        return Err(Problem::Size {
            height: h,
            width: w,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{DynamicImage, ImageBuffer};

    fn encode(img: &DynamicImage, f: ImageFormat) -> Vec<u8> {
        let mut c = Cursor::new(Vec::new());
        img.write_to(&mut c, f).unwrap();
        c.into_inner()
    }

    fn planar(bytes: &[u8], channels: usize) -> ((usize, usize), Vec<u8>) {
        let mut out = Vec::new();
        let hw = decode(bytes, channels, MAX_BYTES, &mut Vec::new(), &mut out).unwrap();
        (hw, out)
    }

    /// A 3-wide, 2-high RGBA image with distinct channels.
    fn rgba() -> DynamicImage {
        DynamicImage::ImageRgba8(ImageBuffer::from_fn(3, 2, |x, y| {
            let i = (y * 3 + x) as u8;
            image::Rgba([10 + i, 100 + i, 200 + i, 7])
        }))
    }

    #[test]
    fn colour_to_planes_and_to_pils_luma() {
        let png = encode(&rgba(), ImageFormat::Png);
        let ((h, w), rgb) = planar(&png, 3);
        assert_eq!((h, w), (2, 3));
        assert_eq!(
            rgb,
            [
                10, 11, 12, 13, 14, 15, 100, 101, 102, 103, 104, 105, 200, 201, 202, 203, 204, 205
            ]
        );
        let (_, l) = planar(&png, 1);
        // (10·19595 + 100·38470 + 200·7471 + 32768) >> 16 = 5569918 >> 16 = 84 (84.99), as
        // PIL's Image.new("RGB", (1, 1), (10, 100, 200)).convert("L") gives; (11, 101, 201): 85.
        assert_eq!(l[0], 84);
        assert_eq!((luma(10, 100, 200), luma(11, 101, 201)), (84, 85));
        assert_eq!(
            l,
            (0..6u8)
                .map(|i| luma(10 + i, 100 + i, 200 + i))
                .collect::<Vec<_>>()
        );
        // Gray stays itself through the formula, and pure colours weigh as PIL's.
        assert_eq!((0..=255).filter(|&v| luma(v, v, v) != v).count(), 0);
        assert_eq!(
            (luma(255, 0, 0), luma(0, 255, 0), luma(0, 0, 255)),
            (76, 150, 29)
        );
    }

    #[test]
    fn gray_to_rgb_repeats_and_16_bits_round() {
        let g = DynamicImage::ImageLuma8(ImageBuffer::from_raw(2, 1, vec![3u8, 250]).unwrap());
        let bmp = encode(&g.to_rgb8().into(), ImageFormat::Bmp);
        assert_eq!(planar(&bmp, 3).1, [3, 250, 3, 250, 3, 250]);
        let png = encode(&g, ImageFormat::Png);
        assert_eq!(planar(&png, 3).1, [3, 250, 3, 250, 3, 250]);
        assert_eq!(planar(&png, 1).1, [3, 250]);
        let g16 = DynamicImage::ImageLuma16(
            ImageBuffer::from_raw(4, 1, vec![0u16, 128, 129, 65535]).unwrap(),
        );
        let png = encode(&g16, ImageFormat::Png);
        // 128·255 / 65535 = 0.498 → 0; 129 → 0.502 → 1.
        assert_eq!(planar(&png, 1).1, [0, 0, 1, 255]);
        assert_eq!(header_of(&png), (1, 4, 1));
    }

    fn header_of(bytes: &[u8]) -> (usize, usize, usize) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.bin");
        std::fs::write(&p, bytes).unwrap();
        let h = header(&p).unwrap();
        (h.height, h.width, h.channels)
    }

    #[test]
    fn every_format_decodes_to_the_same_pixels_when_lossless() {
        let img = rgba();
        let want = planar(&encode(&img, ImageFormat::Png), 3).1;
        let rgb: DynamicImage = img.to_rgb8().into();
        for f in [ImageFormat::Bmp, ImageFormat::WebP] {
            let bytes = encode(&rgb, f);
            assert_eq!(planar(&bytes, 3).1, want, "{f:?}");
            assert_eq!(header_of(&bytes), (2, 3, 3), "{f:?}");
        }
        let jpeg = encode(&rgb, ImageFormat::Jpeg);
        let ((h, w), px) = planar(&jpeg, 3);
        assert_eq!((h, w, px.len()), (2, 3, 18));
        assert_eq!(header_of(&jpeg), (2, 3, 3));
        assert_eq!(header_of(&encode(&img, ImageFormat::Png)), (2, 3, 3));
    }

    #[test]
    fn bad_bytes_say_what_they_are() {
        let err = |b: &[u8]| planar_err(b);
        assert_eq!(err(b""), "is empty (0 bytes), not an image");
        assert_eq!(
            err(b"hello, world"),
            "is not an image: its content is not PNG, JPEG, BMP or WebP (it starts with the bytes 68 65 6c 6c 6f 2c 20 77)"
        );
        assert_eq!(
            err(b"GIF89a\x01\x00\x01\x00"),
            "is an image in the GIF format: only PNG, JPEG, BMP and WebP are read; convert it, or remove it"
        );
        let png = encode(&rgba(), ImageFormat::Png);
        let e = err(&png[..png.len() - 20]);
        assert!(
            e.starts_with("cannot be decoded as PNG: ") && e.ends_with("(corrupt or truncated)"),
            "{e}"
        );
        let e = err(&png[..30]);
        assert!(e.starts_with("cannot be decoded as PNG: "), "{e}");
    }

    fn planar_err(bytes: &[u8]) -> String {
        decode(bytes, 3, MAX_BYTES, &mut Vec::new(), &mut Vec::new()).unwrap_err()
    }

    #[test]
    fn load_into_checks_the_size_or_resizes() {
        let png = encode(&rgba(), ImageFormat::Png);
        let mut s = Scratch::default();
        let mut dst = vec![0; 6];
        let same = Settings {
            channels: 1,
            size: [2, 3],
            resize: false,
            max_bytes: MAX_BYTES,
        };
        load_into(&png, &same, &mut s, &mut dst).unwrap();
        assert_eq!(dst[0], 84);
        let other = Settings {
            size: [3, 2],
            ..same
        };
        assert_eq!(
            load_into(&png, &other, &mut s, &mut dst),
            Err(Problem::Size {
                height: 2,
                width: 3
            })
        );
        let crop = Settings {
            size: [2, 1],
            resize: true,
            ..same
        };
        let mut one = vec![0; 2];
        load_into(&png, &crop, &mut s, &mut one).unwrap();
        // covers 2×1 at 2×3: the middle column.
        assert_eq!(one, [luma(11, 101, 201), luma(14, 104, 204)]);
        let small = Settings {
            max_bytes: 10,
            ..same
        };
        assert_eq!(
            load_into(&png, &small, &mut s, &mut dst),
            Err(Problem::Unreadable(
                "is too large: decoding it would take more than the 10 bytes an image may".into()
            ))
        );
    }
}
