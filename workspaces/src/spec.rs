//! The experiment spec (`spec.toml`: model, data, training, ddp, checkpoint, restart sections),
//! re-exported from the trainer so front ends depend on this crate alone. A run freezes its
//! resolved spec in its folder ([`crate::Run::spec_path`]); [`crate::actions::check_new_run`]
//! validates one for a new run.

pub use ddp_trainer::spec::{KEYS, Spec};
