//! Scaling an elastic run under way (`ddp scale RUN --replicas N`).

use ddp_trainer::launcher::SCALE_FILE;
use ddp_trainer::spec::Spec;

use crate::files::fsutil::write_atomic;
use crate::runs::run::Run;
use crate::{Error, Result};

/// Asks a running elastic run for `replicas` replicas: its launcher reads the wanted number
/// from the run folder ([`SCALE_FILE`]) and asks the replicas beyond it to leave at the next
/// step boundary, or starts the missing ones to join (they take the weights, optimizer state
/// and position from a member). Checked first, nothing written otherwise: the run is live and
/// local, its spec elastic, and `replicas` between `ddp.elastic.min_replicas` and
/// `ddp.replicas`. Returns what to tell the user.
pub fn scale_run(run: &Run, replicas: usize) -> Result<String> {
    let run = Run::load_checked(&run.dir)?;
    let id = &run.record.id;
    if run.record.status.is_terminal() {
        return Err(Error::Refused(format!(
            "run {id} is {}: only a run under way scales (ddp resume continues it)",
            run.record.status
        )));
    }
    crate::engine::of_run(&run.record).check_scale(&run)?;
    let spec_path = run.spec_path();
    let spec = Spec::load(&spec_path, &[])?;
    let Some(elastic) = spec.ddp.elastic else {
        return Err(Error::Invalid(format!(
            "run {id} is not elastic: its replicas are fixed ({}: set [ddp] elastic = \
             {{ min_replicas = N }} for runs that scale)",
            spec_path.display()
        )));
    };
    let (min, max) = (elastic.min_replicas, spec.ddp.replicas);
    if !(min..=max).contains(&replicas) {
        return Err(Error::Invalid(format!(
            "--replicas {replicas}: run {id} scales between ddp.elastic.min_replicas = {min} \
             and ddp.replicas = {max}"
        )));
    }
    write_atomic(
        &run.dir.join(SCALE_FILE),
        format!("{replicas}\n").as_bytes(),
    )?;
    Ok(format!(
        "run {id}: scaling to {replicas} replicas (between {min} and {max}); replicas leave or \
         join at the next step boundary (see its membership events: ddp show {id})"
    ))
}
