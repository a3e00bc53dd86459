//! DDP correctness by equivalence: 2 replicas × batch B end with the same weights as 1 replica ×
//! batch 2B (gradients averaged over the global batch), for SGD and Adam, for the plain CNN and for
//! the BatchNorm ConvNet with SyncBatchNorm.

mod common;
use common::*;
use ddp_trainer::test_util::tensor_diff;

/// Tensors that only carry float noise under Adam: a conv bias directly followed by BatchNorm has
/// an exactly zero true gradient (normalisation removes any per-channel shift), so its computed
/// gradient is noise (~1e-9) whose sign differs between any two summation orders, and Adam turns
/// noise into ±lr steps (in PyTorch as here). The BatchNorm running mean right after it carries
/// the same shift. Everything downstream is unaffected (BatchNorm cancels the shift), so these are
/// checked against Adam's step bound instead, and everything else within 1e-5.
fn adam_noise_only(model: &str, optimizer: &str, name: &str) -> bool {
    model == "convnet-bn"
        && optimizer == "adam"
        && [
            "layer1.0.bias",
            "layer2.0.bias",
            "layer1.1.running_mean",
            "layer2.1.running_mean",
        ]
        .contains(&name)
}

/// Every train record of both ranks has a step-time breakdown whose parts add up to the step
/// (within 5 %), with the bytes a rank sends (none in shared buffers) and, overlapped, the
/// communication thread's time.
fn breakdowns_add_up(out: &std::path::Path, overlapped: bool, shared: bool) {
    for rank in 0..2 {
        let train: Vec<_> = metrics(out, rank)
            .into_iter()
            .filter(|r| r.kind == ddp_trainer::metrics::MetricKind::Train)
            .collect();
        assert!(!train.is_empty());
        for r in train {
            let b = r
                .breakdown
                .unwrap_or_else(|| panic!("no breakdown in {r:?}"));
            let gap = (b.parts_s() - b.step_s).abs();
            assert!(
                gap <= 0.05 * b.step_s,
                "rank {rank}: parts {} of step {} s: {b:?}",
                b.parts_s(),
                b.step_s
            );
            assert!(b.compute_s > 0.0 && b.optimizer_s > 0.0, "{b:?}");
            assert_eq!(b.bytes_sent.is_none(), shared, "{b:?}");
            assert!(b.bytes_sent.is_none_or(|x| x > 0.0), "{b:?}");
            assert!(b.comm_s > 0.0, "{b:?}");
            if !overlapped {
                assert_eq!(b.comm_s, b.comm_exposed_s, "{b:?}");
            }
        }
    }
}

fn equivalent(model: &str, optimizer: &str, extra: &str) {
    equivalent_env(model, optimizer, extra, &[]);
}

/// [`equivalent`] with environment variables for the 2-replica run.
fn equivalent_env(model: &str, optimizer: &str, extra: &str, env: &[(&str, &str)]) {
    equivalent_with(model, optimizer, "", extra, env);
}

/// [`equivalent_env`] with `train` keys added to the recipe's `[train]`.
fn equivalent_with(model: &str, optimizer: &str, train: &str, extra: &str, env: &[(&str, &str)]) {
    let dir = tempfile::tempdir().unwrap();
    // The recipes' learning rates: SGD 0.01 with momentum 0.9, Adam(W) 0.001.
    let lr = if optimizer.starts_with("adam") {
        0.001
    } else {
        0.01
    };
    let body = format!(
        "val_fraction = 0.0\nlimit_train = 512\nlimit_test = 64\n[train]\nepochs = 1\nmax_steps = 6\noptimizer = \"{optimizer}\"\nlr = {lr}\nmomentum = 0.9\nseed = 7\n{train}\n[checkpoint]\nevery_epochs = 0\n{extra}"
    );
    let spec = write_spec(dir.path(), model, &body);
    let (two, one) = (dir.path().join("two"), dir.path().join("one"));
    let out = train_standalone_env(&spec, 2, &two, &["train.batch_size=8"], env);
    let transport = if extra.contains("shared_memory = false") {
        "all-reduce through tcp ring (shared memory turned off)"
    } else if env.contains(&("DDP_SHM_DIRECT", "0")) {
        "all-reduce through shared memory (all ranks on this host; staged, DDP_SHM_DIRECT=0)"
    } else {
        "all-reduce through shared memory (all ranks on this host; "
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(transport), "{stdout}");
    let step = if extra.contains("shared_memory = false") {
        "gradients and parameters copied between the ranks: no shared memory between the ranks"
    } else if env.contains(&("DDP_SHM_STEP", "0")) {
        "gradients and parameters copied between the ranks: rank 0 has DDP_SHM_STEP=0"
    } else {
        "gradients and parameters shared in place between the ranks"
    };
    assert!(stdout.contains(step), "{stdout}");
    // Private step buffers (the ring, or DDP_SHM_STEP=0) are all-reduced bucket by bucket while
    // backward runs, unless turned off; shared ones are reduced in place after it.
    let shared = !extra.contains("shared_memory = false") && !env.contains(&("DDP_SHM_STEP", "0"));
    let overlapped = !shared && !extra.contains("overlap = false");
    assert_eq!(
        stdout.contains("while backward runs"),
        overlapped,
        "{stdout}"
    );
    breakdowns_add_up(&two, overlapped, shared);
    train_standalone(&spec, 1, &one, &["train.batch_size=16"]);
    let mut a = load_model(&two.join("model.safetensors"));
    let mut b = load_model(&one.join("model.safetensors"));
    let initial_gap = {
        // The weights must actually have moved, or equality would prove nothing.
        let dir0 = dir.path().join("zero");
        train_standalone(&spec, 1, &dir0, &["train.batch_size=16", "train.lr=1e-12"]);
        max_abs_diff(&b, &load_model(&dir0.join("model.safetensors")))
    };
    let noise: Vec<String> = a
        .keys()
        .filter(|k| adam_noise_only(model, optimizer, k))
        .cloned()
        .collect();
    for k in noise {
        // Adam moves a parameter by at most lr per step: 6 steps × 0.001 in each run.
        let (x, y) = (a.remove(&k).unwrap(), b.remove(&k).unwrap());
        let gap = tensor_diff(&x, &y);
        assert!(gap <= 2.0 * 6.0 * 0.001 + 1e-6, "{k}: {gap}");
    }
    assert!(
        initial_gap > 1e-3,
        "training did not move the weights ({initial_gap})"
    );
    let (diff, at) = worst_tensor(&a, &b);
    assert!(
        diff < 1e-5,
        "{model}/{optimizer}: 2×8 and 1×16 differ by {diff} (in {at})"
    );
}

#[test]
fn mnist_cnn_sgd() {
    equivalent("mnist-cnn", "sgd", "");
}

/// The same through the TCP ring instead of shared memory (the transport between hosts).
#[test]
fn mnist_cnn_sgd_over_the_tcp_ring() {
    equivalent("mnist-cnn", "sgd", "[ddp]\nshared_memory = false\n");
}

/// The ring without the overlap: the sharded step, reduce-scatter and all-gather after backward.
#[test]
fn mnist_cnn_sgd_over_the_tcp_ring_not_overlapped() {
    equivalent(
        "mnist-cnn",
        "sgd",
        "[ddp]\nshared_memory = false\noverlap = false\n",
    );
}

/// SyncBatchNorm's reductions during the overlapped backward go through the communication
/// thread, in the program's order on both ranks.
#[test]
fn convnet_bn_sync_batchnorm_adam_over_the_tcp_ring() {
    equivalent(
        "convnet-bn",
        "adam",
        "[ddp]\nsync_batchnorm = true\nshared_memory = false\n",
    );
}

/// Private step buffers, reduced through the segment's slots.
#[test]
fn mnist_cnn_sgd_staged_through_shared_memory() {
    equivalent_env(
        "mnist-cnn",
        "sgd",
        "",
        &[("DDP_SHM_DIRECT", "0"), ("DDP_SHM_STEP", "0")],
    );
}

/// Private step buffers, reduced by reading the other process's buffer.
#[test]
fn mnist_cnn_adam_with_direct_copies_between_processes() {
    equivalent_env("mnist-cnn", "adam", "", &[("DDP_SHM_STEP", "0")]);
}

#[test]
fn mnist_cnn_adam() {
    equivalent("mnist-cnn", "adam", "");
}

/// Clipping to the global norm after the all-reduce (a clip small enough to act at every step)
/// and AdamW decaying matrices only: every rank clips by the same factor, so 2 × B still equals
/// 1 × 2B.
#[test]
fn mnist_cnn_adamw_with_gradient_clipping() {
    equivalent_with(
        "mnist-cnn",
        "adamw",
        "weight_decay = 0.1\ngrad_clip = 0.05",
        "",
        &[],
    );
}

#[test]
fn convnet_bn_sync_batchnorm_sgd() {
    equivalent("convnet-bn", "sgd", "[ddp]\nsync_batchnorm = true\n");
}

#[test]
fn convnet_bn_sync_batchnorm_adam() {
    equivalent("convnet-bn", "adam", "[ddp]\nsync_batchnorm = true\n");
}

/// Gradient accumulation: 2 replicas × 2 micro-batches of 4 == 1 replica × 16.
#[test]
fn grad_accum_matches_the_combined_batch() {
    let dir = tempfile::tempdir().unwrap();
    let body = "val_fraction = 0.0\nlimit_train = 256\nlimit_test = 32\n[train]\nepochs = 1\nmax_steps = 4\noptimizer = \"sgd\"\nlr = 0.05\nseed = 3\n[checkpoint]\nevery_epochs = 0\n";
    let spec = write_spec(dir.path(), "mlp", body);
    let (two, one) = (dir.path().join("two"), dir.path().join("one"));
    train_standalone(
        &spec,
        2,
        &two,
        &["train.batch_size=4", "train.grad_accum=2"],
    );
    train_standalone(&spec, 1, &one, &["train.batch_size=16"]);
    let diff = max_abs_diff(
        &load_model(&two.join("model.safetensors")),
        &load_model(&one.join("model.safetensors")),
    );
    assert!(diff < 1e-5, "grad_accum: differ by {diff}");
}

/// Batch parts (see `batch_parts`): one replica with 2 threads trains each batch of 16 as two
/// parts of 8 side by side; it must end where the same replica with 1 thread (the whole batch at
/// once) ends, for SGD and Adam.
#[test]
fn batch_parts_match_the_whole_batch() {
    for optimizer in ["sgd", "adam"] {
        let dir = tempfile::tempdir().unwrap();
        let body = format!(
            "val_fraction = 0.0\nlimit_train = 512\nlimit_test = 64\n[train]\nepochs = 1\nmax_steps = 6\nbatch_size = 16\noptimizer = \"{optimizer}\"\nlr = 0.01\nmomentum = 0.9\nseed = 7\n[checkpoint]\nevery_epochs = 0\n"
        );
        let spec = write_spec(dir.path(), "mnist-cnn", &body);
        let (parts, whole) = (dir.path().join("parts"), dir.path().join("whole"));
        let out = train_standalone(&spec, 1, &parts, &["ddp.threads=2"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("each batch trained in 2 parts side by side"),
            "{stdout}"
        );
        let out = train_standalone(&spec, 1, &whole, &["ddp.threads=1"]);
        assert!(!String::from_utf8_lossy(&out.stdout).contains("parts side by side"));
        let (diff, at) = worst_tensor(
            &load_model(&parts.join("model.safetensors")),
            &load_model(&whole.join("model.safetensors")),
        );
        assert!(
            diff < 1e-5,
            "{optimizer}: 2 parts of 8 and the whole 16 differ by {diff} (in {at})"
        );
    }
}

/// bf16 on the wire over the ring: 2 × 8 ends within the 16-bit rounding of its gradients of
/// 1 × 16 (SGD, 6 steps), every rank with the same weights, and sends half the bytes of f32.
#[test]
fn mnist_cnn_sgd_over_the_tcp_ring_in_bf16() {
    let dir = tempfile::tempdir().unwrap();
    let body = "val_fraction = 0.0\nlimit_train = 512\nlimit_test = 64\n[train]\nepochs = 1\nmax_steps = 6\noptimizer = \"sgd\"\nlr = 0.01\nmomentum = 0.9\nseed = 7\n[checkpoint]\nevery_epochs = 0\n[ddp]\nshared_memory = false\ncompression = \"bf16\"\n";
    let spec = write_spec(dir.path(), "mnist-cnn", body);
    let (two, one) = (dir.path().join("two"), dir.path().join("one"));
    let out = train_standalone(&spec, 2, &two, &["train.batch_size=8"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("gradients sent as bf16 (16 bits a value), added in f32"),
        "{stdout}"
    );
    breakdowns_add_up(&two, true, false);
    let f32_bytes = {
        let f32_run = dir.path().join("f32");
        train_standalone(
            &spec,
            2,
            &f32_run,
            &["train.batch_size=8", "ddp.compression=\"none\""],
        );
        metrics(&f32_run, 0)[0]
            .breakdown
            .unwrap()
            .bytes_sent
            .unwrap()
    };
    let bf16_bytes = metrics(&two, 0)[0].breakdown.unwrap().bytes_sent.unwrap();
    assert_eq!(bf16_bytes * 2.0, f32_bytes);
    train_standalone(&spec, 1, &one, &["train.batch_size=16"]);
    let (diff, at) = worst_tensor(
        &load_model(&two.join("model.safetensors")),
        &load_model(&one.join("model.safetensors")),
    );
    assert!(
        diff > 0.0 && diff < 1e-4,
        "bf16 2×8 and 1×16 differ by {diff} (in {at})"
    );
}

/// Mixed precision keeps DDP's equivalence: the products' inputs are rounded value by value,
/// whatever the batch's split, so 2 × B and 1 × 2B stay as close as in f32 (6e-8 apart here, f32
/// 3e-7); only a sum whose order moves a value across a bf16 rounding boundary could part them.
#[test]
fn mnist_cnn_adam_in_bf16() {
    equivalent_with("mnist-cnn", "adam", "precision = \"bf16\"", "", &[]);
}
