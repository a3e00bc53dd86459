use std::collections::HashMap;

use candle_core::{Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};

use super::*;
use crate::test_util::tensor_diff;

fn tiny() -> GptConfig {
    GptConfig::new(11, 8, 2, 2, 16)
}

/// A GPT of shape `cfg` initialised from `seed`, with its parameters in name order.
fn build(cfg: &GptConfig, seed: u64) -> (Gpt, Vec<(String, Var)>) {
    let varmap = VarMap::new();
    let model = gpt(
        cfg,
        VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
    )
    .unwrap();
    let mut params: Vec<(String, Var)> = varmap
        .data()
        .lock()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    params.sort_by(|a, b| a.0.cmp(&b.0));
    gpt_init(&params, cfg, seed).unwrap();
    (model, params)
}

/// The tiny GPT with weights spread wider than the init (so logits vary between positions).
fn spread_tiny() -> Gpt {
    let (model, params) = build(&tiny(), 3);
    for (name, var) in &params {
        let noise = Var::zeros(var.shape(), DType::F32, &Device::Cpu).unwrap();
        crate::models::init::normal(name, &noise, 0.3, 99).unwrap();
        var.set(&(var.as_tensor() + noise.as_tensor()).unwrap())
            .unwrap();
    }
    model
}

fn ids(rows: &[&[u32]]) -> Tensor {
    Tensor::new(
        rows.iter().map(|r| r.to_vec()).collect::<Vec<_>>(),
        &Device::Cpu,
    )
    .unwrap()
}

fn std_and_mean(t: &Tensor) -> (f64, f64) {
    let v: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
    let n = v.len() as f64;
    let mean = v.iter().map(|x| *x as f64).sum::<f64>() / n;
    let var = v.iter().map(|x| (*x as f64 - mean).powi(2)).sum::<f64>() / n;
    (var.sqrt(), mean)
}

#[test]
fn names_and_shapes_are_the_references() {
    let (_, params) = build(&tiny(), 0);
    let got: Vec<(String, Vec<usize>)> = params
        .iter()
        .map(|(k, v)| (k.clone(), v.dims().to_vec()))
        .collect();
    let mut want: Vec<(String, Vec<usize>)> = vec![
        ("transformer.wte.weight".into(), vec![11, 16]),
        ("transformer.wpe.weight".into(), vec![8, 16]),
        ("transformer.ln_f.weight".into(), vec![16]),
        ("transformer.ln_f.bias".into(), vec![16]),
    ];
    for i in 0..2 {
        for (name, dims) in [
            ("ln_1.weight", vec![16]),
            ("ln_1.bias", vec![16]),
            ("attn.c_attn.weight", vec![48, 16]),
            ("attn.c_attn.bias", vec![48]),
            ("attn.c_proj.weight", vec![16, 16]),
            ("attn.c_proj.bias", vec![16]),
            ("ln_2.weight", vec![16]),
            ("ln_2.bias", vec![16]),
            ("mlp.c_fc.weight", vec![64, 16]),
            ("mlp.c_fc.bias", vec![64]),
            ("mlp.c_proj.weight", vec![16, 64]),
            ("mlp.c_proj.bias", vec![16]),
        ] {
            want.push((format!("transformer.h.{i}.{name}"), dims));
        }
    }
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn parameter_count_is_pytorchs() {
    // `sum(p.numel() for p in Gpt(65, 64, 4, 4, 128).parameters())` in torch_gpt.py.
    let cfg = GptConfig::baby(65);
    assert_eq!(cfg.num_params(), 809_856);
    let (_, params) = build(&cfg, 0);
    let counted: usize = params.iter().map(|(_, v)| v.elem_count()).sum();
    assert_eq!(counted, 809_856);
    assert_eq!(tiny().num_params(), {
        let (_, p) = build(&tiny(), 0);
        p.iter().map(|(_, v)| v.elem_count()).sum::<usize>()
    });
}

#[test]
fn init_statistics_follow_the_reference() {
    let cfg = GptConfig::baby(65);
    let (_, params) = build(&cfg, 5);
    let proj = 0.02 / 8f64.sqrt();
    for (name, var) in &params {
        let (std, mean) = std_and_mean(var.as_tensor());
        if var.rank() >= 2 {
            let want = if name.ends_with("c_proj.weight") {
                proj
            } else {
                0.02
            };
            // The smallest matrix (wpe) has 8192 values: the std's relative error is ~0.8 %.
            assert!(
                (std / want - 1.0).abs() < 0.04,
                "{name}: std {std}, want {want}"
            );
            assert!(
                mean.abs() < 4.0 * want / (var.elem_count() as f64).sqrt(),
                "{name}: mean {mean}"
            );
        } else {
            let want = if name.contains(".ln_") && name.ends_with(".weight") {
                1.0
            } else {
                0.0
            };
            let v: Vec<f32> = var.to_vec1().unwrap();
            assert!(v.iter().all(|x| *x == want), "{name}: {v:?}");
        }
    }
    // Seeded: the same weights again; another seed gives others.
    let (_, again) = build(&cfg, 5);
    let (_, other) = build(&cfg, 6);
    let wte = |p: &[(String, Var)]| p.iter().find(|(k, _)| k == WTE).unwrap().1.clone();
    assert_eq!(tensor_diff(&wte(&params), &wte(&again)), 0.0);
    assert!(tensor_diff(&wte(&params), &wte(&other)) > 0.0);
}

#[test]
fn logits_have_the_shape_of_the_vocabulary() {
    let model = spread_tiny();
    let logits = model
        .forward(&ids(&[&[1, 2, 3], &[4, 5, 6]]), false)
        .unwrap();
    assert_eq!(logits.dims(), &[2, 3, 11]);
    let loss = lm_loss(&logits, &ids(&[&[2, 3, 4], &[5, 6, 7]])).unwrap();
    assert_eq!(loss.dims(), &[] as &[usize]);
}

#[test]
fn a_context_longer_than_block_is_a_clear_error() {
    let model = spread_tiny();
    let e = model
        .forward(&ids(&[&[1; 9]]), false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("gpt: 9 positions do not fit the model's context of block = 8; give between 1 and 8 tokens"),
        "{e}"
    );
    let e = model
        .forward(
            &Tensor::zeros((1, 3), DType::F32, &Device::Cpu).unwrap(),
            false,
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("token ids of shape [batch, time] and type u32"),
        "{e}"
    );
    let mut cache = model.new_cache();
    model.forward_cached(&ids(&[&[1; 6]]), &mut cache).unwrap();
    let e = model
        .forward_cached(&ids(&[&[1; 3]]), &mut cache)
        .unwrap_err()
        .to_string();
    assert!(e.contains("gpt: 9 positions do not fit"), "{e}");
}

#[test]
fn bad_shapes_are_refused_when_building() {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let cfg = GptConfig { heads: 3, ..tiny() };
    let e = gpt(&cfg, vb.clone()).err().unwrap().to_string();
    assert_eq!(
        e,
        "model: gpt: `heads` = 3 does not divide `embd` = 16; pick heads that divide embd (e.g. 2)"
    );
    let cfg = GptConfig { block: 0, ..tiny() };
    assert_eq!(
        gpt(&cfg, vb).err().unwrap().to_string(),
        "model: gpt: `block` must be at least 1"
    );
}

#[test]
fn attention_is_causal() {
    let model = spread_tiny();
    let a = model
        .forward(&ids(&[&[1, 2, 3, 4, 5, 6, 7, 8]]), false)
        .unwrap();
    let b = model
        .forward(&ids(&[&[1, 2, 3, 4, 5, 9, 10, 0]]), false)
        .unwrap();
    // Positions 0..5 see the same tokens: identical logits; position 5 onwards differ.
    assert_eq!(
        tensor_diff(&a.narrow(1, 0, 5).unwrap(), &b.narrow(1, 0, 5).unwrap()),
        0.0
    );
    assert!(tensor_diff(&a.narrow(1, 5, 1).unwrap(), &b.narrow(1, 5, 1).unwrap()) > 1e-3);
}

#[test]
fn cached_forward_equals_the_full_forward() {
    let model = spread_tiny();
    let seq = ids(&[&[3, 1, 4, 1, 5, 9, 2, 6], &[2, 7, 1, 8, 2, 8, 1, 8]]);
    let full = model.forward(&seq, false).unwrap();
    // One position at a time, then in uneven chunks.
    for chunks in [vec![1; 8], vec![3, 1, 4], vec![8]] {
        let mut cache = model.new_cache();
        let mut start = 0;
        for n in chunks {
            let got = model
                .forward_cached(&seq.narrow(1, start, n).unwrap(), &mut cache)
                .unwrap();
            start += n;
            assert_eq!(cache.len(), start);
            let want = full.narrow(1, start - n, n).unwrap();
            let d = tensor_diff(&got, &want);
            assert!(d < 1e-5, "positions {}..{start}: {d}", start - n);
        }
    }
    let mut cache = model.new_cache();
    model
        .forward_cached(&seq.narrow(1, 0, 4).unwrap(), &mut cache)
        .unwrap();
    let e = model
        .forward_cached(&ids(&[&[1]]), &mut cache)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the cache holds 2 sequences but 1 were given"),
        "{e}"
    );
}

#[test]
fn causal_mask_of_new_positions_after_cached_ones() {
    let m: Vec<Vec<f32>> = causal_mask(2, 4, &Device::Cpu).unwrap().to_vec2().unwrap();
    let inf = f32::NEG_INFINITY;
    assert_eq!(m, vec![vec![0.0, 0.0, 0.0, inf], vec![0.0, 0.0, 0.0, 0.0]]);
}

#[test]
fn checkpoints_hold_both_tied_names_and_load_back() {
    let (_, params) = build(&tiny(), 1);
    let state: Vec<(String, Tensor)> = params
        .iter()
        .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
        .collect();
    let tied = tied_state(state.clone());
    assert_eq!(tied.len(), state.len() + 1);
    let names: Vec<&str> = tied.iter().map(|(k, _)| k.as_str()).collect();
    assert!(names.is_sorted());
    let head = tied.iter().find(|(k, _)| k == LM_HEAD).unwrap().1.clone();
    let wte = &tied.iter().find(|(k, _)| k == WTE).unwrap().1.clone();
    assert_eq!(tensor_diff(&head, wte), 0.0);

    let map: HashMap<String, Tensor> = tied.into_iter().collect();
    let back = untie_state(map.clone(), "ckpt").unwrap();
    assert_eq!(back.len(), state.len());
    assert!(!back.contains_key(LM_HEAD));
    // Only `lm_head.weight` (a writer that kept one name of the shared tensor): renamed.
    let mut only_head = map.clone();
    only_head.remove(WTE);
    let back = untie_state(only_head, "ckpt").unwrap();
    assert_eq!(tensor_diff(&back[WTE], wte), 0.0);
    // Different matrices under the two names: refused.
    let mut differ = map;
    differ.insert(LM_HEAD.into(), (wte + 1.0).unwrap());
    let e = untie_state(differ, "ckpt").unwrap_err().to_string();
    assert_eq!(
        e,
        "model: ckpt: `lm_head.weight` differs from `transformer.wte.weight`; the gpt model ties \
         them (one matrix), so a checkpoint must hold the same values under both names"
    );
}

#[test]
fn dropout_applies_only_in_training() {
    let cfg = GptConfig {
        dropout: 0.5,
        ..tiny()
    };
    let (model, _) = build(&cfg, 2);
    let x = ids(&[&[1, 2, 3, 4]]);
    let eval = model.forward(&x, false).unwrap();
    assert_eq!(tensor_diff(&eval, &model.forward(&x, false).unwrap()), 0.0);
    assert!(tensor_diff(&eval, &model.forward(&x, true).unwrap()) > 0.0);
}

#[test]
fn a_gpt_network_saves_both_tied_names_and_loads_them_back() {
    let cfg = tiny();
    let net = crate::models::Network::gpt(&cfg, &Device::Cpu, 3).unwrap();
    let state: HashMap<String, Tensor> = net.state().into_iter().collect();
    assert!(state.contains_key(WTE) && state.contains_key(LM_HEAD));
    assert_eq!(tensor_diff(&state[WTE], &state[LM_HEAD]), 0.0);
    // Another network (other seed) takes the state whole, tied names and all.
    let other = crate::models::Network::gpt(&cfg, &Device::Cpu, 4).unwrap();
    other.load_state(&state, "model.safetensors").unwrap();
    let x = ids(&[&[1, 2, 3, 4]]);
    let (a, b) = (
        net.forward(&x, false).unwrap(),
        other.forward(&x, false).unwrap(),
    );
    assert_eq!(tensor_diff(&a, &b), 0.0);
    // A tensor the model does not have is still refused.
    let mut extra = state;
    extra.insert("transformer.h.9.ln_1.weight".into(), a);
    let e = other.load_state(&extra, "model.safetensors").unwrap_err();
    assert!(
        e.to_string()
            .contains("unexpected tensor `transformer.h.9.ln_1.weight`"),
        "{e}"
    );
}
