use super::*;
use crate::data::fill_checked;
use crate::data::tensors::array::Store;
use crate::data::tensors::write::Arr;

/// `a` as an array of a file named `file` held in memory.
fn array(a: &Arr, file: &str, label: &str) -> Array {
    Array::new(
        Store::memory(&a.data, file),
        label.into(),
        a.dtype,
        a.shape.clone(),
        0,
    )
    .unwrap()
}

fn data(x: &Arr, y: &Arr) -> Result<TensorData> {
    TensorData::new(
        array(x, "d", "tensor \"x\""),
        array(y, "d", "tensor \"y\""),
        false,
    )
}

fn err(x: &Arr, y: &Arr) -> String {
    match data(x, y) {
        Ok(_) => panic!("no error"),
        Err(e) => e.to_string(),
    }
}

fn fill(ds: &TensorData, idx: &[usize]) -> Batch {
    let mut b = Batch::new();
    fill_checked(ds, idx, &mut b).unwrap();
    b
}

#[test]
fn inputs_of_every_type_fill_exactly() {
    let y = Arr::i64(&[2], &[1, 0]);
    let cases: Vec<(Arr, Vec<f32>)> = vec![
        (
            Arr::u8(&[2, 2], &[0, 255, 51, 1]),
            vec![0.0, 1.0, 0.2, 1.0 / 255.0],
        ),
        (
            Arr::i8(&[2, 2], &[-128, 127, 0, -1]),
            vec![-128.0, 127.0, 0.0, -1.0],
        ),
        (
            Arr::u16(&[2, 2], &[65535, 1, 2, 3]),
            vec![65535.0, 1.0, 2.0, 3.0],
        ),
        (
            Arr::i16(&[2, 2], &[-300, 1, 2, 3]),
            vec![-300.0, 1.0, 2.0, 3.0],
        ),
        (Arr::u32(&[2, 2], &[7, 1, 2, 3]), vec![7.0, 1.0, 2.0, 3.0]),
        (Arr::i32(&[2, 2], &[-7, 1, 2, 3]), vec![-7.0, 1.0, 2.0, 3.0]),
        (Arr::u64(&[2, 2], &[9, 1, 2, 3]), vec![9.0, 1.0, 2.0, 3.0]),
        (
            Arr::i64(&[2, 2], &[-9, 1 << 30, 2, 3]),
            vec![-9.0, 1_073_741_824.0, 2.0, 3.0],
        ),
        (
            Arr::f32(&[2, 2], &[0.5, -1.25, 3e-8, 7.0]),
            vec![0.5, -1.25, 3e-8, 7.0],
        ),
        (
            Arr::f64(&[2, 2], &[0.1, -2.0, 1e10, 0.0]),
            vec![0.1, -2.0, 1e10, 0.0],
        ),
        (
            Arr::f16_bits(&[2, 2], &[0x3c00, 0xc500, 0x0001, 0x7bff]),
            vec![1.0, -5.0, 5.960_464_5e-8, 65504.0],
        ),
        (
            Arr::bf16_bits(&[2, 2], &[0x3f80, 0xc0a0, 0x4049, 0x0000]),
            vec![1.0, -5.0, 3.140_625, 0.0],
        ),
    ];
    for (x, want) in cases {
        let ds = data(&x, &y).unwrap();
        assert_eq!(ds.shape(), [1, 1, 2], "{}", x.dtype);
        let b = fill(&ds, &[1, 0, 1]);
        let mut expect = want[2..].to_vec();
        expect.extend_from_slice(&want[..2]);
        expect.extend_from_slice(&want[2..]);
        assert_eq!(b.x, expect, "{}", x.dtype);
        assert_eq!(b.classes, vec![0, 1, 0]);
        assert!(ds.costly());
        assert_eq!(ds.describe(), "d");
    }
}

#[test]
fn sample_shapes_map_to_chw() {
    let y = Arr::u8(&[2], &[0, 1]);
    let shape = |s: &[usize]| {
        let n: usize = s.iter().product();
        data(&Arr::u8(s, &vec![0; n]), &y).map(|d| d.shape())
    };
    assert_eq!(shape(&[2]).unwrap(), [1, 1, 1]);
    assert_eq!(shape(&[2, 5]).unwrap(), [1, 1, 5]);
    assert_eq!(shape(&[2, 4, 3]).unwrap(), [1, 4, 3]);
    assert_eq!(shape(&[2, 3, 4, 5]).unwrap(), [3, 4, 5]);
    assert_eq!(
        err(&Arr::u8(&[2, 1, 2, 2, 2], &[0; 16]), &y),
        "d: tensor \"x\" has shape (2, 1, 2, 2, 2): a sample of 4 dimensions is not read; each \
         sample must be a vector (d,), an image (H, W) or (C, H, W): reshape it"
    );
    assert_eq!(
        err(&Arr::u8(&[2, 3, 0], &[]), &y),
        "d: tensor \"x\" has shape (2, 3, 0): its samples hold no values"
    );
    assert_eq!(
        err(&Arr::f32(&[0, 28, 28], &[]), &Arr::i64(&[0], &[])),
        "d: tensor \"x\" has 0 samples (shape (0, 28, 28)): there is nothing to train on"
    );
    // A sample of (C, H, W) is filled channel, row, column: as stored.
    let x = Arr::u8(&[1, 2, 1, 2], &[10, 20, 30, 40]);
    let ds = data(&x, &Arr::u8(&[1], &[3])).unwrap();
    assert_eq!(
        fill(&ds, &[0]).x,
        [10.0f32, 20.0, 30.0, 40.0].map(|v| v / 255.0)
    );
    assert_eq!(ds.target(), TargetKind::Classes(4));
}

#[test]
fn targets_are_classes_or_values() {
    let x = Arr::f32(&[3, 1], &[0.0, 1.0, 2.0]);
    // Integer types are classes, counted as the largest + 1.
    for y in [
        Arr::u8(&[3], &[4, 0, 2]),
        Arr::i8(&[3], &[4, 0, 2]),
        Arr::u16(&[3, 1], &[4, 0, 2]),
        Arr::i16(&[3], &[4, 0, 2]),
        Arr::u32(&[3], &[4, 0, 2]),
        Arr::i32(&[3], &[4, 0, 2]),
        Arr::u64(&[3], &[4, 0, 2]),
        Arr::i64(&[3, 1], &[4, 0, 2]),
    ] {
        let ds = data(&x, &y).unwrap();
        assert_eq!(ds.target(), TargetKind::Classes(5), "{}", y.dtype);
        assert_eq!(fill(&ds, &[2, 0]).classes, vec![2, 4]);
    }
    // Float types are values: (N,) one per sample, (N, k) k.
    let ds = data(&x, &Arr::f64(&[3], &[0.5, -1.0, 2.25])).unwrap();
    assert_eq!(ds.target(), TargetKind::Values(1));
    let b = fill(&ds, &[2, 1]);
    assert_eq!((b.values, b.classes), (vec![2.25, -1.0], vec![]));
    let y = Arr::f16_bits(&[3, 2], &[0x3c00, 0x4000, 0x4200, 0x4400, 0xbc00, 0]);
    let ds = data(&x, &y).unwrap();
    assert_eq!(ds.target(), TargetKind::Values(2));
    assert_eq!(fill(&ds, &[1, 2]).values, vec![3.0, 4.0, -1.0, 0.0]);
    let ds = data(&x, &Arr::bf16_bits(&[3], &[0x3f80, 0x4000, 0x4040])).unwrap();
    assert_eq!(fill(&ds, &[0, 2]).values, vec![1.0, 3.0]);
    let ds = data(&x, &Arr::f32(&[3], &[0.0, 0.1, 0.2])).unwrap();
    assert_eq!(fill(&ds, &[1]).values, vec![0.1]);
    // uint8 targets are classes, not scaled.
    let ds = data(&x, &Arr::u8(&[3], &[255, 0, 1])).unwrap();
    assert_eq!(ds.target(), TargetKind::Classes(256));
    assert_eq!(fill(&ds, &[0]).classes, vec![255]);
}

#[test]
fn a_regression_reads_integer_targets_as_values() {
    let x = Arr::f32(&[3, 1], &[0.0, 1.0, 2.0]);
    let values = |y: &Arr| TensorData::new(array(&x, "d", "x"), array(y, "d", "y"), true);
    let ds = values(&Arr::i64(&[3], &[-4, 0, 7])).unwrap();
    assert_eq!(ds.target(), TargetKind::Values(1));
    assert_eq!(fill(&ds, &[2, 0]).values, vec![7.0, -4.0]);
    let ds = values(&Arr::u8(&[3, 2], &[1, 2, 3, 4, 5, 255])).unwrap();
    assert_eq!(ds.target(), TargetKind::Values(2));
    assert_eq!(fill(&ds, &[2]).values, vec![5.0, 255.0]);
    assert_eq!(
        values(&Arr::i32(&[3, 1, 1], &[0; 3]))
            .unwrap_err()
            .to_string(),
        "d: y has shape (3, 1, 1) of int32: the targets of a regression are values: shape (N,) \
         or (N, k)"
    );
    let ds = values(&Arr::f32(&[3], &[0.5, 1.5, 2.5])).unwrap();
    assert_eq!(ds.target(), TargetKind::Values(1));
}

#[test]
fn bad_targets_name_the_index() {
    let x = Arr::f32(&[3, 1], &[0.0, 1.0, 2.0]);
    assert_eq!(
        err(&x, &Arr::i64(&[3], &[0, 5, -1])),
        "d: tensor \"y\" holds -1 at index 2: class labels must be 0 or more (the classes are \
         0..n−1)"
    );
    assert_eq!(
        err(&x, &Arr::i32(&[3], &[0, 1_000_000, 2])),
        "d: tensor \"y\" holds 1000000 at index 1: at most 1000000 classes are read (labels \
         0..n−1): map the labels to consecutive indices"
    );
    assert_eq!(
        err(&x, &Arr::i64(&[2], &[0, 1])),
        "d: tensor \"x\" has 3 samples but tensor \"y\" has 2: the leading dimension of both is \
         the sample; save one target per input"
    );
    assert_eq!(
        err(&x, &Arr::i64(&[3, 2], &[0; 6])),
        "d: tensor \"y\" has shape (3, 2) of int64: integer targets are class indices, one per \
         sample: shape (N,); for one-hot rows save y.argmax(1)"
    );
    assert_eq!(
        err(&x, &Arr::f32(&[3, 1, 1], &[0.0; 3])),
        "d: tensor \"y\" has shape (3, 1, 1) of float32: float targets are values: shape (N,) \
         or (N, k)"
    );
    assert_eq!(
        err(&x, &Arr::f32(&[3, 0], &[])),
        "d: tensor \"y\" has shape (3, 0) of float32: float targets are values: shape (N,) or \
         (N, k)"
    );
    assert_eq!(
        err(&x, &Arr::f32(&[3], &[0.0, f32::INFINITY, f32::NAN])),
        "d: tensor \"y\" holds inf at sample 1 (value 0 of the sample): targets must be finite; \
         fix or drop that sample"
    );
}

#[test]
fn non_finite_inputs_are_found_when_opened() {
    let y = Arr::u8(&[3], &[0, 1, 2]);
    let mut v = vec![0.5f32; 12];
    v[9] = f32::NEG_INFINITY;
    assert_eq!(
        err(&Arr::f32(&[3, 2, 2], &v), &y),
        "d: tensor \"x\" holds -inf at sample 2 (value 1 of the sample): inputs must be finite; \
         fix or drop that sample"
    );
    let x = Arr::f16_bits(&[3, 1], &[0, 0x7e00, 0]);
    assert!(err(&x, &y).contains("holds NaN at sample 1 (value 0 of the sample)"));
    let x = Arr::f64(&[3, 1], &[0.0, 0.0, 1e300]);
    assert!(err(&x, &y).contains("holds inf at sample 2 (value 0 of the sample)"));
}

/// Inputs too large to check when opened are checked as batches are filled.
#[test]
fn non_finite_inputs_of_large_files_are_found_when_filled() {
    let mut v = vec![1.0f32; 8];
    v[5] = f32::NAN;
    let ds = TensorData {
        x: array(&Arr::f32(&[4, 2], &v), "big", "member \"x.npy\""),
        y: array(&Arr::u8(&[4], &[0, 1, 0, 1]), "big", "member \"y.npy\""),
        shape: [1, 1, 2],
        target: TargetKind::Classes(2),
        x_checked: false,
    };
    let mut b = Batch::new();
    fill_checked(&ds, &[0, 1, 3], &mut b).unwrap();
    assert_eq!(
        fill_checked(&ds, &[3, 2], &mut b).unwrap_err().to_string(),
        "big: member \"x.npy\" holds NaN at sample 2 (value 1 of the sample): inputs must be \
         finite; fix or drop that sample"
    );
}

#[test]
fn segments_and_chunks_cover_every_row() {
    // 600,000 rows of 32 float32 (76.8 MB: two segments, hundreds of chunks), the first bad
    // value late in the second segment.
    let rows = 600_000usize;
    let mut v = vec![0.25f32; rows * 32];
    let bad_row = SEGMENT / 128 + 3 * CHUNK / 256 + 17;
    v[bad_row * 32 + 31] = f32::INFINITY;
    v[(rows - 1) * 32] = f32::NAN;
    let y: Vec<i32> = (0..rows as i32).map(|i| i % 7).collect();
    let e = err(&Arr::f32(&[rows, 32], &v), &Arr::i32(&[rows], &y));
    assert!(
        e.contains(&format!(
            "holds inf at sample {bad_row} (value 31 of the sample)"
        )),
        "{e}"
    );
    let mut y = y;
    y[rows - 2] = -3;
    let e = err(&Arr::u8(&[rows], &vec![0; rows]), &Arr::i32(&[rows], &y));
    assert!(
        e.contains(&format!("holds -3 at index {}", rows - 2)),
        "{e}"
    );
    y[rows - 2] = 11;
    let ds = data(&Arr::u8(&[rows], &vec![0; rows]), &Arr::i32(&[rows], &y)).unwrap();
    assert_eq!(ds.target(), TargetKind::Classes(12));
}

#[test]
fn a_test_part_conforms_to_the_training_part() {
    let train = data(&Arr::u8(&[2, 2], &[0; 4]), &Arr::i64(&[2], &[0, 4])).unwrap();
    let test = data(&Arr::u8(&[3, 2], &[0; 6]), &Arr::u8(&[3], &[1, 2, 1])).unwrap();
    assert_eq!(test.target(), TargetKind::Classes(3));
    let test = test.conform(&train).unwrap();
    assert_eq!(test.target(), TargetKind::Classes(5));
    assert_eq!(test.files(), vec![PathBuf::from("d")]);
    let unseen = data(&Arr::u8(&[2, 2], &[0; 4]), &Arr::u8(&[2], &[1, 5])).unwrap();
    assert_eq!(
        unseen.conform(&train).unwrap_err().to_string(),
        "d: tensor \"y\" holds 5 at index 1: the training part's labels are 0..=4 (5 classes): \
         a test label must be one of them"
    );
    let wide = data(&Arr::u8(&[2, 3], &[0; 6]), &Arr::u8(&[2], &[1, 2])).unwrap();
    assert_eq!(
        wide.conform(&train).unwrap_err().to_string(),
        "d: tensor \"x\" holds samples of shape (3,) but the training part's (d) are (2,): both \
         parts need the same sample shape"
    );
    let values = data(&Arr::u8(&[2, 2], &[0; 4]), &Arr::f32(&[2], &[1.0, 2.0])).unwrap();
    assert_eq!(
        values.conform(&train).unwrap_err().to_string(),
        "d: tensor \"y\" holds 1 value(s) per sample (floats) but the training part's (d) holds \
         class labels (integers): both parts need the same kind of targets"
    );
}

#[test]
fn a_mapped_file_is_read_and_its_pages_released() {
    use crate::data::tensors::{layout::Part, write};
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("d.safetensors");
    let x = Arr::u8(&[3, 2, 2], &[0, 51, 102, 153, 204, 255, 1, 2, 3, 4, 5, 6]);
    let y = Arr::i64(&[3], &[2, 0, 1]);
    std::fs::write(&p, write::safetensors(&[("x", &x), ("y", &y)])).unwrap();
    let (xa, ya) = Part::Safetensors(p.clone())
        .open(crate::data::tensors::layout::Keys { x: "x", y: "y" })
        .unwrap();
    let ds = TensorData::new(xa, ya, false).unwrap();
    assert_eq!(ds.files(), vec![p]);
    for _ in 0..2 {
        let b = fill(&ds, &[1, 0]);
        assert_eq!(
            b.x,
            vec![0.8, 1.0, 1.0 / 255.0, 2.0 / 255.0, 0.0, 0.2, 0.4, 0.6]
        );
        assert_eq!(b.classes, vec![0, 2]);
    }
}
