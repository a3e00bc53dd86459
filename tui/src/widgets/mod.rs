//! The dashboard's own widgets, each a folder of its state and its rendering.

pub mod chart;
pub mod logview;
