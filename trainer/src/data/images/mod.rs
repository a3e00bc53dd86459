//! torchvision's `ImageFolder`: `path/train/<class>/*` (and `path/test/<class>/*`).

use super::parts::{OpenContext, Parts};
use crate::spec::Spec;
use crate::{Error, Result};

/// Opens the image folder of `spec`.
pub fn open(spec: &Spec, _ctx: &OpenContext) -> Result<Parts> {
    Err(Error::Model(format!(
        "{}: image folders are not read yet",
        spec.source.display()
    )))
}
