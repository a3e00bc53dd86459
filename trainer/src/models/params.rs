//! What the layers and models are built with: [`ParamBuilder`] (parameters in a candle `VarMap`,
//! buffers in a [`BufferStore`], the BatchNorm mode [`BnMode`]) and the [`Forward`] pass every
//! model implements.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};

/// Non-trainable state (BatchNorm running statistics), by full name.
#[derive(Default)]
pub struct BufferStore(Mutex<BTreeMap<String, Tensor>>);

impl BufferStore {
    pub fn insert(&self, name: String, t: Tensor) {
        self.0
            .lock()
            .expect("buffer store poisoned")
            .insert(name, t);
    }
    pub fn get(&self, name: &str) -> Option<Tensor> {
        self.0
            .lock()
            .expect("buffer store poisoned")
            .get(name)
            .cloned()
    }
    /// All buffers in name order.
    pub fn snapshot(&self) -> Vec<(String, Tensor)> {
        self.0
            .lock()
            .expect("buffer store poisoned")
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
    pub fn is_empty(&self) -> bool {
        self.0.lock().expect("buffer store poisoned").is_empty()
    }
}

/// A candle `VarBuilder` plus where buffers go and how BatchNorm computes statistics.
#[derive(Clone)]
pub struct ParamBuilder {
    pub vb: VarBuilder<'static>,
    pub buffers: Arc<BufferStore>,
    pub bn: BnMode,
}

impl ParamBuilder {
    pub fn new(varmap: &VarMap, device: &Device, bn: BnMode) -> Self {
        Self {
            vb: VarBuilder::from_varmap(varmap, DType::F32, device),
            buffers: Arc::new(BufferStore::default()),
            bn,
        }
    }
    pub fn pp(&self, name: impl ToString) -> Self {
        Self {
            vb: self.vb.pp(name),
            buffers: self.buffers.clone(),
            bn: self.bn.clone(),
        }
    }
}

/// A model's forward pass. `train` selects batch statistics (and running-stat updates) in BatchNorm.
pub trait Forward: Send + Sync {
    fn forward(&self, x: &Tensor, train: bool) -> candle_core::Result<Tensor>;
}

/// Sums small host vectors across replicas (implemented by the DDP layer over a collective).
pub trait StatsReducer: Send + Sync {
    fn all_reduce_sum(&self, buf: &mut [f32]) -> candle_core::Result<()>;
}

/// How BatchNorm layers compute their batch statistics in training mode.
#[derive(Clone, Default)]
pub enum BnMode {
    /// Each replica normalises with its own batch (DDP default; buffers broadcast from rank 0).
    #[default]
    Local,
    /// SyncBatchNorm: statistics over all replicas' batches.
    Sync(Arc<dyn StatsReducer>),
}
