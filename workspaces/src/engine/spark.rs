//! A Spark application: the run's supervisor submits its driver with `spark-submit` and follows
//! it (`crate::spark`); the run is recorded with its application from creation.

use std::path::Path;

use ddp_trainer::spec::Spec;

use super::local::{signal_supervisor, start_supervised};
use super::{Engine, Started, StopRequest};
use crate::run::Run;
use crate::{Error, Result};

pub(super) struct Spark;

impl Engine for Spark {
    /// Spark's client (PySpark, Java) is there, and the master can run the stage.
    fn check(&self, spec: &Spec, spec_path: &Path) -> Result<()> {
        crate::spark::Installation::find()?;
        let master = crate::spark::master_of(spec);
        crate::spark::check_master(&master, spec.spark.task_count(spec.ddp.replicas))
            .map_err(|e| Error::Invalid(format!("{}: {e}", spec_path.display())))
    }

    fn created(&self, run: &mut Run, spec: &Spec) -> Result<()> {
        run.update(|r| {
            r.spark = Some(crate::spark::SparkApp {
                master: crate::spark::master_of(spec),
                tasks: spec.spark.task_count(spec.ddp.replicas),
                ..Default::default()
            })
        })
    }

    fn start(&self, run: Run, spec: &Spec, resume: bool) -> Result<Started> {
        start_supervised(run, spec, resume)
    }

    fn stop(&self, run: Run) -> Result<StopRequest> {
        signal_supervisor(run)
    }
}
