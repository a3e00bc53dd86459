//! The data of sample tasks (classification, regression): the train, validation and test sets
//! of a spec.

use crate::data::{self, Dataset, Split};
use crate::spec::{DataName, Spec};
use crate::{Error, Result};

/// The train, validation and test sets of a spec.
pub struct Splits {
    pub train: Dataset,
    pub val: Dataset,
    pub test: Dataset,
}

pub fn load_data(spec: &Spec) -> Result<Splits> {
    let d = &spec.data;
    let load = |split: Split| -> Result<Dataset> {
        let dir = || d.path.clone().unwrap_or_default();
        match d.name {
            DataName::Mnist => data::load_mnist(&dir(), split),
            DataName::FashionMnist => data::load_fashion_mnist(&dir(), split),
            DataName::Cifar10 => data::load_cifar10(&dir(), split),
            DataName::Synthetic => Ok(data::synthetic(&synthetic_config(spec), split)),
            DataName::Text | DataName::Tokens => Err(Error::Model(
                "language-model data (data.name = \"text\" or \"tokens\") is not trained by this loop yet".into(),
            )),
        }
    };
    let limit = |ds: Dataset, n: Option<usize>| match n {
        Some(n) if n < ds.len() => ds.subset(&(0..n).collect::<Vec<_>>()),
        _ => ds,
    };
    let full = limit(load(Split::Train)?, d.limit_train);
    let test = limit(load(Split::Test)?, d.limit_test);
    let (train, val) = data::train_val_split(&full, d.val_fraction, spec.train.seed)?;
    Ok(Splits { train, val, test })
}

fn synthetic_config(spec: &Spec) -> data::SyntheticConfig {
    let d = &spec.data;
    data::SyntheticConfig {
        task: match d.task {
            crate::spec::SyntheticTask::Classification => data::Task::Classification,
            crate::spec::SyntheticTask::Regression => data::Task::Regression,
        },
        shape: d
            .shape
            .unwrap_or_else(|| crate::models::expected_input(spec.model.name)),
        classes: d.classes,
        train_size: d.train_size,
        test_size: d.test_size,
        noise: d.noise,
        seed: spec.train.seed,
    }
}
