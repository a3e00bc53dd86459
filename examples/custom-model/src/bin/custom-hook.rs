//! A communication hook of your own (as PyTorch's `register_comm_hook`): this executable is a
//! `ddp-trainer` whose overlapped DDP step (`ddp.overlap = true`) averages each gradient bucket
//! with [`Bf16Average`] instead of a built-in `ddp.compression`.
//!
//! ```sh
//! cargo build --release -p ddp-custom-model --bin custom-hook
//! cargo run --release --bin ddp -- run examples/custom-model/custom-hook.toml --trainer target/release/custom-hook
//! ```

use ddp_trainer::dist::codec::Codec;
use ddp_trainer::dist::{Collective, ReduceOp};
use ddp_trainer::step::hook::CommHook;

/// The bucket's average with 16-bit floats on the wire (bf16, added in f32): the built-in
/// `ddp.compression = "bf16"`, written as a hook. A hook of one's own does what it likes in
/// `reduce`, as long as every rank issues the same collectives in the same order and ends with
/// the same values.
struct Bf16Average;

impl CommHook for Bf16Average {
    fn reduce(&mut self, grads: &mut [f32], comm: &mut dyn Collective) -> ddp_trainer::Result<u64> {
        comm.all_reduce_coded(grads, ReduceOp::Avg, Codec::Bf16)?;
        // A ring all-reduce sends 2(W-1)/W of the bucket, 2 bytes a value.
        let w = comm.world_size() as u64;
        Ok(grads.len() as u64 * 2 * 2 * (w - 1) / w)
    }
}

fn main() {
    ddp_trainer::Trainer::new()
        .comm_hook(|_| Bf16Average)
        .main()
}
