//! The data set of a trainer executable built with [`crate::Trainer`] (`data.name = "custom"`):
//! registered once by the executable, opened for the training and the test part.

use std::sync::OnceLock;

use super::parts::{DataRecord, Parts};
use super::{SharedDataset, Split};
use crate::spec::Spec;
use crate::{Error, Result};

/// Makes the executable's data set for a part.
pub type DatasetMaker = Box<dyn Fn(Split) -> Result<SharedDataset> + Send + Sync>;

static MAKER: OnceLock<DatasetMaker> = OnceLock::new();

/// Registers this executable's data set (once; later calls are ignored).
pub fn register(maker: DatasetMaker) {
    let _ = MAKER.set(maker);
}

/// Whether this executable has a data set of its own.
pub fn registered() -> bool {
    MAKER.get().is_some()
}

/// The registered data set's training and test parts.
pub fn open(spec: &Spec) -> Result<Parts> {
    let maker = MAKER.get().ok_or_else(|| {
        Error::Model(format!(
            "{}: data.name = \"custom\" needs a trainer executable with its own data set \
             (`ddp_trainer::Trainer::new().dataset(...)`); start it with `ddp run SPEC --trainer PATH` \
             (see docs/data.md, \"A data set written in Rust\")",
            spec.source.display()
        ))
    })?;
    let train = maker(Split::Train)?;
    let test = maker(Split::Test)?;
    for (part, ds) in [("train", &train), ("test", &test)] {
        if ds.shape() != train.shape() || ds.target() != train.target() {
            return Err(Error::Model(format!(
                "custom data set: its {part} part has inputs {:?} and targets {:?}, but the training part has {:?} and {:?}: both parts must agree",
                ds.shape(),
                ds.target(),
                train.shape(),
                train.target()
            )));
        }
    }
    let record = DataRecord {
        format: "custom".into(),
        train_samples: train.len(),
        test_samples: test.len(),
        ..DataRecord::default()
    };
    Ok(Parts {
        train,
        test,
        record,
    })
}
