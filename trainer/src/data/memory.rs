//! A data set held whole in memory as normalised `f32` samples: what the IDX, CIFAR-10,
//! synthetic and table readers produce.

use super::Batch;
use super::augment::Augment;

/// One target per sample: a class index or a regression value.
#[derive(Clone, Debug, PartialEq)]
pub enum Targets {
    Classes(Vec<u32>),
    Values(Vec<f32>),
}

impl Targets {
    pub fn len(&self) -> usize {
        match self {
            Targets::Classes(v) => v.len(),
            Targets::Values(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn subset(&self, idx: &[usize]) -> Targets {
        match self {
            Targets::Classes(v) => Targets::Classes(idx.iter().map(|&i| v[i]).collect()),
            Targets::Values(v) => Targets::Values(idx.iter().map(|&i| v[i]).collect()),
        }
    }
}

/// A whole data set in memory: normalised images (or feature vectors) and their targets.
#[derive(Clone, Debug, PartialEq)]
pub struct InMemory {
    /// e.g. `mnist`, `cifar10`, `synthetic-classification`.
    pub name: String,
    /// Per-sample shape `[C, H, W]` (a feature vector of length d is `[1, 1, d]`).
    pub shape: [usize; 3],
    /// Normalised samples, `len() * sample_len()` values, sample-major then C, H, W.
    pub images: Vec<f32>,
    pub targets: Targets,
    /// Number of classes; 0 for regression.
    pub classes: usize,
}

impl InMemory {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Values per sample: `C * H * W`.
    pub fn sample_len(&self) -> usize {
        self.shape.iter().product()
    }

    /// The samples at `idx`, in that order (an index may repeat). Panics on an index ≥ `len()`.
    pub fn subset(&self, idx: &[usize]) -> InMemory {
        let d = self.sample_len();
        let mut images = Vec::with_capacity(idx.len() * d);
        for &i in idx {
            images.extend_from_slice(&self.images[i * d..(i + 1) * d]);
        }
        InMemory {
            name: self.name.clone(),
            shape: self.shape,
            images,
            targets: self.targets.subset(idx),
            classes: self.classes,
        }
    }

    /// The normalised values of sample `i`.
    pub fn sample(&self, i: usize) -> &[f32] {
        let d = self.sample_len();
        &self.images[i * d..(i + 1) * d]
    }

    /// Copies the samples at `indices` into `batch` (reusing its buffers: no allocation once it has
    /// held a batch this large). With `augment`, each sample is transformed on the way (see
    /// [`Augment`]) and the augmenter's step counter advances by one. Panics on an index ≥ `len()`.
    pub fn gather(&self, indices: &[usize], batch: &mut Batch, augment: Option<&mut Augment>) {
        let d = self.sample_len();
        batch.x.clear();
        batch.classes.clear();
        batch.values.clear();
        batch.len = indices.len();
        batch.shape = self.shape;
        match augment {
            None => {
                for &i in indices {
                    batch.x.extend_from_slice(&self.images[i * d..(i + 1) * d]);
                }
            }
            Some(aug) => {
                batch.x.resize(indices.len() * d, 0.0);
                for (pos, (&i, dst)) in indices.iter().zip(batch.x.chunks_exact_mut(d)).enumerate()
                {
                    aug.apply(pos, self.shape, &self.images[i * d..(i + 1) * d], dst);
                }
                aug.advance();
            }
        }
        match &self.targets {
            Targets::Classes(v) => batch.classes.extend(indices.iter().map(|&i| v[i])),
            Targets::Values(v) => batch.values.extend(indices.iter().map(|&i| v[i])),
        }
    }
}

impl super::Dataset for InMemory {
    fn len(&self) -> usize {
        self.targets.len()
    }

    fn shape(&self) -> [usize; 3] {
        self.shape
    }

    fn target(&self) -> super::TargetKind {
        match self.targets {
            Targets::Classes(_) => super::TargetKind::Classes(self.classes),
            Targets::Values(_) => super::TargetKind::Values(1),
        }
    }

    fn fill(&self, indices: &[usize], batch: &mut Batch) -> crate::Result<()> {
        let d = self.sample_len();
        for &i in indices {
            batch.x.extend_from_slice(&self.images[i * d..(i + 1) * d]);
        }
        match &self.targets {
            Targets::Classes(v) => batch.classes.extend(indices.iter().map(|&i| v[i])),
            Targets::Values(v) => batch.values.extend(indices.iter().map(|&i| v[i])),
        }
        Ok(())
    }

    fn describe(&self) -> String {
        self.name.clone()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Four samples of two values, classes 7, 8, 9, 3 of 10 (also the trait's tests' data).
    pub(crate) fn tiny() -> InMemory {
        InMemory {
            name: "tiny".into(),
            shape: [1, 1, 2],
            images: vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5],
            targets: Targets::Classes(vec![7, 8, 9, 3]),
            classes: 10,
        }
    }

    #[test]
    fn subset_keeps_order_and_repeats() {
        let s = tiny().subset(&[3, 0, 3]);
        assert_eq!(s.len(), 3);
        assert_eq!(s.images, vec![3.0, 3.5, 0.0, 0.5, 3.0, 3.5]);
        assert_eq!(s.targets, Targets::Classes(vec![3, 7, 3]));
        assert_eq!(
            (s.shape, s.classes, s.name.as_str()),
            ([1, 1, 2], 10, "tiny")
        );
    }

    #[test]
    fn gather_fills_and_reuses_buffers() {
        let ds = tiny();
        let mut b = Batch::with_capacity(&ds, 3);
        ds.gather(&[2, 1, 2], &mut b, None);
        assert_eq!(b.x, vec![2.0, 2.5, 1.0, 1.5, 2.0, 2.5]);
        assert_eq!(b.classes, vec![9, 8, 9]);
        assert!(b.values.is_empty());
        assert_eq!((b.len, b.shape), (3, [1, 1, 2]));
        let ptrs = (b.x.as_ptr(), b.classes.as_ptr());
        ds.gather(&[0], &mut b, None);
        ds.gather(&[3, 2, 1], &mut b, None);
        assert_eq!(b.x, vec![3.0, 3.5, 2.0, 2.5, 1.0, 1.5]);
        assert_eq!(b.classes, vec![3, 9, 8]);
        assert_eq!((b.x.as_ptr(), b.classes.as_ptr()), ptrs);

        let reg = InMemory {
            targets: Targets::Values(vec![0.1, 0.2, 0.3, 0.4]),
            classes: 0,
            ..ds
        };
        reg.gather(&[1, 3], &mut b, None);
        assert_eq!(b.values, vec![0.2, 0.4]);
        assert!(b.classes.is_empty());
    }
}
