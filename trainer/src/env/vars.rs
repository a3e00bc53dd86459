//! Reading launcher variables: the lookup ([`Vars`]: trimmed, empty = unset, integers and ports
//! parsed with messages naming the variable), the error every check returns ([`env_err`]), and
//! the rendezvous defaults.

use std::str::FromStr;

use crate::error::{Error, Result};

/// Rendezvous host when a single node runs the whole world and nothing else was set.
pub const DEFAULT_MASTER_ADDR: &str = "127.0.0.1";
/// Rendezvous port when `MASTER_PORT` is not set (torchrun's default).
pub const DEFAULT_MASTER_PORT: u16 = 29500;

/// [`Error::Env`] for `var`.
pub(super) fn env_err(var: &str, msg: impl Into<String>) -> Error {
    Error::Env {
        var: var.to_string(),
        msg: msg.into(),
    }
}

/// The variable lookup, trimmed, with empty values treated as unset.
pub(super) struct Vars<F>(pub(super) F);

impl<F: Fn(&str) -> Option<String>> Vars<F> {
    pub(super) fn get(&self, var: &str) -> Option<String> {
        let value = (self.0)(var)?;
        let value = value.trim();
        (!value.is_empty()).then(|| value.to_string())
    }

    pub(super) fn has(&self, var: &str) -> bool {
        self.get(var).is_some()
    }

    /// The variable as a non-negative integer, `None` when unset.
    pub(super) fn int<T: FromStr>(&self, var: &str) -> Result<Option<T>> {
        let Some(value) = self.get(var) else {
            return Ok(None);
        };
        match value.parse::<T>() {
            Ok(n) => Ok(Some(n)),
            Err(_) => Err(env_err(
                var,
                format!("{value:?} is not a non-negative integer; set {var} to a number like 0"),
            )),
        }
    }

    /// Like [`Vars::int`], but an unset variable is an error with `hint`.
    pub(super) fn required<T: FromStr>(&self, var: &str, hint: &str) -> Result<T> {
        self.int(var)?
            .ok_or_else(|| env_err(var, format!("is not set; {hint}")))
    }

    /// The variable as a TCP port in `1..=65535`, `None` when unset.
    pub(super) fn port(&self, var: &str) -> Result<Option<u16>> {
        let Some(value) = self.get(var) else {
            return Ok(None);
        };
        match value.parse::<u64>() {
            Ok(port @ 1..=65535) => Ok(Some(port as u16)),
            Ok(_) => Err(env_err(
                var,
                format!("{value} is out of range; set it to a TCP port in 1..=65535"),
            )),
            Err(_) => Err(env_err(
                var,
                format!("{value:?} is not a port number; set it to a TCP port in 1..=65535"),
            )),
        }
    }
}
