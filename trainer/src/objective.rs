//! The objective of sample tasks: the loss a batch trains on and the figures it is evaluated
//! with. Built in: cross-entropy on classes (with accuracy) and mean squared error on values. A
//! trainer executable may register its own loss and metrics ([`crate::Trainer::loss`],
//! [`crate::Trainer::metrics`]).

use std::sync::OnceLock;

use candle_core::{DType, Device, Tensor};

use crate::data::BatchRows;
use crate::{Error, Result};

/// A loss: the model's outputs and the batch's targets (classes `u32 [B]`, or values
/// `f32 [B, k]`) to a scalar, the mean over the batch.
pub type LossFn = Box<dyn Fn(&Tensor, &Tensor) -> candle_core::Result<Tensor> + Send + Sync>;

/// Metrics: the model's outputs and the batch's targets to named sums over the batch's samples
/// (e.g. the sum of absolute errors); the engine adds them up over batches and replicas and
/// reports each divided by the number of samples.
pub type MetricsFn =
    Box<dyn Fn(&Tensor, &Tensor) -> candle_core::Result<Vec<(String, f64)>> + Send + Sync>;

static LOSS: OnceLock<LossFn> = OnceLock::new();
static METRICS: OnceLock<MetricsFn> = OnceLock::new();

/// Registers this executable's loss (once; later calls are ignored).
pub fn register_loss(loss: LossFn) {
    let _ = LOSS.set(loss);
}

/// Registers this executable's metrics (once; later calls are ignored).
pub fn register_metrics(metrics: MetricsFn) {
    let _ = METRICS.set(metrics);
}

/// The targets of `batch` as a tensor: classes `u32 [B]`, or values `f32 [B, k]`.
pub fn targets(batch: &BatchRows, device: &Device) -> Result<Tensor> {
    Ok(if batch.values.is_empty() {
        Tensor::from_slice(batch.classes, batch.len, device)?
    } else {
        let k = batch.values.len() / batch.len.max(1);
        Tensor::from_slice(batch.values, (batch.len, k), device)?
    })
}

/// The loss of outputs `out` against targets `y`: the registered loss, else cross-entropy for
/// classes and mean squared error for values. A registered loss must give a scalar.
pub fn loss(out: &Tensor, y: &Tensor) -> Result<Tensor> {
    let Some(custom) = LOSS.get() else {
        return Ok(if y.dtype() == DType::U32 {
            candle_nn::loss::cross_entropy(out, y)?
        } else {
            candle_nn::loss::mse(out, y)?
        });
    };
    let l = custom(out, y).map_err(|e| Error::Model(format!("the custom loss failed: {e}")))?;
    if l.rank() != 0 {
        return Err(Error::Model(format!(
            "the custom loss gave a tensor of shape {:?}: it must be a scalar, the mean over the batch (e.g. end with .mean_all())",
            l.dims()
        )));
    }
    Ok(l.to_dtype(DType::F32)?)
}

/// The number of correct predictions in a batch of classes whose outputs are `[B, classes]`
/// logits (none for values or other outputs).
pub fn correct(out: &Tensor, y: &Tensor) -> Result<Option<f64>> {
    if y.dtype() != DType::U32 || out.rank() != 2 || out.dim(0)? != y.dim(0)? {
        return Ok(None);
    }
    let c = out.argmax(1)?.eq(y)?.to_dtype(DType::F32)?.sum_all()?;
    Ok(Some(c.to_scalar::<f32>()? as f64))
}

/// The registered metrics' sums over a batch (none without metrics).
pub fn metric_sums(out: &Tensor, y: &Tensor) -> Result<Vec<(String, f64)>> {
    match METRICS.get() {
        None => Ok(Vec::new()),
        Some(m) => m(out, y).map_err(|e| Error::Model(format!("the custom metrics failed: {e}"))),
    }
}

/// Adds `batch` (named sums) into `totals`, keeping the names' first order; a batch with other
/// names than the first is an error (the replicas add the sums up by position).
pub fn add_sums(totals: &mut Vec<(String, f64)>, batch: Vec<(String, f64)>) -> Result<()> {
    if totals.is_empty() {
        *totals = batch;
        return Ok(());
    }
    let same = totals.len() == batch.len() && totals.iter().zip(&batch).all(|(a, b)| a.0 == b.0);
    if !same {
        let names = |v: &[(String, f64)]| v.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
        return Err(Error::Model(format!(
            "the custom metrics named {:?} for one batch and {:?} for another: return the same names in the same order every time",
            names(totals),
            names(&batch)
        )));
    }
    for (t, (_, v)) in totals.iter_mut().zip(batch) {
        t.1 += v;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_losses_and_accuracy() {
        let dev = Device::Cpu;
        let out = Tensor::new(&[[2f32, 0.0], [0.0, 1.0], [3.0, 0.0]], &dev).unwrap();
        let y = Tensor::new(&[0u32, 1, 1], &dev).unwrap();
        let l = loss(&out, &y).unwrap().to_scalar::<f32>().unwrap();
        let ce = |a: f32, b: f32, k: usize| {
            let m = [a, b];
            (a.exp() + b.exp()).ln() - m[k]
        };
        let want = (ce(2.0, 0.0, 0) + ce(0.0, 1.0, 1) + ce(3.0, 0.0, 1)) / 3.0;
        assert!((l - want).abs() < 1e-6, "{l} vs {want}");
        assert_eq!(correct(&out, &y).unwrap(), Some(2.0));
        let v = Tensor::new(&[[1f32, 2.0], [3.0, 5.0]], &dev).unwrap();
        let t = Tensor::new(&[[1f32, 0.0], [3.0, 4.0]], &dev).unwrap();
        assert_eq!(loss(&v, &t).unwrap().to_scalar::<f32>().unwrap(), 5.0 / 4.0);
        assert_eq!(correct(&v, &t).unwrap(), None);
    }

    #[test]
    fn sums_add_up_by_name() {
        let mut t = Vec::new();
        add_sums(&mut t, vec![("mae".into(), 1.5), ("n".into(), 2.0)]).unwrap();
        add_sums(&mut t, vec![("mae".into(), 0.5), ("n".into(), 1.0)]).unwrap();
        assert_eq!(t, vec![("mae".into(), 2.0), ("n".into(), 3.0)]);
        let e = add_sums(&mut t, vec![("n".into(), 1.0)])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("named [\"mae\", \"n\"] for one batch and [\"n\"] for another"),
            "{e}"
        );
    }
}
