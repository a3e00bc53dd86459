//! Opening an image folder: the walk, the first image (the default channels and size), every
//! image decoded into memory or its header checked, on background threads, the unreadable ones
//! refused or skipped, the test part (`test/`, or held out of `train/`), the normalisation, and
//! the record of it all.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cache;
use super::decode::{Header, MAX_BYTES, Problem, Scratch, Settings, header};
use super::normalize::{Histogram, Lut};
use super::parallel::{over_chunks, over_indices};
use super::scan::{ImageFile, scan};
use super::source::{Cached, Common, Lazy, changed_since_open, read_into};
use crate::data::dataset::{SharedDataset, Subset};
use crate::data::parts::{
    DEFAULT_TEST_FRACTION, DataRecord, Normalization, OpenContext, Parts, Skipped,
};
use crate::data::split::split_indices;
use crate::spec::{CacheMode, Normalize, Spec};
use crate::{Error, Result};

/// What to do about an unreadable image, said after its problem.
const UNREADABLE: &str = "replace or remove the file, or set data.skip_bad = true to skip unreadable images (they are listed in data.json)";

/// Opens the image folder of `spec` (see the module docs of [`super`]).
pub fn open(spec: &Spec, ctx: &OpenContext) -> Result<Parts> {
    let d = &spec.data;
    let Some(dir) = d.path.clone() else {
        return Err(spec.error(
            "data.path",
            "is required for data.name = \"image-folder\": the folder holding train/<class>/<image>",
        ));
    };
    let folder = scan(&dir)?;
    let train_count = folder.train.len();
    let test_given = folder.test.is_some();
    let mut files = folder.train;
    files.extend(folder.test.unwrap_or_default());
    let (first, first_path) = first_header(&dir, &files, d.skip_bad)?;
    let channels = d.channels.unwrap_or(first.channels);
    let settings = Settings {
        channels,
        size: d.size.unwrap_or([first.height, first.width]),
        resize: d.size.is_some(),
        max_bytes: MAX_BYTES,
    };
    let threads = match d.workers {
        Some(_) => ctx.workers,
        // Nothing else runs while the data is opened: the replica's share of the cores.
        None => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            ctx.workers.max(cores / cache::local_replicas())
        }
    };
    let bytes = files.len() as u64 * settings.sample_len() as u64;
    let keep = match d.cache.unwrap_or_default() {
        CacheMode::Memory => true,
        CacheMode::None => false,
        CacheMode::Auto => cache::fits(bytes, cache::mem_available(), cache::local_replicas()),
    };

    // Every image decoded (kept) or its header read, in parallel.
    let mut pixels = Vec::new();
    let results: Vec<Result<(), Problem>> = if keep {
        pixels = vec![0u8; bytes as usize];
        over_chunks(
            &mut pixels,
            settings.sample_len(),
            threads,
            |s: &mut Scratch, i, dst| read_into(&files[i].path, &settings, s, dst),
        )
        .0
    } else {
        over_indices(files.len(), threads, |_: &mut (), i| {
            check_header(&files[i].path, &settings)
        })
        .0
    };
    let mut skipped = Vec::new();
    let mut kept = Vec::with_capacity(files.len());
    for (i, r) in results.into_iter().enumerate() {
        let path = &files[i].path;
        match r {
            Ok(()) => kept.push(i),
            Err(Problem::Unreadable(why)) if d.skip_bad => skipped.push(Skipped {
                path: path.clone(),
                why,
            }),
            Err(Problem::Unreadable(why)) => {
                return Err(Error::data(path, format!("{why}; {UNREADABLE}")));
            }
            Err(Problem::Size { height, width }) => {
                let [h, w] = settings.size;
                return Err(Error::data(
                    path,
                    format!(
                        "is {height}×{width} (height × width) but {} is {h}×{w}: images of different sizes need data.size = [H, W] in the spec, to resize and centre-crop every image to H×W",
                        first_path.display()
                    ),
                ));
            }
        }
    }
    if keep && kept.len() < files.len() {
        let d_len = settings.sample_len();
        for (to, &from) in kept.iter().enumerate() {
            pixels.copy_within(from * d_len..(from + 1) * d_len, to * d_len);
        }
        pixels.truncate(kept.len() * d_len);
    }
    let train_kept = kept.iter().filter(|&&i| i < train_count).count();
    let files: Vec<ImageFile> = kept.iter().map(|&i| files[i].clone()).collect();

    // The training part: train/ (less the share held out when there is no test/).
    let test_fraction = d.test_fraction.unwrap_or(DEFAULT_TEST_FRACTION);
    let train_part: Vec<usize> = if test_given {
        (0..train_kept).collect()
    } else {
        split_indices(train_kept, test_fraction, spec.train.seed).0
    };
    let figures = figures(spec, &settings, &first_path, || {
        histogram(
            &files,
            &train_part,
            &settings,
            keep.then_some(&pixels),
            threads,
        )
    })?;
    let common = Common {
        name: format!("image folder {}", dir.display()),
        classes: files.iter().map(|f| f.class).collect(),
        class_count: folder.classes.len(),
        settings,
        lut: Lut::new(
            channels,
            figures.as_ref().map(|n| (&n.mean[..], &n.std[..])),
        ),
    };
    let whole: SharedDataset = if keep {
        Arc::new(Cached { common, pixels })
    } else {
        let files = files.into_iter().map(|f| f.path).collect();
        Arc::new(Lazy { common, files })
    };
    let test_count = if test_given {
        whole.len() - train_kept
    } else {
        train_kept - train_part.len()
    };
    let record = DataRecord {
        format: "image-folder".into(),
        source: vec![dir],
        classes: Some(folder.classes),
        normalize: figures,
        train_samples: whole.len() - test_count,
        test_samples: test_count,
        test_held_out: !test_given,
        skipped,
        ..DataRecord::default()
    };
    if !record.skipped.is_empty() && is_rank_zero() {
        println!(
            "skipped {} unreadable images (see data.json)",
            record.skipped.len()
        );
    }
    Ok(if test_given {
        let n = whole.len();
        Parts {
            train: Arc::new(Subset::new(whole.clone(), (0..train_kept).collect())),
            test: Arc::new(Subset::new(whole, (train_kept..n).collect())),
            record,
        }
    } else {
        Parts::held_out(whole, test_fraction, spec.train.seed, record)
    })
}

/// The header of the first image (in sample order) that can be read, and its path: it gives the
/// default channels and size. Without `skip_bad`, the first image must be readable.
fn first_header(dir: &Path, files: &[ImageFile], skip_bad: bool) -> Result<(Header, PathBuf)> {
    let mut first_problem = None;
    for f in files {
        match header(&f.path) {
            Ok(h) => return Ok((h, f.path.clone())),
            Err(why) if !skip_bad => {
                return Err(Error::data(&f.path, format!("{why}; {UNREADABLE}")));
            }
            Err(why) => {
                first_problem.get_or_insert_with(|| format!("{}: {why}", f.path.display()));
            }
        }
    }
    Err(Error::data(
        dir,
        format!(
            "none of its {} images can be read (the first: {}): check that the files are PNG, JPEG, BMP or WebP images",
            files.len(),
            first_problem.unwrap_or_default()
        ),
    ))
}

/// The header of `path` checked: readable, and of the folder's size unless resized.
fn check_header(path: &Path, settings: &Settings) -> Result<(), Problem> {
    let h = header(path).map_err(Problem::Unreadable)?;
    if !settings.resize && [h.height, h.width] != settings.size {
        return Err(Problem::Size {
            height: h.height,
            width: h.width,
        });
    }
    Ok(())
}

/// The normalisation: `data.mean`/`data.std` as given, or computed over the training part
/// (`normalize = "auto"` or `true`), or none.
fn figures(
    spec: &Spec,
    settings: &Settings,
    first: &Path,
    histogram: impl FnOnce() -> Result<Histogram>,
) -> Result<Option<Normalization>> {
    let d = &spec.data;
    let c = settings.channels;
    if let (Some(mean), Some(std)) = (&d.mean, &d.std) {
        if mean.len() != c {
            let kind = if c == 1 { "grayscale" } else { "colour" };
            let other = if c == 1 { 3 } else { 1 };
            return Err(spec.error(
                "data.mean",
                format!(
                    "has {} values but the images have {c} channel{} (the first image, {}, is {kind}): give one value per channel, or set data.channels = {other} to convert the images",
                    mean.len(),
                    if c == 1 { "" } else { "s" },
                    first.display()
                ),
            ));
        }
        return Ok(Some(Normalization {
            mean: mean.clone(),
            std: std.clone(),
            computed: false,
        }));
    }
    if !matches!(
        d.normalize,
        Some(Normalize::Keyword(_) | Normalize::Flag(true))
    ) {
        return Ok(None);
    }
    let Some((mean, std)) = histogram()?.mean_std() else {
        return Ok(None);
    };
    if let Some(ch) = std.iter().position(|&s| s <= 0.0 || !s.is_finite()) {
        return Err(spec.error(
            "data.normalize",
            format!(
                "channel {ch} has the same value ({}) in every training image, so its standard deviation is 0 and (x − mean) / std is undefined: give data.mean and data.std instead",
                mean[ch]
            ),
        ));
    }
    Ok(Some(Normalization {
        mean,
        std,
        computed: true,
    }))
}

/// The pixel histogram of the samples `part` of `files`: from the decoded `pixels` where they
/// are kept, else decoded again on `threads` threads.
fn histogram(
    files: &[ImageFile],
    part: &[usize],
    settings: &Settings,
    pixels: Option<&Vec<u8>>,
    threads: usize,
) -> Result<Histogram> {
    let c = settings.channels;
    let d = settings.sample_len();
    let mut total = Histogram::new(c);
    if let Some(pixels) = pixels {
        for &i in part {
            total.add(&pixels[i * d..(i + 1) * d]);
        }
        return Ok(total);
    }
    #[derive(Default)]
    struct State {
        scratch: Scratch,
        pixels: Vec<u8>,
        hist: Option<Histogram>,
    }
    let (results, states) = over_indices(part.len(), threads, |s: &mut State, j| {
        let path = &files[part[j]].path;
        s.pixels.resize(d, 0);
        read_into(path, settings, &mut s.scratch, &mut s.pixels)
            .map_err(|p| changed_since_open(path, p))?;
        s.hist
            .get_or_insert_with(|| Histogram::new(c))
            .add(&s.pixels);
        Ok::<(), Error>(())
    });
    results.into_iter().collect::<Result<Vec<()>>>()?;
    for h in states.iter().filter_map(|s| s.hist.as_ref()) {
        total.merge(h);
    }
    Ok(total)
}

/// True on rank 0, or without a `RANK` (a single process).
fn is_rank_zero() -> bool {
    std::env::var("RANK").map_or(true, |r| r.trim() == "0")
}
