//! The last N readings, for sparklines: [`History`] (one series) and [`TelemetryHistory`] (the
//! series a devices view draws, fed one [`Telemetry`] at a time).

use std::collections::{BTreeMap, VecDeque};

use super::readings::{GpuSample, Telemetry};

/// A ring buffer of the last `capacity` values, oldest first; pushing onto a full one drops the
/// oldest.
#[derive(Debug, Clone, PartialEq)]
pub struct History<T = f64> {
    capacity: usize,
    values: VecDeque<T>,
}

impl<T> History<T> {
    /// An empty history keeping at most `capacity` values (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        History {
            capacity,
            values: VecDeque::with_capacity(capacity),
        }
    }

    /// Appends `value`, dropping the oldest when full.
    pub fn push(&mut self, value: T) {
        if self.values.len() == self.capacity {
            self.values.pop_front();
        }
        self.values.push_back(value);
    }

    /// The values, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator {
        self.values.iter()
    }

    /// The newest value.
    pub fn latest(&self) -> Option<&T> {
        self.values.back()
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

impl<T: Copy> History<T> {
    /// The values, oldest first, as a vector (what sparkline widgets take).
    pub fn to_vec(&self) -> Vec<T> {
        self.values.iter().copied().collect()
    }
}

impl History<f64> {
    /// The largest value (NaN ignored).
    pub fn max(&self) -> Option<f64> {
        self.values
            .iter()
            .copied()
            .filter(|v| !v.is_nan())
            .reduce(f64::max)
    }
}

/// One GPU's series; a value is `None` where the reading was missing (or the GPU absent).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuHistory {
    pub utilization_pct: History<Option<f64>>,
    /// Memory used, percent of the GPU's total.
    pub memory_used_pct: History<Option<f64>>,
    pub power_w: History<Option<f64>>,
    pub temperature_c: History<Option<f64>>,
}

impl GpuHistory {
    fn new(capacity: usize, missing: usize) -> Self {
        let mut series = History::new(capacity);
        for _ in 0..missing {
            series.push(None);
        }
        GpuHistory {
            utilization_pct: series.clone(),
            memory_used_pct: series.clone(),
            power_w: series.clone(),
            temperature_c: series,
        }
    }

    fn push(&mut self, sample: Option<&GpuSample>) {
        let memory_pct = sample.and_then(|g| {
            let (used, total) = (g.memory_used_bytes?, g.memory_total_bytes?);
            (total > 0).then(|| used as f64 / total as f64 * 100.0)
        });
        self.utilization_pct
            .push(sample.and_then(|g| g.utilization_pct));
        self.memory_used_pct.push(memory_pct);
        self.power_w.push(sample.and_then(|g| g.power_w));
        self.temperature_c
            .push(sample.and_then(|g| g.temperature_c));
    }

    fn is_blank(&self) -> bool {
        self.utilization_pct.iter().all(Option::is_none)
            && self.memory_used_pct.iter().all(Option::is_none)
            && self.power_w.iter().all(Option::is_none)
            && self.temperature_c.iter().all(Option::is_none)
    }
}

/// The last `capacity` samples' CPU total, memory and per-GPU series. Every series holds one
/// value per sample pushed (up to `capacity`), so they line up: a GPU first seen later is padded
/// with `None` at the front, a GPU missing from a sample gets `None`, and a GPU with nothing but
/// `None` left is forgotten.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryHistory {
    capacity: usize,
    cpu_total_pct: History<f64>,
    memory_used_pct: History<f64>,
    gpus: BTreeMap<usize, GpuHistory>,
}

impl TelemetryHistory {
    pub fn new(capacity: usize) -> Self {
        TelemetryHistory {
            capacity: capacity.max(1),
            cpu_total_pct: History::new(capacity),
            memory_used_pct: History::new(capacity),
            gpus: BTreeMap::new(),
        }
    }

    /// Adds one sample to every series.
    pub fn push(&mut self, sample: &Telemetry) {
        let missing = self.cpu_total_pct.len();
        self.cpu_total_pct.push(sample.cpu.total_pct);
        self.memory_used_pct.push(sample.memory.used_pct());
        for gpu in &sample.gpus {
            self.gpus
                .entry(gpu.index)
                .or_insert_with(|| GpuHistory::new(self.capacity, missing));
        }
        for (index, history) in &mut self.gpus {
            history.push(sample.gpus.iter().find(|g| g.index == *index));
        }
        // A GPU present keeps its series even when it reads nothing.
        self.gpus.retain(|index, history| {
            sample.gpus.iter().any(|g| g.index == *index) || !history.is_blank()
        });
    }

    /// All CPUs' utilisation, percent.
    pub fn cpu_total_pct(&self) -> &History<f64> {
        &self.cpu_total_pct
    }

    /// Memory in use (total − available), percent of total.
    pub fn memory_used_pct(&self) -> &History<f64> {
        &self.memory_used_pct
    }

    /// The series of the GPU with this NVML index.
    pub fn gpu(&self, index: usize) -> Option<&GpuHistory> {
        self.gpus.get(&index)
    }

    /// Every GPU's series, by NVML index.
    pub fn gpus(&self) -> impl Iterator<Item = (usize, &GpuHistory)> {
        self.gpus.iter().map(|(i, h)| (*i, h))
    }

    /// Samples held (at most the capacity).
    pub fn len(&self) -> usize {
        self.cpu_total_pct.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cpu_total_pct.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::super::readings::{CpuSample, MemorySample};
    use super::*;

    #[test]
    fn a_full_history_drops_the_oldest() {
        let mut h = History::new(3);
        assert!(h.is_empty() && h.latest().is_none() && h.max().is_none());
        for v in [1.0, 5.0, 2.0, 4.0] {
            h.push(v);
        }
        assert_eq!(h.to_vec(), [5.0, 2.0, 4.0]);
        assert_eq!((h.len(), h.capacity()), (3, 3));
        assert_eq!(h.latest(), Some(&4.0));
        assert_eq!(h.max(), Some(5.0));
        assert_eq!(h.iter().next_back(), Some(&4.0));
        // A capacity of 0 keeps one value.
        let mut one = History::new(0);
        one.push('a');
        one.push('b');
        assert_eq!(one.to_vec(), ['b']);
    }

    fn gpu(index: usize, util: Option<f64>) -> GpuSample {
        GpuSample {
            index,
            uuid: None,
            name: "g".into(),
            utilization_pct: util,
            memory_used_bytes: Some(25),
            memory_total_bytes: Some(100),
            temperature_c: None,
            power_w: Some(100.0),
            power_limit_w: None,
            processes: vec![],
            held_by: None,
        }
    }

    fn sample(cpu: f64, gpus: Vec<GpuSample>) -> Telemetry {
        Telemetry::sample()
            .gpus(gpus)
            .cpu(CpuSample {
                per_core_pct: vec![cpu],
                total_pct: cpu,
            })
            .memory(MemorySample {
                total_bytes: 200,
                available_bytes: 150,
            })
            .processes(vec![])
    }

    #[test]
    fn series_line_up_as_gpus_come_and_go() {
        let mut h = TelemetryHistory::new(3);
        h.push(&sample(10.0, vec![gpu(0, Some(50.0))]));
        h.push(&sample(20.0, vec![gpu(0, Some(60.0)), gpu(1, None)]));
        assert_eq!(h.len(), 2);
        assert_eq!(h.cpu_total_pct().to_vec(), [10.0, 20.0]);
        assert_eq!(h.memory_used_pct().to_vec(), [25.0, 25.0]);
        let g0 = h.gpu(0).unwrap();
        assert_eq!(g0.utilization_pct.to_vec(), [Some(50.0), Some(60.0)]);
        assert_eq!(g0.memory_used_pct.to_vec(), [Some(25.0), Some(25.0)]);
        assert_eq!(g0.temperature_c.to_vec(), [None, None]);
        // GPU 1 appeared in the second sample: padded in front.
        let g1 = h.gpu(1).unwrap();
        assert_eq!(g1.utilization_pct.to_vec(), [None, None]);
        assert_eq!(g1.power_w.to_vec(), [None, Some(100.0)]);
        // GPU 0 vanishes: None, until it has nothing but None and is forgotten.
        h.push(&sample(30.0, vec![gpu(1, Some(1.0))]));
        assert_eq!(
            h.gpu(0).unwrap().utilization_pct.to_vec(),
            [Some(50.0), Some(60.0), None]
        );
        for _ in 0..2 {
            h.push(&sample(40.0, vec![gpu(1, Some(1.0))]));
        }
        assert!(h.gpu(0).is_none());
        assert_eq!(h.gpus().map(|(i, _)| i).collect::<Vec<_>>(), [1]);
        assert_eq!(h.cpu_total_pct().to_vec(), [30.0, 40.0, 40.0]);
    }
}
