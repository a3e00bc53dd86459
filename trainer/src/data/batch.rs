//! The reusable mini-batch buffer that data sets fill, and borrowed runs of its samples.

/// A reusable mini-batch buffer filled by [`InMemory::gather`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    /// `len * C * H * W` normalised values.
    pub x: Vec<f32>,
    /// Class targets (empty for regression).
    pub classes: Vec<u32>,
    /// Regression targets, `len * k` values for `k` per sample (empty for classification).
    pub values: Vec<f32>,
    /// Number of samples in the batch.
    pub len: usize,
    /// Per-sample shape `[C, H, W]` of the data set it came from.
    pub shape: [usize; 3],
}

/// Consecutive samples of a [`Batch`], borrowed.
#[derive(Debug, Clone, Copy)]
pub struct BatchRows<'a> {
    /// `len * C * H * W` values.
    pub x: &'a [f32],
    pub classes: &'a [u32],
    pub values: &'a [f32],
    pub len: usize,
    pub shape: [usize; 3],
}

impl Batch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Samples `rows` of the batch (all of them: `0..len`).
    pub fn rows(&self, rows: std::ops::Range<usize>) -> BatchRows<'_> {
        let d: usize = self.shape.iter().product();
        // One of the two target vectors is empty (classification or regression).
        let classes = if self.classes.is_empty() {
            &[]
        } else {
            &self.classes[rows.clone()]
        };
        let k = self.values.len() / self.len.max(1);
        let values = &self.values[rows.start * k..rows.end * k];
        BatchRows {
            x: &self.x[rows.start * d..rows.end * d],
            classes,
            values,
            len: rows.len(),
            shape: self.shape,
        }
    }

    /// A batch whose buffers already hold `batch_size` samples of `ds` (no allocation while training).
    pub fn with_capacity(ds: &dyn super::Dataset, batch_size: usize) -> Self {
        let shape = ds.shape();
        let k = ds.target().outputs();
        Batch {
            x: Vec::with_capacity(batch_size * shape.iter().product::<usize>()),
            classes: Vec::with_capacity(batch_size),
            values: Vec::with_capacity(batch_size * k),
            len: 0,
            shape,
        }
    }

    /// Values per sample of a regression batch (0 for classification).
    pub fn value_width(&self) -> usize {
        self.values.len() / self.len.max(1)
    }
}
