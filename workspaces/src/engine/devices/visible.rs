//! `CUDA_VISIBLE_DEVICES`: which GPUs a process sees and in which order.
//!
//! The value is a comma-separated list of NVML indices (`0,2`) or GPU UUIDs, possibly shortened
//! to any unambiguous prefix (`GPU-8c7b`), as the CUDA runtime reads it; the i-th entry becomes
//! CUDA ordinal i. An empty value hides every GPU. A negative index ends the list (CUDA's rule,
//! so the common `CUDA_VISIBLE_DEVICES=-1` also hides every GPU). Anything else the CUDA runtime
//! would silently cut the list at (an unknown index or UUID, a duplicate, junk) is an error here,
//! naming the entry: a run should not quietly land on fewer GPUs than its user meant.

use super::gpu::{CUDA_VISIBLE_DEVICES, Gpu, gpu_range};
use crate::error::{Error, Result};

/// The GPUs of `all` (NVML order, `physical` set) that `cvd` lets through, with `index` set to
/// their CUDA ordinal.
pub fn apply_visible(all: &[Gpu], cvd: &str) -> Result<Vec<Gpu>> {
    let bad = |msg: String| Error::Invalid(format!("{CUDA_VISIBLE_DEVICES}={cvd:?}: {msg}"));
    let mut visible: Vec<Gpu> = Vec::new();
    if cvd.trim().is_empty() {
        return Ok(visible);
    }
    for entry in cvd.split(',').map(str::trim) {
        let gpu = if entry.is_empty() {
            return Err(bad(
                "empty entry (expected GPU indices or UUIDs separated by commas)".into(),
            ));
        } else if entry.len() > 1
            && entry.starts_with('-')
            && entry[1..].bytes().all(|b| b.is_ascii_digit())
        {
            break;
        } else if entry.bytes().all(|b| b.is_ascii_digit()) {
            let n: Option<usize> = entry.parse().ok();
            match n.and_then(|n| all.get(n)) {
                Some(gpu) => gpu,
                None => {
                    return Err(bad(format!(
                        "there is no GPU {entry} (this machine has {})",
                        gpu_range(all.len())
                    )));
                }
            }
        } else if has_prefix(entry, "GPU-") {
            let matches: Vec<&Gpu> = all.iter().filter(|g| has_prefix(&g.uuid, entry)).collect();
            match matches.as_slice() {
                [gpu] => *gpu,
                [] => return Err(bad(format!("no GPU has a UUID starting with {entry}"))),
                many => {
                    let uuids: Vec<&str> = many.iter().map(|g| g.uuid.as_str()).collect();
                    return Err(bad(format!(
                        "{entry} matches {} GPUs ({}); give more of the UUID",
                        many.len(),
                        uuids.join(", ")
                    )));
                }
            }
        } else if has_prefix(entry, "MIG-") {
            return Err(bad(format!(
                "{entry} is a MIG instance; ddp places replicas on whole GPUs only"
            )));
        } else {
            return Err(bad(format!(
                "{entry:?} is neither a GPU index (0, 1, ...) nor a GPU UUID (GPU-...)"
            )));
        };
        if visible.iter().any(|v| v.physical == gpu.physical) {
            return Err(bad(format!(
                "names GPU {} ({}) twice",
                gpu.physical, gpu.uuid
            )));
        }
        visible.push(Gpu {
            index: visible.len(),
            ..gpu.clone()
        });
    }
    Ok(visible)
}

/// Case-insensitive `text.starts_with(prefix)` (UUIDs are hex, either case).
fn has_prefix(text: &str, prefix: &str) -> bool {
    text.len() >= prefix.len()
        && text.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> Vec<Gpu> {
        ["GPU-aa11", "GPU-ab22", "GPU-bb33"]
            .iter()
            .enumerate()
            .map(|(i, uuid)| Gpu {
                index: i,
                physical: i,
                uuid: uuid.to_string(),
                name: "NVIDIA A100".to_string(),
                memory_total_mb: 40960,
            })
            .collect()
    }

    /// (ordinal, physical) pairs.
    fn seen(cvd: &str) -> Vec<(usize, usize)> {
        apply_visible(&machine(), cvd)
            .unwrap()
            .iter()
            .map(|g| (g.index, g.physical))
            .collect()
    }

    fn error(cvd: &str) -> String {
        apply_visible(&machine(), cvd).unwrap_err().to_string()
    }

    #[test]
    fn indices_select_and_reorder() {
        assert_eq!(seen("0,1,2"), [(0, 0), (1, 1), (2, 2)]);
        assert_eq!(seen("2, 0"), [(0, 2), (1, 0)]);
        assert_eq!(seen("1"), [(0, 1)]);
    }

    #[test]
    fn empty_and_negative_hide_gpus() {
        assert_eq!(seen(""), []);
        assert_eq!(seen("  "), []);
        assert_eq!(seen("-1"), []);
        // CUDA stops at a negative index.
        assert_eq!(seen("1,-1,0"), [(0, 1)]);
    }

    #[test]
    fn uuid_prefixes_select_gpus() {
        assert_eq!(seen("GPU-bb33,GPU-aa"), [(0, 2), (1, 0)]);
        assert_eq!(seen("gpu-AB2"), [(0, 1)]);
        // Indices and UUIDs mix.
        assert_eq!(seen("GPU-ab,0"), [(0, 1), (1, 0)]);
    }

    #[test]
    fn unknown_entries_are_errors() {
        assert_eq!(
            error("0,3"),
            "CUDA_VISIBLE_DEVICES=\"0,3\": there is no GPU 3 (this machine has GPUs 0-2)"
        );
        assert_eq!(
            error("GPU-a"),
            "CUDA_VISIBLE_DEVICES=\"GPU-a\": GPU-a matches 2 GPUs (GPU-aa11, GPU-ab22); give more of the UUID"
        );
        assert_eq!(
            error("GPU-cc"),
            "CUDA_VISIBLE_DEVICES=\"GPU-cc\": no GPU has a UUID starting with GPU-cc"
        );
        assert_eq!(
            error("gpu0"),
            "CUDA_VISIBLE_DEVICES=\"gpu0\": \"gpu0\" is neither a GPU index (0, 1, ...) nor a GPU UUID (GPU-...)"
        );
        assert_eq!(
            error("0,,1"),
            "CUDA_VISIBLE_DEVICES=\"0,,1\": empty entry (expected GPU indices or UUIDs separated by commas)"
        );
        assert_eq!(
            error("1,GPU-ab"),
            "CUDA_VISIBLE_DEVICES=\"1,GPU-ab\": names GPU 1 (GPU-ab22) twice"
        );
        assert_eq!(
            error("MIG-1234"),
            "CUDA_VISIBLE_DEVICES=\"MIG-1234\": MIG-1234 is a MIG instance; ddp places replicas on whole GPUs only"
        );
        assert_eq!(
            error("99999999999999999999999"),
            "CUDA_VISIBLE_DEVICES=\"99999999999999999999999\": there is no GPU 99999999999999999999999 (this machine has GPUs 0-2)"
        );
    }
}
