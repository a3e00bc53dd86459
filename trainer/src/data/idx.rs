//! MNIST-format IDX files (MNIST, Fashion-MNIST), gzipped or not.
//!
//! A directory holds `train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`
//! and `t10k-labels-idx1-ubyte`, each optionally with a `.gz` suffix (the content is checked for the
//! gzip magic `1f 8b`, whatever the name). Pixels are normalised like the PyTorch reference:
//! `(x / 255 − 0.5) / 0.5`, computed in `f32`.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::{InMemory, Split, Targets};
use crate::error::{Error, Result};

/// IDX magic of an unsigned-byte, 3-dimensional array (images).
pub const IMAGES_MAGIC: u32 = 0x0000_0803;
/// IDX magic of an unsigned-byte, 1-dimensional array (labels).
pub const LABELS_MAGIC: u32 = 0x0000_0801;
/// MNIST image side.
pub const SIDE: usize = 28;
/// MNIST classes.
pub const CLASSES: usize = 10;

const ALL_FILES: [&str; 4] = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
];

/// The base names (without `.gz`) of the image and label files of a split.
pub fn file_names(split: Split) -> (&'static str, &'static str) {
    match split {
        Split::Train => (ALL_FILES[0], ALL_FILES[1]),
        Split::Test => (ALL_FILES[2], ALL_FILES[3]),
    }
}

/// Loads an MNIST split from `dir`.
pub fn load_mnist(dir: &Path, split: Split) -> Result<InMemory> {
    load_idx_dataset(dir, split, "mnist")
}

/// Loads a Fashion-MNIST split from `dir` (same format and file names as MNIST).
pub fn load_fashion_mnist(dir: &Path, split: Split) -> Result<InMemory> {
    load_idx_dataset(dir, split, "fashion-mnist")
}

/// Loads any MNIST-format split (28×28 images, 10 classes) and names the data set `name`.
pub fn load_idx_dataset(dir: &Path, split: Split, name: &str) -> Result<InMemory> {
    let (img_name, lbl_name) = file_names(split);
    let img_path = find_file(dir, img_name)?;
    let lbl_path = find_file(dir, lbl_name)?;
    let pixels = read_images(&img_path)?;
    let labels = read_labels(&lbl_path)?;
    let n = pixels.len() / (SIDE * SIDE);
    if labels.len() != n {
        return Err(Error::data(
            &lbl_path,
            format!(
                "holds {} labels but {} holds {} images; the two files of a split must have the same count",
                labels.len(),
                img_path.display(),
                n
            ),
        ));
    }
    let lut = normalise_lut();
    Ok(InMemory {
        name: name.to_string(),
        shape: [1, SIDE, SIDE],
        images: pixels.iter().map(|&p| lut[p as usize]).collect(),
        targets: Targets::Classes(labels.iter().map(|&l| l as u32).collect()),
        classes: CLASSES,
    })
}

/// `(x / 255 − 0.5) / 0.5` in `f32`, the PyTorch reference's arithmetic, for every byte value.
fn normalise_lut() -> [f32; 256] {
    std::array::from_fn(|x| (x as f32 / 255.0 - 0.5) / 0.5)
}

/// `dir/name` if it exists, else `dir/name.gz`, else an error listing what the directory must hold.
fn find_file(dir: &Path, name: &str) -> Result<PathBuf> {
    let plain = dir.join(name);
    if plain.is_file() {
        return Ok(plain);
    }
    let gz = dir.join(format!("{name}.gz"));
    if gz.is_file() {
        return Ok(gz);
    }
    let expected = ALL_FILES.map(|f| format!("{f}[.gz]")).join(", ");
    let msg = if dir.is_dir() {
        format!("file not found (nor {name}.gz); an MNIST-format directory holds {expected}")
    } else {
        format!(
            "file not found: the directory {} does not exist; an MNIST-format directory holds {expected}",
            dir.display()
        )
    };
    Err(Error::data(plain, msg))
}

/// Reads a whole file, gunzipping it when it starts with the gzip magic `1f 8b`.
pub fn read_maybe_gz(path: &Path) -> Result<Vec<u8>> {
    let raw = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    if raw.len() >= 2 && raw[0] == 0x1f && raw[1] == 0x8b {
        let mut out = Vec::with_capacity(raw.len() * 4);
        flate2::read::GzDecoder::new(raw.as_slice())
            .read_to_end(&mut out)
            .map_err(|e| Error::data(path, format!("corrupt or truncated gzip data: {e}")))?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn check_magic(path: &Path, bytes: &[u8], header: usize, magic: u32, what: &str) -> Result<()> {
    if bytes.len() >= 4 {
        let got = be_u32(bytes, 0);
        if got != magic {
            let hint = match got {
                IMAGES_MAGIC => " (this is an IDX images file)",
                LABELS_MAGIC => " (this is an IDX labels file)",
                _ => "",
            };
            return Err(Error::data(
                path,
                format!("not an IDX {what} file: magic 0x{got:08x}{hint}, expected 0x{magic:08x}"),
            ));
        }
    }
    if bytes.len() < header {
        return Err(Error::data(
            path,
            format!(
                "truncated: {} bytes, shorter than the {header}-byte IDX {what} header",
                bytes.len()
            ),
        ));
    }
    Ok(())
}

fn check_payload(path: &Path, got: usize, want: usize, what: &str) -> Result<()> {
    if got < want {
        return Err(Error::data(
            path,
            format!(
                "truncated: the header declares {what} ({want} bytes) but only {got} bytes follow"
            ),
        ));
    }
    if got > want {
        return Err(Error::data(
            path,
            format!(
                "{} unexpected bytes after the {what} the header declares",
                got - want
            ),
        ));
    }
    Ok(())
}

/// The raw pixels of an IDX images file: `N × 28 × 28` bytes.
pub fn read_images(path: &Path) -> Result<Vec<u8>> {
    let mut bytes = read_maybe_gz(path)?;
    check_magic(path, &bytes, 16, IMAGES_MAGIC, "images")?;
    let (n, h, w) = (
        be_u32(&bytes, 4) as usize,
        be_u32(&bytes, 8) as usize,
        be_u32(&bytes, 12) as usize,
    );
    if h != SIDE || w != SIDE {
        return Err(Error::data(
            path,
            format!(
                "unexpected dimensions {n}×{h}×{w}: MNIST-format images must be N×{SIDE}×{SIDE}"
            ),
        ));
    }
    let what = format!("{n} images of {SIDE}×{SIDE}");
    check_payload(path, bytes.len() - 16, n * SIDE * SIDE, &what)?;
    bytes.drain(..16);
    Ok(bytes)
}

/// The labels of an IDX labels file, each checked to be below 10.
pub fn read_labels(path: &Path) -> Result<Vec<u8>> {
    let mut bytes = read_maybe_gz(path)?;
    check_magic(path, &bytes, 8, LABELS_MAGIC, "labels")?;
    let n = be_u32(&bytes, 4) as usize;
    check_payload(path, bytes.len() - 8, n, &format!("{n} labels"))?;
    bytes.drain(..8);
    if let Some((i, &l)) = bytes
        .iter()
        .enumerate()
        .find(|&(_, &l)| l as usize >= CLASSES)
    {
        return Err(Error::data(
            path,
            format!(
                "label {l} at index {i} is out of range: MNIST-format labels are 0..={}",
                CLASSES - 1
            ),
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn sample_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/data/mnist-sample")
    }

    fn images_file(n: u32, h: u32, w: u32, payload: usize) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [IMAGES_MAGIC, n, h, w] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        b.extend((0..payload).map(|i| (i % 256) as u8));
        b
    }

    fn labels_file(labels: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&LABELS_MAGIC.to_be_bytes());
        b.extend_from_slice(&(labels.len() as u32).to_be_bytes());
        b.extend_from_slice(labels);
        b
    }

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    /// A train split of 3 images in `dir`, plain files.
    fn write_split(dir: &Path, images: &[u8], labels: &[u8]) {
        std::fs::write(dir.join("train-images-idx3-ubyte"), images).unwrap();
        std::fs::write(dir.join("train-labels-idx1-ubyte"), labels).unwrap();
    }

    fn err(dir: &Path) -> String {
        load_mnist(dir, Split::Train).unwrap_err().to_string()
    }

    #[test]
    fn loads_the_vendored_sample() {
        let dir = sample_dir();
        let train = load_mnist(&dir, Split::Train).unwrap();
        let test = load_mnist(&dir, Split::Test).unwrap();
        assert_eq!((train.len(), test.len()), (8000, 2000));
        assert_eq!(
            (train.shape, train.sample_len(), train.classes),
            ([1, 28, 28], 784, 10)
        );
        assert_eq!(train.images.len(), 8000 * 784);
        assert_eq!(train.name, "mnist");
        let Targets::Classes(tr) = &train.targets else {
            panic!("classes expected")
        };
        let Targets::Classes(te) = &test.targets else {
            panic!("classes expected")
        };
        assert_eq!(&tr[..10], &[0, 3, 7, 6, 8, 9, 3, 3, 8, 1]);
        assert_eq!(&te[..10], &[4, 5, 1, 6, 2, 0, 8, 5, 7, 1]);
        let mut hist = [0usize; 10];
        tr.iter().for_each(|&l| hist[l as usize] += 1);
        assert_eq!(hist, [815, 907, 792, 820, 779, 697, 809, 857, 739, 785]);
        // Background pixels are -1, full ink is +1; the first image's pixel bytes sum to 59764.
        assert!(train.images.iter().all(|&v| (-1.0..=1.0).contains(&v)));
        assert_eq!(train.images[0], -1.0);
        assert!(train.images.contains(&1.0));
        let sum: f64 = train
            .sample(0)
            .iter()
            .map(|&v| ((v as f64 + 1.0) * 127.5).round())
            .sum();
        assert_eq!(sum, 59764.0);
    }

    #[test]
    fn normalisation_matches_pytorch_f32() {
        let lut = normalise_lut();
        assert_eq!((lut[0], lut[255]), (-1.0, 1.0));
        // float32: 128/255 = 0.50196081, − 0.5 = 0.0019608140, / 0.5 = 0.003921628
        assert_eq!(lut[128], 0.003_921_628);
    }

    #[test]
    fn gzip_and_plain_give_the_same_data() {
        let plain = tempfile::tempdir().unwrap();
        let gzd = tempfile::tempdir().unwrap();
        let (img, lbl) = (images_file(3, 28, 28, 3 * 784), labels_file(&[1, 2, 9]));
        write_split(plain.path(), &img, &lbl);
        std::fs::write(gzd.path().join("train-images-idx3-ubyte.gz"), gz(&img)).unwrap();
        std::fs::write(gzd.path().join("train-labels-idx1-ubyte.gz"), gz(&lbl)).unwrap();
        let a = load_mnist(plain.path(), Split::Train).unwrap();
        let b = load_fashion_mnist(gzd.path(), Split::Train).unwrap();
        assert_eq!(a.images, b.images);
        assert_eq!(a.targets, Targets::Classes(vec![1, 2, 9]));
        assert_eq!(a.targets, b.targets);
        assert_eq!(b.name, "fashion-mnist");
        assert_eq!(a.images[1], normalise_lut()[1]);
        // gzip is detected by content: a gzipped file without the suffix loads too.
        std::fs::write(plain.path().join("train-images-idx3-ubyte"), gz(&img)).unwrap();
        assert_eq!(
            load_mnist(plain.path(), Split::Train).unwrap().images,
            a.images
        );
    }

    #[test]
    fn missing_files_are_named_with_the_expected_list() {
        let dir = tempfile::tempdir().unwrap();
        let e = err(dir.path());
        assert!(e.contains("train-images-idx3-ubyte: file not found"), "{e}");
        assert!(e.contains("t10k-labels-idx1-ubyte[.gz]"), "{e}");
        std::fs::write(
            dir.path().join("train-images-idx3-ubyte.gz"),
            gz(&images_file(1, 28, 28, 784)),
        )
        .unwrap();
        let e = err(dir.path());
        assert!(e.contains("train-labels-idx1-ubyte: file not found"), "{e}");
        let e = err(&dir.path().join("nope"));
        assert!(
            e.contains("nope/train-images-idx3-ubyte: file not found: the directory"),
            "{e}"
        );
        assert!(e.contains("does not exist"), "{e}");
    }

    #[test]
    fn wrong_magic_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let lbl = labels_file(&[1]);
        write_split(dir.path(), &lbl, &lbl);
        let e = err(dir.path());
        assert!(
            e.contains("train-images-idx3-ubyte: not an IDX images file: magic 0x00000801"),
            "{e}"
        );
        assert!(e.contains("expected 0x00000803"), "{e}");
        let img = images_file(1, 28, 28, 784);
        write_split(dir.path(), &img, &img);
        let e = err(dir.path());
        assert!(
            e.contains("train-labels-idx1-ubyte: not an IDX labels file: magic 0x00000803"),
            "{e}"
        );
        assert!(e.contains("expected 0x00000801"), "{e}");
        write_split(dir.path(), b"PK\x03\x04 not idx at all", &lbl);
        assert!(err(dir.path()).contains("magic 0x504b0304, expected 0x00000803"));
    }

    #[test]
    fn wrong_dimensions_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        write_split(
            dir.path(),
            &images_file(2, 32, 32, 2 * 1024),
            &labels_file(&[1, 2]),
        );
        let e = err(dir.path());
        assert!(
            e.contains("train-images-idx3-ubyte: unexpected dimensions 2×32×32"),
            "{e}"
        );
        assert!(e.contains("N×28×28"), "{e}");
    }

    #[test]
    fn truncation_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let lbl = labels_file(&[1, 2, 3]);
        write_split(dir.path(), &images_file(3, 28, 28, 3 * 784 - 5), &lbl);
        let e = err(dir.path());
        assert!(
            e.contains("train-images-idx3-ubyte: truncated: the header declares 3 images"),
            "{e}"
        );
        assert!(e.contains("(2352 bytes) but only 2347 bytes follow"), "{e}");
        write_split(dir.path(), &images_file(3, 28, 28, 3 * 784 + 1), &lbl);
        assert!(err(dir.path()).contains("1 unexpected bytes after the 3 images"));
        write_split(dir.path(), &images_file(3, 28, 28, 3 * 784)[..10], &lbl);
        assert!(
            err(dir.path())
                .contains("truncated: 10 bytes, shorter than the 16-byte IDX images header")
        );
        write_split(dir.path(), &images_file(3, 28, 28, 3 * 784), &lbl[..9]);
        let e = err(dir.path());
        assert!(e.contains("train-labels-idx1-ubyte: truncated: the header declares 3 labels (3 bytes) but only 1"), "{e}");

        // A gzip stream cut short.
        std::fs::remove_file(dir.path().join("train-images-idx3-ubyte")).unwrap();
        let z = gz(&images_file(3, 28, 28, 3 * 784));
        std::fs::write(
            dir.path().join("train-images-idx3-ubyte.gz"),
            &z[..z.len() / 2],
        )
        .unwrap();
        let e = err(dir.path());
        assert!(
            e.contains("train-images-idx3-ubyte.gz: corrupt or truncated gzip data"),
            "{e}"
        );
        // Only the 8-byte gzip trailer (CRC, size) missing.
        std::fs::write(
            dir.path().join("train-images-idx3-ubyte.gz"),
            &z[..z.len() - 8],
        )
        .unwrap();
        let e = err(dir.path());
        assert!(
            e.contains("train-images-idx3-ubyte.gz: corrupt or truncated gzip data"),
            "{e}"
        );
    }

    #[test]
    fn count_mismatch_names_both_files() {
        let dir = tempfile::tempdir().unwrap();
        write_split(
            dir.path(),
            &images_file(3, 28, 28, 3 * 784),
            &labels_file(&[1, 2]),
        );
        let e = err(dir.path());
        assert!(
            e.contains("train-labels-idx1-ubyte: holds 2 labels but "),
            "{e}"
        );
        assert!(e.contains("train-images-idx3-ubyte holds 3 images"), "{e}");
    }

    #[test]
    fn labels_out_of_range_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        write_split(
            dir.path(),
            &images_file(3, 28, 28, 3 * 784),
            &labels_file(&[1, 10, 2]),
        );
        let e = err(dir.path());
        assert!(
            e.contains("train-labels-idx1-ubyte: label 10 at index 1 is out of range"),
            "{e}"
        );
        assert_eq!(
            load_mnist(dir.path(), Split::Train)
                .unwrap_err()
                .exit_code(),
            crate::error::EXIT_CONFIG
        );
    }
}
