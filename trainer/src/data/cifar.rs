//! CIFAR-10 binary batches (`cifar-10-binary.tar.gz`, extracted).
//!
//! The train split is `data_batch_1.bin` … `data_batch_5.bin`, the test split `test_batch.bin`, read
//! from the given directory or its `cifar-10-batches-bin/` subdirectory. Each record is one label byte
//! and 3072 pixel bytes (3×32×32, channel-major: all red, then green, then blue, rows top to bottom).
//! Pixels are normalised per channel, `(x / 255 − mean) / std` in `f32`, with the usual CIFAR-10
//! statistics [`MEAN`] / [`STD`]. Training augments them with [`Augment::cifar10`].

use std::path::{Path, PathBuf};

use super::augment::Augment;
use super::{InMemory, Split, Targets};
use crate::error::{Error, Result};

/// Bytes per record: 1 label + 3×32×32 pixels.
pub const RECORD: usize = 1 + PIXELS;
/// Pixel bytes per image.
pub const PIXELS: usize = 3 * 32 * 32;
/// Per-channel mean of CIFAR-10 (R, G, B), on the `[0, 1]` scale.
pub const MEAN: [f32; 3] = [0.4914, 0.4822, 0.4465];
/// Per-channel standard deviation of CIFAR-10 (R, G, B).
pub const STD: [f32; 3] = [0.2470, 0.2435, 0.2616];
/// CIFAR-10 classes.
pub const CLASSES: usize = 10;

const SUBDIR: &str = "cifar-10-batches-bin";

/// The batch file names of a split.
pub fn file_names(split: Split) -> Vec<String> {
    match split {
        Split::Train => (1..=5).map(|i| format!("data_batch_{i}.bin")).collect(),
        Split::Test => vec!["test_batch.bin".to_string()],
    }
}

/// The normalised value of a raw pixel byte `x` in channel `c`.
pub fn normalise(c: usize, x: u8) -> f32 {
    (x as f32 / 255.0 - MEAN[c]) / STD[c]
}

impl Augment {
    /// CIFAR-10's standard augmentation: pad 4 with black (normalised), crop 32×32, flip with p = 0.5.
    pub fn cifar10(seed: u64) -> Self {
        let fill = (0..3).map(|c| normalise(c, 0)).collect();
        Augment::new(seed, 4, true, fill)
    }
}

/// Loads a CIFAR-10 split from `dir` (or `dir/cifar-10-batches-bin/`).
pub fn load_cifar10(dir: &Path, split: Split) -> Result<InMemory> {
    let names = file_names(split);
    let base = resolve_dir(dir, &names)?;
    let lut: [[f32; 256]; 3] =
        std::array::from_fn(|c| std::array::from_fn(|x| normalise(c, x as u8)));
    let mut images = Vec::new();
    let mut labels = Vec::new();
    for name in &names {
        let path = base.join(name);
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        if bytes.is_empty() || bytes.len() % RECORD != 0 {
            return Err(Error::data(
                &path,
                format!(
                    "size {} bytes is not a positive multiple of {RECORD} (1 label byte + 3×32×32 pixel bytes per record); \
                     truncated or not a CIFAR-10 binary batch",
                    bytes.len()
                ),
            ));
        }
        let n = bytes.len() / RECORD;
        images.reserve(n * PIXELS);
        labels.reserve(n);
        for (i, rec) in bytes.chunks_exact(RECORD).enumerate() {
            if rec[0] as usize >= CLASSES {
                return Err(Error::data(
                    &path,
                    format!(
                        "label {} of record {i} (byte offset {}) is out of range: CIFAR-10 labels are 0..={}",
                        rec[0],
                        i * RECORD,
                        CLASSES - 1
                    ),
                ));
            }
            labels.push(rec[0] as u32);
            for (c, plane) in rec[1..].chunks_exact(1024).enumerate() {
                images.extend(plane.iter().map(|&x| lut[c][x as usize]));
            }
        }
    }
    Ok(InMemory {
        name: "cifar10".to_string(),
        shape: [3, 32, 32],
        images,
        targets: Targets::Classes(labels),
        classes: CLASSES,
    })
}

/// `dir` when it holds the split's first file, else `dir/cifar-10-batches-bin` when that does; then
/// every file of the split must be there.
fn resolve_dir(dir: &Path, names: &[String]) -> Result<PathBuf> {
    let sub = dir.join(SUBDIR);
    let base = if !dir.join(&names[0]).is_file() && sub.join(&names[0]).is_file() {
        sub
    } else {
        dir.to_path_buf()
    };
    if let Some(missing) = names.iter().find(|n| !base.join(n).is_file()) {
        let msg = if dir.is_dir() {
            format!(
                "file not found (nor in {SUBDIR}/); a CIFAR-10 directory holds data_batch_1.bin … data_batch_5.bin \
                 and test_batch.bin (the binary version, cifar-10-binary.tar.gz)"
            )
        } else {
            format!(
                "file not found: the directory {} does not exist",
                dir.display()
            )
        };
        return Err(Error::data(base.join(missing), msg));
    }
    Ok(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` records: label `i % 10`, pixel value of (c, y, x) = (c * 50 + y + x + i) % 256.
    fn batch(n: usize, first: usize) -> Vec<u8> {
        let mut b = Vec::with_capacity(n * RECORD);
        for i in first..first + n {
            b.push((i % 10) as u8);
            for c in 0..3 {
                for y in 0..32 {
                    for x in 0..32 {
                        b.push(((c * 50 + y + x + i) % 256) as u8);
                    }
                }
            }
        }
        b
    }

    fn write_train(dir: &Path) {
        for k in 1..=5 {
            std::fs::write(
                dir.join(format!("data_batch_{k}.bin")),
                batch(2, (k - 1) * 2),
            )
            .unwrap();
        }
    }

    #[test]
    fn reads_generated_batches_channel_major() {
        let dir = tempfile::tempdir().unwrap();
        write_train(dir.path());
        let ds = load_cifar10(dir.path(), Split::Train).unwrap();
        assert_eq!(
            (ds.len(), ds.shape, ds.classes, ds.name.as_str()),
            (10, [3, 32, 32], 10, "cifar10")
        );
        assert_eq!(ds.targets, Targets::Classes((0..10).collect()));
        // sample 7, channel 2 (blue), row 3, column 5: raw (100 + 3 + 5 + 7) = 115
        let v = ds.sample(7)[2 * 1024 + 3 * 32 + 5];
        assert_eq!(v, (115.0f32 / 255.0 - 0.4465) / 0.2616);
        assert_eq!(ds.sample(0)[0], (0.0 - MEAN[0]) / STD[0]);
    }

    #[test]
    fn accepts_the_archive_subdirectory() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("cifar-10-batches-bin");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("test_batch.bin"), batch(3, 4)).unwrap();
        let ds = load_cifar10(dir.path(), Split::Test).unwrap();
        assert_eq!(ds.targets, Targets::Classes(vec![4, 5, 6]));
    }

    #[test]
    fn reports_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        write_train(dir.path());
        std::fs::remove_file(dir.path().join("data_batch_4.bin")).unwrap();
        let e = load_cifar10(dir.path(), Split::Train)
            .unwrap_err()
            .to_string();
        assert!(e.contains("data_batch_4.bin: file not found"), "{e}");
        assert!(e.contains("test_batch.bin"), "{e}");
        let e = load_cifar10(dir.path(), Split::Test)
            .unwrap_err()
            .to_string();
        assert!(e.contains("test_batch.bin: file not found"), "{e}");
    }

    #[test]
    fn reports_bad_sizes_and_labels() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = batch(2, 0);
        b.pop();
        std::fs::write(dir.path().join("test_batch.bin"), &b).unwrap();
        let e = load_cifar10(dir.path(), Split::Test)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("test_batch.bin: size 6145 bytes is not a positive multiple of 3073"),
            "{e}"
        );
        let mut b = batch(3, 0);
        b[2 * RECORD] = 10;
        std::fs::write(dir.path().join("test_batch.bin"), &b).unwrap();
        let e = load_cifar10(dir.path(), Split::Test)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("test_batch.bin: label 10 of record 2 (byte offset 6146) is out of range"),
            "{e}"
        );
    }
}
