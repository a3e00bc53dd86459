//! Train/validation split with `torch.utils.data.random_split` semantics.
//!
//! `train_val_split(ds, f, seed)` equals
//! `random_split(ds, [1 - f, f], generator=torch.Generator().manual_seed(seed))`: the fractional-lengths
//! rule gives `floor(len·(1−f))` and `floor(len·f)` samples, then hands the remainder out one at a time
//! starting with the train part; the indices are `randperm(len)`, train taking the first ones.

use super::InMemory;
use super::rng::{Mt19937, randperm_with};
use crate::error::{Error, Result};

/// `(train_len, val_len)` by PyTorch's fractional-lengths rule for `[1 - val_fraction, val_fraction]`.
pub fn split_lengths(len: usize, val_fraction: f64) -> (usize, usize) {
    let fractions = [1.0 - val_fraction, val_fraction];
    let mut lengths = fractions.map(|f| (len as f64 * f).floor() as usize);
    let remainder = len - lengths.iter().sum::<usize>();
    for i in 0..remainder {
        lengths[i % 2] += 1;
    }
    (lengths[0], lengths[1])
}

/// The train and validation indices of a `len`-sample data set.
pub fn split_indices(len: usize, val_fraction: f64, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let (train_len, _) = split_lengths(len, val_fraction);
    let mut perm = Vec::with_capacity(len);
    randperm_with(len, &mut Mt19937::new(seed), &mut perm);
    let val = perm.split_off(train_len);
    (perm, val)
}

/// Splits `ds` into (train, validation). `val_fraction` must lie in `[0, 1)`. A fraction of 0
/// keeps the training set whole and in its original order (no split is made).
pub fn train_val_split(
    ds: &InMemory,
    val_fraction: f64,
    seed: u64,
) -> Result<(InMemory, InMemory)> {
    if !(0.0..1.0).contains(&val_fraction) {
        return Err(Error::data(
            &ds.name,
            format!("validation fraction {val_fraction} is outside [0, 1)"),
        ));
    }
    if val_fraction == 0.0 {
        return Ok((ds.clone(), ds.subset(&[])));
    }
    let (train, val) = split_indices(ds.len(), val_fraction, seed);
    Ok((ds.subset(&train), ds.subset(&val)))
}

#[cfg(test)]
mod tests {
    use super::super::Targets;
    use super::*;

    #[test]
    fn lengths_follow_the_fractional_rule() {
        assert_eq!(split_lengths(10, 0.25), (8, 2)); // floor 7.5 = 7, floor 2.5 = 2, remainder 1 → train
        assert_eq!(split_lengths(8000, 0.1), (7200, 800));
        assert_eq!(split_lengths(7, 0.5), (4, 3));
        assert_eq!(split_lengths(5, 0.0), (5, 0));
        assert_eq!(split_lengths(0, 0.3), (0, 0));
        assert_eq!(split_lengths(11, 1.0 / 3.0), (8, 3)); // 7 + 3, remainder 1 → train
    }

    /// Expected values from `random_split(range(n), lengths, generator=torch.Generator().manual_seed(seed))`,
    /// produced by torch 2.15.0.
    #[test]
    fn split_matches_pytorch() {
        // [0.9, 0.1] of 11: floor 9.9 = 9, floor 1.1 = 1, remainder 1 goes to the first part.
        assert_eq!(
            split_indices(11, 0.1, 0),
            (vec![10, 0, 4, 3, 5, 8, 2, 1, 9, 7], vec![6])
        );
        // [7, 3] of 10 is the same split as the fraction 0.3.
        assert_eq!(
            split_indices(10, 0.3, 0),
            (vec![4, 1, 7, 5, 3, 9, 0], vec![8, 6, 2])
        );
        let (tr, va) = split_indices(8000, 0.1, 1);
        assert_eq!((tr.len(), va.len()), (7200, 800));
        assert_eq!(
            &tr[..12],
            &[
                7845, 3566, 7760, 5921, 3511, 2463, 3107, 4123, 6703, 469, 7608, 6515
            ]
        );
        assert_eq!(&tr[7196..], &[415, 1448, 476, 4297]);
        assert_eq!(
            &va[..12],
            &[
                3161, 2922, 7224, 3478, 1010, 38, 1971, 5462, 6510, 1914, 348, 4022
            ]
        );
        assert_eq!(&va[796..], &[5581, 1329, 447, 1939]);
    }

    #[test]
    fn split_is_a_partition_of_a_randperm() {
        let ds = InMemory {
            name: "t".into(),
            shape: [1, 1, 1],
            images: (0..20).map(|i| i as f32).collect(),
            targets: Targets::Values((0..20).map(|i| i as f32).collect()),
            classes: 0,
        };
        let (tr, va) = train_val_split(&ds, 0.25, 3).unwrap();
        assert_eq!((tr.len(), va.len()), (15, 5));
        let perm = super::super::randperm(20, 3);
        let got: Vec<usize> = tr
            .images
            .iter()
            .chain(&va.images)
            .map(|&v| v as usize)
            .collect();
        assert_eq!(got, perm);
        let e = train_val_split(&ds, 1.0, 3).unwrap_err().to_string();
        assert_eq!(e, "t: validation fraction 1 is outside [0, 1)");
    }
}
