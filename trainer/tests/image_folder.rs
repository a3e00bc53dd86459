//! Image folders (`data.name = "image-folder"`), end to end through the real `ddp-trainer`: every
//! kind of bad input is refused with exit code 2, a message naming the file and what to do, and
//! nothing half-written in the run folder; unreadable images are skipped with `skip_bad`; and a
//! folder of PNGs made from the MNIST sample gives exactly the IDX files' inputs and, trained,
//! exactly their weights.

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use ddp_trainer::data::{Batch, DataRecord, Dataset, OpenContext, Split, idx, load_mnist};
use ddp_trainer::spec::Spec;
use image::{DynamicImage, GrayImage, ImageFormat, RgbImage};

/// A short run: one epoch of batches of 8, a checkpoint per epoch.
const BODY: &str = "[train]\nepochs = 1\nbatch_size = 8\n[checkpoint]\nevery_epochs = 1\n";

/// A 28×28 (or `h`×`w`) grayscale PNG whose pixels depend on `seed`.
fn gray(path: &Path, h: u32, w: u32, seed: u32) {
    let img = GrayImage::from_fn(w, h, |x, y| {
        image::Luma([((x * 7 + y * 13 + seed * 31) % 256) as u8])
    });
    save(path, &DynamicImage::ImageLuma8(img), ImageFormat::Png);
}

fn save(path: &Path, img: &DynamicImage, f: ImageFormat) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    img.save_with_format(path, f).unwrap();
}

/// `root/part/<class>/<i>.png`, `n` 28×28 images per class.
fn classes(root: &Path, part: &str, names: &[&str], n: u32) {
    for (c, name) in names.iter().enumerate() {
        for i in 0..n {
            gray(
                &root.join(part).join(name).join(format!("{i}.png")),
                28,
                28,
                c as u32 * 100 + i,
            );
        }
    }
}

/// A folder with train/ (3 classes × 6 images) and test/ (3 × 2) of 28×28 grayscale PNGs.
fn good_folder(root: &Path) {
    classes(root, "train", &["cat", "dog", "eel"], 6);
    classes(root, "test", &["cat", "dog", "eel"], 2);
}

/// `dir/spec.toml`: mnist-cnn on the image folder `data`, `data_keys` in [data], then `body`.
fn spec(dir: &Path, data: &Path, data_keys: &str, body: &str) -> PathBuf {
    let text = format!(
        "name = \"pngs\"\n[model]\nname = \"mnist-cnn\"\n[data]\nname = \"image-folder\"\npath = \"{}\"\n{data_keys}\n{body}",
        data.display()
    );
    let p = dir.join("spec.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn run(spec: &Path, out: &Path, sets: &[&str]) -> Output {
    let mut c = trainer();
    c.arg(spec).arg("--out").arg(out);
    for s in sets {
        c.arg("--set").arg(s);
    }
    run_with_timeout(c, Duration::from_secs(120))
}

/// Runs `spec` and checks that it fails as bad input: exit code 2, every needle in stderr, no
/// model and no checkpoint in the run folder. Returns stderr.
fn refused(case: &str, spec: &Path, out: &Path, sets: &[&str], needles: &[&str]) -> String {
    let o = run(spec, out, sets);
    assert_eq!(o.status.code(), Some(2), "[{case}] exit code\n{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    for n in needles {
        assert!(err.contains(n), "[{case}] expected {n:?} in\n{}", text(&o));
    }
    assert!(
        !out.join("model.safetensors").exists(),
        "[{case}] model written"
    );
    let checkpoints = std::fs::read_dir(out.join("checkpoints")).map_or(0, |d| d.count());
    assert_eq!(checkpoints, 0, "[{case}] checkpoint written");
    err
}

fn show(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn corrupt_truncated_and_non_image_files_are_named() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("pngs");
    good_folder(&data);
    let s = spec(d.path(), &data, "", BODY);
    let bad = data.join("train/dog/3.png");
    let bytes = std::fs::read(&bad).unwrap();
    std::fs::write(&bad, &bytes[..bytes.len() - 30]).unwrap();
    let advice =
        "replace or remove the file, or set data.skip_bad = true to skip unreadable images";
    // Decoding every image up front finds the cut in the pixel data.
    let want = format!("{}: cannot be decoded as PNG: ", show(&bad));
    let out = d.path().join("out");
    refused(
        "truncated",
        &s,
        &out,
        &["data.cache=\"memory\""],
        &[&want, "(corrupt or truncated)", advice],
    );
    // Cut inside the header: found with the cache off too (only headers are read up front).
    std::fs::write(&bad, &bytes[..20]).unwrap();
    for cache in ["memory", "none"] {
        let set = format!("data.cache=\"{cache}\"");
        let out = d.path().join(format!("out-head-{cache}"));
        let want = format!("{}: cannot be decoded as PNG: ", show(&bad));
        refused("header cut", &s, &out, &[&set], &[&want, advice]);
    }
    std::fs::write(&bad, "this is not a picture\n").unwrap();
    let want = format!(
        "{}: is not an image: its content is not PNG, JPEG, BMP or WebP (it starts with the bytes 74 68 69 73 20 69 73 20); {advice}",
        show(&bad)
    );
    refused("text", &s, &d.path().join("out-text"), &[], &[&want]);
    std::fs::write(&bad, b"GIF89a\x01\x00\x01\x00\x00\x00\x00").unwrap();
    let want = format!(
        "{}: is an image in the GIF format: only PNG, JPEG, BMP and WebP are read; convert it, or remove it",
        show(&bad)
    );
    refused("gif", &s, &d.path().join("out-gif"), &[], &[&want]);
}

#[test]
fn pixel_data_corrupt_with_the_cache_off_is_an_error_when_filled() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("pngs");
    good_folder(&data);
    let s = spec(d.path(), &data, "cache = \"none\"\nworkers = 2", BODY);
    let bad = data.join("train/eel/0.png");
    let bytes = std::fs::read(&bad).unwrap();
    std::fs::write(&bad, &bytes[..bytes.len() - 30]).unwrap();
    let want = format!("{}: cannot be decoded as PNG: ", show(&bad));
    refused(
        "lazy",
        &s,
        &d.path().join("out"),
        &[],
        &[
            &want,
            "images not kept in memory (data.cache = \"none\", or \"auto\" when they do not fit) have only their headers checked before training",
            "set data.cache = \"memory\"",
        ],
    );
}

#[test]
fn unreadable_images_are_skipped_listed_and_counted_once() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("pngs");
    good_folder(&data);
    let s = spec(d.path(), &data, "skip_bad = true", BODY);
    let (a, b) = (data.join("train/cat/0.png"), data.join("test/eel/1.png"));
    std::fs::write(&a, "junk").unwrap();
    let bytes = std::fs::read(&b).unwrap();
    std::fs::write(&b, &bytes[..bytes.len() / 2]).unwrap();
    let out = d.path().join("out");
    let o = train_standalone(&s, 2, &out, &[]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        stdout
            .matches("skipped 2 unreadable images (see data.json)")
            .count(),
        1,
        "{}",
        text(&o)
    );
    let record: DataRecord =
        serde_json::from_str(&std::fs::read_to_string(out.join("data.json")).unwrap()).unwrap();
    let paths: Vec<&Path> = record.skipped.iter().map(|s| s.path.as_path()).collect();
    assert_eq!(paths, [a.as_path(), b.as_path()]);
    assert!(
        record.skipped[0].why.starts_with("is not an image"),
        "{:?}",
        record.skipped
    );
    assert!(
        record.skipped[1]
            .why
            .starts_with("cannot be decoded as PNG"),
        "{:?}",
        record.skipped
    );
    assert_eq!((record.train_samples, record.test_samples), (17, 5));
    assert!(out.join("model.safetensors").is_file());
}

#[test]
fn layout_errors_name_the_folder_and_what_to_do() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("pngs");
    let s = spec(d.path(), &data, "", BODY);
    let out = |n: &str| d.path().join(n);
    let e = refused(
        "missing",
        &s,
        &out("o1"),
        &[],
        &[&format!("{}: does not exist", show(&data))],
    );
    assert!(e.contains("train/<class>/<image>"), "{e}");
    gray(&data.join("readme.png"), 28, 28, 0);
    refused(
        "no train",
        &s,
        &out("o2"),
        &[],
        &[&format!(
            "{}: has no train/ folder (it holds readme.png)",
            show(&data)
        )],
    );
    for i in 0..3 {
        gray(&data.join(format!("train/{i}.png")), 28, 28, i);
    }
    refused(
        "no classes",
        &s,
        &out("o3"),
        &[],
        &[&format!(
            "{}: holds 3 images but no class folders: put each class's images in a folder of its own, train/<class>/<image>",
            show(&data.join("train"))
        )],
    );
    classes(&data, "train", &["ant", "bee"], 3);
    std::fs::create_dir_all(data.join("train/cow")).unwrap();
    refused(
        "empty class",
        &s,
        &out("o4"),
        &[],
        &[&format!(
            "{}: class folder has no images: add .png, .jpg, .jpeg, .bmp or .webp files to it, or remove the folder",
            show(&data.join("train/cow"))
        )],
    );
    gray(&data.join("train/cow/1.png"), 28, 28, 9);
    classes(&data, "test", &["ant", "yak"], 1);
    refused(
        "test class",
        &s,
        &out("o5"),
        &[],
        &[&format!(
            "{}: class \"yak\" is not in train/, whose classes are \"ant\", \"bee\", \"cow\": rename the folder to one of them, or remove it",
            show(&data.join("test/yak"))
        )],
    );
}

#[test]
fn sizes_must_agree_unless_resized() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("pngs");
    good_folder(&data);
    let odd = data.join("train/dog/4.png");
    gray(&odd, 30, 29, 1);
    let s = spec(d.path(), &data, "", BODY);
    let want = format!(
        "{}: is 30×29 (height × width) but {} is 28×28: images of different sizes need data.size = [H, W] in the spec, to resize and centre-crop every image to H×W",
        show(&odd),
        show(&data.join("train/cat/0.png"))
    );
    for cache in ["memory", "none"] {
        let set = format!("data.cache=\"{cache}\"");
        refused(
            "sizes",
            &s,
            &d.path().join(format!("o-{cache}")),
            &[&set],
            &[&want],
        );
    }
    // Resized: every image becomes 28×28, and RGB ones gray with channels = 1.
    save(
        &data.join("train/eel/0.png"),
        &DynamicImage::ImageRgb8(RgbImage::from_fn(40, 50, |x, y| {
            image::Rgb([x as u8, y as u8, 9])
        })),
        ImageFormat::Png,
    );
    save(
        &data.join("test/cat/0.jpg"),
        &DynamicImage::ImageRgb8(RgbImage::from_fn(64, 48, |x, y| {
            image::Rgb([x as u8 * 3, y as u8, 200])
        })),
        ImageFormat::Jpeg,
    );
    let out = d.path().join("ok");
    let o = run(&s, &out, &["data.size=[28, 28]", "data.channels=1"]);
    assert_success(&o);
    assert!(out.join("model.safetensors").is_file());
    // The mean given for 3 channels while the images have 1.
    let e = refused(
        "mean",
        &s,
        &d.path().join("o-mean"),
        &[
            "data.size=[28, 28]",
            "data.mean=[0.5, 0.5, 0.5]",
            "data.std=[0.2, 0.2, 0.2]",
        ],
        &["data.mean: has 3 values but the images have 1 channel (the first image, "],
    );
    assert!(
        e.contains("is grayscale): give one value per channel, or set data.channels = 3"),
        "{e}"
    );
}

#[test]
fn without_test_folder_a_share_is_held_out() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("pngs");
    classes(&data, "train", &["a", "b"], 10);
    let s = spec(
        d.path(),
        &data,
        "test_fraction = 0.25\nnormalize = true",
        BODY,
    );
    let out = d.path().join("out");
    assert_success(&run(&s, &out, &[]));
    let record: DataRecord =
        serde_json::from_str(&std::fs::read_to_string(out.join("data.json")).unwrap()).unwrap();
    assert_eq!((record.train_samples, record.test_samples), (15, 5));
    assert!(record.test_held_out);
    assert_eq!(record.classes, Some(vec!["a".to_string(), "b".to_string()]));
    let n = record.normalize.unwrap();
    assert!(n.computed);
    assert_eq!((n.mean.len(), n.std.len()), (1, 1));
}

// ---------------------------------------------------------------------------------------------
// PNGs made from the MNIST sample against its IDX files
// ---------------------------------------------------------------------------------------------

/// The IDX sample's first `n` images (28·28 bytes each) and labels of `split`.
fn idx_part(split: Split, n: usize) -> (Vec<u8>, Vec<u8>) {
    let (images, labels) = idx::file_names(split);
    let dir = mnist_dir();
    let px = idx::read_images(&dir.join(format!("{images}.gz"))).unwrap();
    let lb = idx::read_labels(&dir.join(format!("{labels}.gz"))).unwrap();
    (px[..n * 784].to_vec(), lb[..n].to_vec())
}

/// Sample indices in the folder's order: class by class, IDX order within a class.
fn folder_order(labels: &[u8]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..labels.len()).collect();
    order.sort_by_key(|&i| labels[i]);
    order
}

/// Writes `dir/part/<digit>/<index>.png` for the images, as scripts/make-image-folder.py does.
fn write_pngs(dir: &Path, part: &str, px: &[u8], labels: &[u8]) {
    for (i, &l) in labels.iter().enumerate() {
        let img = GrayImage::from_raw(28, 28, px[i * 784..(i + 1) * 784].to_vec()).unwrap();
        save(
            &dir.join(format!("{part}/{l}/{i:05}.png")),
            &DynamicImage::ImageLuma8(img),
            ImageFormat::Png,
        );
    }
}

/// Writes plain IDX files of the images in `order` (the folder's order) as `split` in `dir`.
fn write_idx(dir: &Path, split: Split, px: &[u8], labels: &[u8], order: &[usize]) {
    let (images, lbls) = idx::file_names(split);
    let mut img = Vec::new();
    for v in [idx::IMAGES_MAGIC, order.len() as u32, 28, 28] {
        img.extend_from_slice(&v.to_be_bytes());
    }
    let mut lab = Vec::new();
    for v in [idx::LABELS_MAGIC, order.len() as u32] {
        lab.extend_from_slice(&v.to_be_bytes());
    }
    for &i in order {
        img.extend_from_slice(&px[i * 784..(i + 1) * 784]);
        lab.push(labels[i]);
    }
    std::fs::write(dir.join(images), img).unwrap();
    std::fs::write(dir.join(lbls), lab).unwrap();
}

/// Every sample of `ds`, filled in order.
fn filled(ds: &dyn Dataset) -> Batch {
    let mut b = Batch::new();
    let all: Vec<usize> = (0..ds.len()).collect();
    ddp_trainer::data::fill_checked(ds, &all, &mut b).unwrap();
    b
}

fn open(data: &Path, keys: &str) -> ddp_trainer::data::Parts {
    let text = format!(
        "name = \"t\"\n[model]\nname = \"mnist-cnn\"\n[data]\nname = \"image-folder\"\npath = \"{}\"\n{keys}\n",
        data.display()
    );
    let spec = Spec::parse_at(&text, Path::new("t.toml"), &[]).unwrap();
    ddp_trainer::data::images::open(&spec, &OpenContext { workers: 2 }).unwrap()
}

#[test]
fn the_shipped_pngs_decode_to_exactly_the_idx_inputs() {
    let folder = examples_dir().join("data/mnist-png");
    let (px, labels) = idx_part(Split::Train, 1000);
    let (tpx, tlabels) = idx_part(Split::Test, 200);
    for cache in ["memory", "none"] {
        let parts = open(
            &folder,
            &format!("mean = [0.5]\nstd = [0.5]\ncache = \"{cache}\""),
        );
        assert_eq!(parts.train.costly(), cache == "none");
        for (ds, px, labels) in [(&parts.train, &px, &labels), (&parts.test, &tpx, &tlabels)] {
            let b = filled(ds.as_ref());
            let order = folder_order(labels);
            assert_eq!(b.len, order.len());
            // The IDX reader's inputs, (p / 255 − 0.5) / 0.5 in f32, in the folder's order.
            let dir = tempfile::tempdir().unwrap();
            write_idx(dir.path(), Split::Train, px, labels, &order);
            let want = load_mnist(dir.path(), Split::Train).unwrap();
            assert!(
                b.x == want.images,
                "{cache}: inputs differ from the IDX reader's"
            );
            let classes: Vec<u32> = order.iter().map(|&i| labels[i] as u32).collect();
            assert_eq!(b.classes, classes);
        }
    }
}

#[test]
fn training_on_pngs_gives_exactly_the_weights_of_the_idx_files() {
    let d = tempfile::tempdir().unwrap();
    let (pngs, idxs) = (d.path().join("pngs"), d.path().join("idx"));
    std::fs::create_dir_all(&idxs).unwrap();
    let (px, labels) = idx_part(Split::Train, 320);
    let (tpx, tlabels) = idx_part(Split::Test, 64);
    write_pngs(&pngs, "train", &px, &labels);
    write_pngs(&pngs, "test", &tpx, &tlabels);
    write_idx(&idxs, Split::Train, &px, &labels, &folder_order(&labels));
    write_idx(&idxs, Split::Test, &tpx, &tlabels, &folder_order(&tlabels));
    let body = "val_fraction = 0.1\n[train]\nepochs = 1\nbatch_size = 16\noptimizer = \"adam\"\nlr = 0.001\nseed = 3\n[checkpoint]\nevery_epochs = 0\n";
    let idx_spec = write_spec_reading(d.path(), "mnist-cnn", &idxs, body);
    let idx_out = d.path().join("out-idx");
    train_standalone(&idx_spec, 2, &idx_out, &[]);
    let want = std::fs::read(idx_out.join("model.safetensors")).unwrap();
    for cache in ["memory", "none"] {
        let keys = format!("mean = [0.5]\nstd = [0.5]\ncache = \"{cache}\"");
        let png_spec = spec(d.path(), &pngs, &keys, body);
        let out = d.path().join(format!("out-{cache}"));
        train_standalone(&png_spec, 2, &out, &[]);
        let got = std::fs::read(out.join("model.safetensors")).unwrap();
        assert!(
            got == want,
            "cache {cache}: the weights differ from the IDX run's"
        );
        assert_eq!(test_record(&out).loss, test_record(&idx_out).loss);
    }
}

#[test]
fn auto_normalisation_uses_the_training_part_only() {
    let folder = examples_dir().join("data/mnist-png");
    let parts = open(&folder, "normalize = \"auto\"");
    let n = parts.record.normalize.clone().unwrap();
    assert!(n.computed);
    // Over the 1,000 training images (not the test ones), population figures of p / 255.
    let (px, _) = idx_part(Split::Train, 1000);
    let count = px.len() as f64;
    let s1: f64 = px.iter().map(|&p| p as f64).sum();
    let s2: f64 = px.iter().map(|&p| (p as f64).powi(2)).sum();
    let mean = s1 / count / 255.0;
    let std = ((s2 / count - (s1 / count).powi(2)).sqrt()) / 255.0;
    assert_eq!(n.mean, [mean as f32]);
    assert!(
        (n.std[0] as f64 - std).abs() < 1e-7,
        "{} vs {std}",
        n.std[0]
    );
    // And the inputs are (p / 255 − mean) / std in f32.
    let b = filled(parts.train.as_ref());
    let p = (b.x[0] * n.std[0] + n.mean[0]) * 255.0;
    assert_eq!(b.x[0], (p.round() / 255.0 - n.mean[0]) / n.std[0]);
}
