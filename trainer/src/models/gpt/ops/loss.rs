//! The two ends of the GPT: token plus position embeddings (a gather forward, a scatter-add
//! backward) and the mean cross-entropy of the logits fused with their log-softmax
//! ([`crate::models::kernels::cross_entropy`]), one custom op each on CPU; elsewhere candle's.

use std::sync::Arc;

use candle_core::{CpuStorage, DType, Layout, Shape, Tensor};

use crate::models::cpu_tensor::{cpu_tensor, is_cpu_f32, storage_f32, with_f32};
use crate::models::kernels::cross_entropy as ce_kernel;
use crate::models::kernels::tasks::threads;

/// `wte[ids] + wpe[start..start + T]` for ids `[B, T]` (u32): `[B·T, E]`.
pub fn embed(
    ids: &Tensor,
    wte: &Tensor,
    wpe: &Tensor,
    start: usize,
) -> candle_core::Result<Tensor> {
    let (b, t) = ids.dims2()?;
    let e = wte.dim(1)?;
    if !is_cpu_f32(wte) || !is_cpu_f32(wpe) {
        let tokens = wte.embedding(&ids.flatten_all()?)?;
        let positions = wpe.narrow(0, start, t)?;
        return tokens
            .reshape((b, t, e))?
            .broadcast_add(&positions)?
            .reshape((b * t, e));
    }
    let op = EmbedOp {
        ids: Arc::new(ids.flatten_all()?.to_vec1::<u32>()?),
        seq: t,
        start,
    };
    wte.contiguous()?.apply_op2(&wpe.contiguous()?, op)
}

/// The mean cross-entropy of `logits` `[N, V]` against `targets` `[N]` (u32), PyTorch's
/// `F.cross_entropy`.
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
    if !is_cpu_f32(logits) {
        return candle_nn::loss::cross_entropy(logits, targets);
    }
    let targets = Arc::new(
        targets
            .flatten_all()?
            .to_dtype(DType::U32)?
            .to_vec1::<u32>()?,
    );
    logits.contiguous()?.apply_op1(CrossEntropyOp(targets))
}

#[derive(Clone)]
struct EmbedOp {
    /// `B·T` token ids, row by row.
    ids: Arc<Vec<u32>>,
    seq: usize,
    start: usize,
}

impl candle_core::CustomOp2 for EmbedOp {
    fn name(&self) -> &'static str {
        "embed"
    }

    fn cpu_fwd(
        &self,
        wte: &CpuStorage,
        tl: &Layout,
        wpe: &CpuStorage,
        pl: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (vocab, e) = tl.shape().dims2()?;
        let (positions, pe) = pl.shape().dims2()?;
        if pe != e || self.start + self.seq > positions {
            candle_core::bail!(
                "embed: positions {}..{} of {positions} (width {pe}) for tokens of width {e}",
                self.start,
                self.start + self.seq
            );
        }
        if let Some(bad) = self.ids.iter().find(|&&id| id as usize >= vocab) {
            candle_core::bail!("embed: token id {bad} is outside the vocabulary of {vocab}");
        }
        let (wte, wpe) = (
            storage_f32(wte, tl, "token embedding")?,
            storage_f32(wpe, pl, "position embedding")?,
        );
        let mut out = Vec::with_capacity(self.ids.len() * e);
        for (i, &id) in self.ids.iter().enumerate() {
            let tok = &wte[id as usize * e..][..e];
            let pos = &wpe[(self.start + i % self.seq) * e..][..e];
            out.extend(tok.iter().zip(pos).map(|(a, b)| a + b));
        }
        Ok((CpuStorage::F32(out), Shape::from((self.ids.len(), e))))
    }

    fn bwd(
        &self,
        wte: &Tensor,
        wpe: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let e = wte.dim(1)?;
        let mut dwte = vec![0f32; wte.elem_count()];
        let mut dwpe = vec![0f32; wpe.elem_count()];
        with_f32(grad, "embedding gradient", |g| {
            for (i, (&id, row)) in self.ids.iter().zip(g.chunks_exact(e)).enumerate() {
                let pos = self.start + i % self.seq;
                for (a, v) in dwte[id as usize * e..][..e].iter_mut().zip(row) {
                    *a += v;
                }
                for (a, v) in dwpe[pos * e..][..e].iter_mut().zip(row) {
                    *a += v;
                }
            }
        })?;
        Ok((
            Some(cpu_tensor(dwte, wte.shape())?),
            Some(cpu_tensor(dwpe, wpe.shape())?),
        ))
    }
}

/// The targets.
#[derive(Clone)]
struct CrossEntropyOp(Arc<Vec<u32>>);

impl candle_core::CustomOp1 for CrossEntropyOp {
    fn name(&self) -> &'static str {
        "cross-entropy"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let logits = storage_f32(s, l, "cross-entropy logits")?;
        let loss =
            ce_kernel::forward(logits, &self.0, threads()).map_err(candle_core::Error::Msg)?;
        Ok((CpuStorage::F32(vec![loss]), Shape::from(())))
    }

    fn bwd(
        &self,
        logits: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let g = grad.flatten_all()?.to_vec1::<f32>()?;
        let g = g.first().copied().unwrap_or(0.0);
        let d = with_f32(logits, "cross-entropy logits", |l| {
            ce_kernel::backward(l, &self.0, g, threads())
        })?
        .map_err(candle_core::Error::Msg)?;
        Ok(Some(cpu_tensor(d, logits.shape())?))
    }
}
