//! PyTorch's default initialisation, seeded: Conv/Linear weights and biases uniform in
//! ±1/sqrt(fan_in) (`kaiming_uniform_(a=√5)` reduces to that), BatchNorm weight 1 and bias 0.
//! Values come from a SplitMix64 stream per parameter (seeded by the spec seed and the name), so
//! the initial weights do not depend on the world size, the rank, or the order layers were built.
//! [`normal`] draws N(0, σ²) values from the same streams, for models initialised that way (GPT).

use candle_core::{Tensor, Var};

use crate::Result;
use crate::data::rng::SplitMix64;

pub fn pytorch_default(params: &[(String, Var)], seed: u64) -> Result<()> {
    for (name, var) in params {
        let Some(bound) = bound_for(name, var, params) else {
            continue;
        };
        let mut rng = SplitMix64::new(seed ^ fnv1a(name));
        let values: Vec<f32> = (0..var.elem_count())
            .map(|_| ((rng.next_f64() * 2.0 - 1.0) * bound) as f32)
            .collect();
        var.set(&Tensor::from_vec(values, var.shape(), var.device())?)?;
    }
    Ok(())
}

/// Sets `var` (named `name`) to N(0, `std`²) values from its seeded stream (Box–Muller pairs).
pub fn normal(name: &str, var: &Var, std: f64, seed: u64) -> Result<()> {
    let mut rng = SplitMix64::new(seed ^ fnv1a(name));
    let n = var.elem_count();
    let mut values: Vec<f32> = Vec::with_capacity(n + 1);
    while values.len() < n {
        // 1 − u lies in (0, 1]: the logarithm stays finite.
        let radius = (-2.0 * (1.0 - rng.next_f64()).ln()).sqrt() * std;
        let angle = std::f64::consts::TAU * rng.next_f64();
        values.push((radius * angle.cos()) as f32);
        values.push((radius * angle.sin()) as f32);
    }
    values.truncate(n);
    var.set(&Tensor::from_vec(values, var.shape(), var.device())?)?;
    Ok(())
}

/// The uniform bound for a parameter, or None to keep its constant init (BatchNorm).
fn bound_for(name: &str, var: &Var, params: &[(String, Var)]) -> Option<f64> {
    let fan_in = |w: &Var| -> usize { w.dims()[1..].iter().product() };
    if var.rank() >= 2 {
        return Some(1.0 / (fan_in(var) as f64).sqrt());
    }
    let base = name
        .strip_suffix(".bias")
        .or_else(|| name.strip_suffix("bias"))?;
    let weight_name = if name.ends_with(".bias") {
        format!("{base}.weight")
    } else {
        "weight".to_string()
    };
    let weight = params
        .iter()
        .find(|(n, _)| *n == weight_name)
        .map(|(_, w)| w)?;
    (weight.rank() >= 2).then(|| 1.0 / (fan_in(weight) as f64).sqrt())
}

fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    #[test]
    fn bounds_follow_fan_in_and_bn_is_untouched() {
        let w = Var::zeros((4, 3, 2, 2), DType::F32, &Device::Cpu).unwrap();
        let b = Var::zeros(4, DType::F32, &Device::Cpu).unwrap();
        let g = Var::ones(4, DType::F32, &Device::Cpu).unwrap();
        let params = vec![
            ("c.bias".to_string(), b.clone()),
            ("c.weight".to_string(), w.clone()),
            ("bn.weight".to_string(), g.clone()),
        ];
        pytorch_default(&params, 7).unwrap();
        let bound = 1.0 / 12f32.sqrt();
        for v in [w.flatten_all().unwrap(), b.as_tensor().clone()] {
            let v: Vec<f32> = v.to_vec1().unwrap();
            assert!(v.iter().all(|x| x.abs() <= bound && *x != 0.0), "{v:?}");
        }
        assert_eq!(g.to_vec1::<f32>().unwrap(), vec![1.0; 4]);
        // Deterministic for a seed.
        let w2 = Var::zeros((4, 3, 2, 2), DType::F32, &Device::Cpu).unwrap();
        pytorch_default(&[("c.weight".to_string(), w2.clone())], 7).unwrap();
        assert_eq!(
            w2.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            w.flatten_all().unwrap().to_vec1::<f32>().unwrap()
        );
    }
}
