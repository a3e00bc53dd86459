//! The image folder as a [`Dataset`]: every image decoded once and kept in memory as 8-bit pixels
//! ([`Cached`]: filling a batch is a table lookup per value), or decoded from its file each time
//! it is filled ([`Lazy`]: costly, so the engine fills batches ahead on worker threads).

use std::path::PathBuf;

use super::decode::{Problem, Scratch, Settings, load_into};
use super::normalize::Lut;
use crate::data::batch::Batch;
use crate::data::dataset::{Dataset, TargetKind};
use crate::{Error, Result};

/// What every sample of the folder shares.
pub struct Common {
    /// The folder, for messages.
    pub name: String,
    /// Per-sample class index.
    pub classes: Vec<u32>,
    pub class_count: usize,
    /// Channels and size of a sample.
    pub settings: Settings,
    /// Pixels to inputs.
    pub lut: Lut,
}

impl Common {
    fn shape(&self) -> [usize; 3] {
        let [h, w] = self.settings.size;
        [self.settings.channels, h, w]
    }
}

/// Every sample decoded: `samples × C·H·W` planar 8-bit pixels.
pub struct Cached {
    pub common: Common,
    pub pixels: Vec<u8>,
}

impl Dataset for Cached {
    fn len(&self) -> usize {
        self.common.classes.len()
    }

    fn shape(&self) -> [usize; 3] {
        self.common.shape()
    }

    fn target(&self) -> TargetKind {
        TargetKind::Classes(self.common.class_count)
    }

    fn fill(&self, indices: &[usize], batch: &mut Batch) -> Result<()> {
        let d = self.common.settings.sample_len();
        batch.x.reserve(indices.len() * d);
        for &i in indices {
            self.common
                .lut
                .extend(&self.pixels[i * d..(i + 1) * d], &mut batch.x);
            batch.classes.push(self.common.classes[i]);
        }
        Ok(())
    }

    fn describe(&self) -> String {
        self.common.name.clone()
    }
}

/// Samples decoded from their files when filled.
pub struct Lazy {
    pub common: Common,
    /// Per-sample image file.
    pub files: Vec<PathBuf>,
}

impl Dataset for Lazy {
    fn len(&self) -> usize {
        self.files.len()
    }

    fn shape(&self) -> [usize; 3] {
        self.common.shape()
    }

    fn target(&self) -> TargetKind {
        TargetKind::Classes(self.common.class_count)
    }

    fn fill(&self, indices: &[usize], batch: &mut Batch) -> Result<()> {
        let s = &self.common.settings;
        let mut scratch = Scratch::default();
        let mut pixels = vec![0u8; s.sample_len()];
        batch.x.reserve(indices.len() * s.sample_len());
        for &i in indices {
            let path = &self.files[i];
            read_into(path, s, &mut scratch, &mut pixels)
                .map_err(|p| changed_since_open(path, p))?;
            self.common.lut.extend(&pixels, &mut batch.x);
            batch.classes.push(self.common.classes[i]);
        }
        Ok(())
    }

    fn costly(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        self.common.name.clone()
    }
}

/// Reads the image file at `path` and decodes it into `dst` (see [`load_into`]).
pub fn read_into(
    path: &std::path::Path,
    settings: &Settings,
    scratch: &mut Scratch,
    dst: &mut [u8],
) -> Result<(), Problem> {
    let bytes =
        std::fs::read(path).map_err(|e| Problem::Unreadable(format!("cannot be read: {e}")))?;
    load_into(&bytes, settings, scratch, dst)
}

/// The error of an image that passed the checks of `open` but not its decoding later: only its
/// header was read up front (`data.cache = "none"`), or the file changed since.
pub fn changed_since_open(path: &std::path::Path, p: Problem) -> Error {
    let what = match p {
        Problem::Unreadable(why) => why,
        Problem::Size { height, width } => format!(
            "is now {height}×{width} (height × width), not the size it had when the data was opened"
        ),
    };
    Error::data(
        path,
        format!(
            "{what}; images not kept in memory (data.cache = \"none\", or \"auto\" when they do not fit) have only their headers checked before training: replace or remove the file, or set data.cache = \"memory\" to decode every image up front (where data.skip_bad = true skips unreadable ones)"
        ),
    )
}
