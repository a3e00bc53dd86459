//! `data.size = [H, W]`: an image resized so that it covers H×W, then centre-cropped to H×W:
//! torchvision's `Resize` + `CenterCrop` on PIL images, reproduced bit for bit.
//!
//! The resized size keeps the aspect ratio: the side that needs the larger scale gets its target
//! exactly and the other `int(target · other / side)` (truncated, as torchvision computes it),
//! at least its target. For a square target `[S, S]` this is torchvision's `Resize(S)` (the
//! shorter side to S). The filter is PIL's bilinear (`Image.BILINEAR`, what torchvision's
//! `Resize` uses): a triangle whose support widens with the reduction (antialiasing), applied
//! horizontally, then vertically, each pass in PIL's 22-bit fixed point and rounded to 8 bits.
//! The crop starts at `round((size − target) / 2)` in each direction, halves rounded to even
//! (Python's `round`, torchvision's `CenterCrop`).

/// The fixed-point precision of PIL's 8-bit resampling.
const PRECISION_BITS: u32 = 32 - 8 - 2;

/// The size an image of `h`×`w` is resized to so that it covers `size` = `[H, W]`.
pub fn cover_size(h: usize, w: usize, size: [usize; 2]) -> (usize, usize) {
    let [th, tw] = size;
    if (th as u128) * (w as u128) >= (tw as u128) * (h as u128) {
        let nw = (th as f64 * w as f64 / h as f64) as usize;
        (th, nw.max(tw))
    } else {
        let nh = (tw as f64 * h as f64 / w as f64) as usize;
        (nh.max(th), tw)
    }
}

/// torchvision's `CenterCrop` offset of a `crop` window in `size`: `round((size − crop) / 2)`,
/// a half rounded to even.
pub fn crop_offset(size: usize, crop: usize) -> usize {
    let d = size - crop;
    let q = d / 2;
    if d % 2 == 1 && q % 2 == 1 { q + 1 } else { q }
}

/// PIL's resampling coefficients from `input` to `output` samples, in 22-bit fixed point.
struct Coeffs {
    /// Coefficients per output sample (the longest kernel).
    ksize: usize,
    /// Per output sample: the first input sample and the number used.
    bounds: Vec<(usize, usize)>,
    k: Vec<i32>,
}

impl Coeffs {
    /// `precompute_coeffs` and `normalize_coeffs_8bpc` of PIL's `Resample.c` with the bilinear
    /// filter (support 1).
    fn new(input: usize, output: usize) -> Coeffs {
        let scale = input as f32 as f64 / output as f64;
        let filterscale = scale.max(1.0);
        let support = filterscale;
        let ksize = support.ceil() as usize * 2 + 1;
        let mut bounds = Vec::with_capacity(output);
        let mut k = vec![0i32; output * ksize];
        let mut w = vec![0f64; ksize];
        for xx in 0..output {
            let center = (xx as f64 + 0.5) * scale;
            let ss = 1.0 / filterscale;
            let xmin = ((center - support + 0.5) as i64).max(0);
            let xmax = ((center + support + 0.5) as i64).min(input as i64) - xmin;
            let xmax = xmax.max(0) as usize;
            let mut ww = 0.0;
            for (x, wx) in w.iter_mut().enumerate().take(xmax) {
                let t = ((x as i64 + xmin) as f64 - center + 0.5) * ss;
                *wx = bilinear(t);
                ww += *wx;
            }
            for x in 0..xmax {
                if ww != 0.0 {
                    w[x] /= ww;
                }
                let v = w[x] * (1u32 << PRECISION_BITS) as f64;
                k[xx * ksize + x] = if w[x] < 0.0 {
                    (-0.5 + v) as i32
                } else {
                    (0.5 + v) as i32
                };
            }
            bounds.push((xmin as usize, xmax));
        }
        Coeffs { ksize, bounds, k }
    }

    /// The weighted sum for output sample `o` of the inputs `get(i)`, rounded to 8 bits.
    #[inline]
    fn apply(&self, o: usize, get: impl Fn(usize) -> u8) -> u8 {
        let (min, n) = self.bounds[o];
        let k = &self.k[o * self.ksize..o * self.ksize + n];
        let mut ss: i32 = 1 << (PRECISION_BITS - 1);
        for (i, &kv) in k.iter().enumerate() {
            ss += get(min + i) as i32 * kv;
        }
        clip8(ss)
    }
}

fn bilinear(x: f64) -> f64 {
    let x = x.abs();
    if x < 1.0 { 1.0 - x } else { 0.0 }
}

fn clip8(v: i32) -> u8 {
    if v >= (1 << PRECISION_BITS << 8) {
        255
    } else if v <= 0 {
        0
    } else {
        (v >> PRECISION_BITS) as u8
    }
}

/// Resizes the planar image `src` (`c` channels of `h`×`w`) to cover `size` = `[H, W]` and
/// centre-crops it into `dst` (`c`×H×W), as the module docs say. `scratch` holds the first pass.
pub fn resize_crop(
    src: &[u8],
    c: usize,
    (h, w): (usize, usize),
    size: [usize; 2],
    scratch: &mut Vec<u8>,
    dst: &mut [u8],
) {
    let [th, tw] = size;
    debug_assert_eq!(src.len(), c * h * w);
    debug_assert_eq!(dst.len(), c * th * tw);
    let (nh, nw) = cover_size(h, w, size);
    let (top, left) = (crop_offset(nh, th), crop_offset(nw, tw));
    let vert = (nh != h).then(|| Coeffs::new(h, nh));
    let horiz = (nw != w).then(|| Coeffs::new(w, nw));
    // Pillow 13 runs the vertical pass first when the height shrinks by more than twice as
    // many pixels as the width does.
    let vertical_first = h > nh && (h - nh) as i64 > (w as i64 - nw as i64) * 2;
    if vertical_first {
        // Vertical pass over the cropped rows and the columns the horizontal pass reads.
        let cols = used(horiz.as_ref(), left, tw);
        let cw = cols.len();
        scratch.clear();
        scratch.resize(c * th * cw, 0);
        for ch in 0..c {
            let plane = &src[ch * h * w..(ch + 1) * h * w];
            let tmp = &mut scratch[ch * th * cw..(ch + 1) * th * cw];
            for (y, line) in tmp.chunks_exact_mut(cw).enumerate() {
                for (x, o) in line.iter_mut().enumerate() {
                    let col = cols.start + x;
                    *o = match &vert {
                        Some(k) => k.apply(top + y, |i| plane[i * w + col]),
                        None => plane[(top + y) * w + col],
                    };
                }
            }
        }
        for ch in 0..c {
            let tmp = &scratch[ch * th * cw..(ch + 1) * th * cw];
            let out = &mut dst[ch * th * tw..(ch + 1) * th * tw];
            for (line, row) in out.chunks_exact_mut(tw).zip(tmp.chunks_exact(cw)) {
                for (x, o) in line.iter_mut().enumerate() {
                    *o = match &horiz {
                        Some(k) => k.apply(left + x, |i| row[i - cols.start]),
                        None => row[left + x - cols.start],
                    };
                }
            }
        }
        return;
    }
    // Horizontal pass over the cropped columns and the rows the vertical pass reads.
    let rows = used(vert.as_ref(), top, th);
    let rh = rows.len();
    scratch.clear();
    scratch.resize(c * rh * tw, 0);
    for ch in 0..c {
        let plane = &src[ch * h * w..(ch + 1) * h * w];
        let tmp = &mut scratch[ch * rh * tw..(ch + 1) * rh * tw];
        for (line, y) in tmp.chunks_exact_mut(tw).zip(rows.clone()) {
            let row = &plane[y * w..(y + 1) * w];
            match &horiz {
                Some(k) => {
                    for (x, o) in line.iter_mut().enumerate() {
                        *o = k.apply(left + x, |i| row[i]);
                    }
                }
                None => line.copy_from_slice(&row[left..left + tw]),
            }
        }
    }
    for ch in 0..c {
        let tmp = &scratch[ch * rh * tw..(ch + 1) * rh * tw];
        let out = &mut dst[ch * th * tw..(ch + 1) * th * tw];
        for (y, line) in out.chunks_exact_mut(tw).enumerate() {
            match &vert {
                Some(k) => {
                    for (x, o) in line.iter_mut().enumerate() {
                        *o = k.apply(top + y, |i| tmp[(i - rows.start) * tw + x]);
                    }
                }
                None => {
                    let r = top + y - rows.start;
                    line.copy_from_slice(&tmp[r * tw..(r + 1) * tw]);
                }
            }
        }
    }
}

/// The input samples that outputs `first..first + n` read: through `k`, or themselves.
fn used(k: Option<&Coeffs>, first: usize, n: usize) -> std::ops::Range<usize> {
    match k {
        Some(k) => {
            let (last_min, last_n) = k.bounds[first + n - 1];
            k.bounds[first].0..last_min + last_n
        }
        None => first..first + n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(src: &[u8], c: usize, hw: (usize, usize), size: [usize; 2]) -> Vec<u8> {
        let mut dst = vec![0; c * size[0] * size[1]];
        resize_crop(src, c, hw, size, &mut Vec::new(), &mut dst);
        dst
    }

    #[test]
    fn cover_sizes_are_torchvisions() {
        // Square targets: the shorter side to S, the longer int(S · long / short).
        assert_eq!(cover_size(2, 4, [2, 2]), (2, 4));
        assert_eq!(cover_size(4, 2, [2, 2]), (4, 2));
        assert_eq!(cover_size(375, 500, [224, 224]), (224, 298));
        assert_eq!(cover_size(500, 333, [224, 224]), (336, 224));
        assert_eq!(cover_size(28, 28, [32, 32]), (32, 32));
        // Other targets: the side needing the larger scale binds.
        assert_eq!(cover_size(100, 100, [20, 40]), (40, 40));
        assert_eq!(cover_size(10, 40, [20, 40]), (20, 80));
        assert_eq!(cover_size(30, 60, [20, 40]), (20, 40));
    }

    #[test]
    fn crop_offsets_round_halves_to_even() {
        let got: Vec<usize> = (0..8).map(|d| crop_offset(10 + d, 10)).collect();
        // round(0/2), round(0.5) = 0, 1, round(1.5) = 2, 2, round(2.5) = 2, 3, round(3.5) = 4
        assert_eq!(got, [0, 0, 1, 2, 2, 2, 3, 4]);
    }

    #[test]
    fn a_4x2_image_to_2x2_is_a_centre_crop_of_the_same_pixels() {
        // h = 2, w = 4 → covers 2×2 at its own size: only the centre crop (columns 1, 2).
        let src = [10, 20, 30, 40, 50, 60, 70, 80];
        assert_eq!(run(&src, 1, (2, 4), [2, 2]), [20, 30, 60, 70]);
    }

    #[test]
    fn halving_averages_pairs_with_rounding() {
        // 4 → 2 columns: scale 2, support 2; output 0 has center 1, inputs 0..3 with weights
        // 0.25·(1, 3, 3, 1)/... : triangle((x + 0.5 − 1) / 2) = 0.75, 0.75, 0.25 for x = 0, 1, 2
        // (x = −1 is cut at the edge): normalised 3/7, 3/7, 1/7.
        // Row [0, 70, 140, 210]: output 0 = (0·3 + 70·3 + 140·1) / 7 = 50, output 1 (center 3,
        // inputs 1, 2, 3 with 1/7, 3/7, 3/7) = (70 + 420 + 630) / 7 = 160.
        let src = [0, 70, 140, 210, 0, 70, 140, 210];
        assert_eq!(run(&src, 1, (2, 4), [1, 2]), [50, 160]);
        // 2×4 → cover 1×2 directly: vertical halving of two equal rows changes nothing.
        // [0, 1, 1, 1]: 3/7 · 0 + 3/7 · 1 + 1/7 · 1 = 0.57 rounds to 1 (fixed point, half up).
        let src = [0, 1, 1, 1, 0, 1, 1, 1];
        assert_eq!(run(&src, 1, (2, 4), [1, 2]), [1, 1]);
    }

    #[test]
    fn upscaling_2_to_4_interpolates() {
        // 2 → 4: scale 0.5, support 1; output xx has center (xx + 0.5) / 2 = 0.25, 0.75, 1.25,
        // 1.75. Output 0: xmin = int(0.25 − 1 + 0.5) = 0, xmax = int(0.25 + 1 + 0.5) = 1: input 0
        // alone → 100. Output 1: inputs 0, 1 with weights 1 − |0.5 − 0.75| = 0.75 and
        // 1 − |1.5 − 0.75| = 0.25 → 125. Output 2: 0.25, 0.75 → 175. Output 3: input 1 alone.
        assert_eq!(run(&[100, 200], 1, (1, 2), [1, 4]), [100, 125, 175, 200]);
    }

    /// Planar pixels `(i·37 + 11) mod 256`.
    fn ramp(n: usize) -> Vec<u8> {
        (0..n).map(|i| ((i * 37 + 11) % 256) as u8).collect()
    }

    /// Outputs of torchvision 0.29 + Pillow 13.0: `CenterCrop(S)(Resize(S)(img))` of the ramp as
    /// an `L` or `RGB` image (planes interleaved), printed as planes. The same code matched
    /// 3,000 random cases (sizes 1–60 to targets 1–40, square and not, 1 and 3 channels).
    #[test]
    fn matches_torchvision_on_pil_images() {
        // 7 wide, 5 high → Resize(3) gives 4×3 (horizontal pass only), crop columns 0..3.
        assert_eq!(
            run(&ramp(35), 1, (5, 7), [3, 3]),
            [31, 89, 157, 36, 94, 162, 41, 99, 167]
        );
        // 4 wide, 9 high → 2×4: the height shrinks by 5 > 2·2, so the vertical pass runs first.
        assert_eq!(run(&ramp(36), 1, (9, 4), [2, 2]), [141, 113, 126, 134]);
        // RGB 6 wide, 4 high → Resize(5) gives 7×5 (both passes upscale), crop columns 1..6.
        let want = [
            40, 72, 104, 135, 167, 55, 48, 80, 111, 143, 145, 67, 53, 84, 116, 218, 134, 64, 57,
            89, 194, 226, 130, 33, 65, 160, 192, 224, 164, 31, 136, 168, 200, 204, 148, 109, 141,
            173, 204, 209, 82, 114, 146, 177, 209, 58, 90, 122, 153, 185, 79, 56, 88, 119, 151,
            196, 96, 64, 95, 127, 229, 96, 37, 68, 100, 202, 118, 48, 41, 73, 178, 210, 114, 17,
            49,
        ];
        assert_eq!(run(&ramp(72), 3, (4, 6), [5, 5]), want);
    }

    #[test]
    fn channels_are_resized_alike() {
        let plane: Vec<u8> = (0..30).map(|i| (i * 8) as u8).collect();
        let mut src = plane.clone();
        src.extend(plane.iter().map(|v| 255 - v));
        let two = run(&src, 2, (5, 6), [3, 3]);
        let one = run(&plane, 1, (5, 6), [3, 3]);
        assert_eq!(&two[..9], &one[..]);
    }
}
