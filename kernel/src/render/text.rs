//! Text helpers of the run card: the plain progress bar, supervisor events in words, log lines
//! cleaned of terminal control sequences, shortening.

use ddp_workspaces::runs::run::SupervisorEvent;

/// Cells of the plain-text progress bar.
const BAR_CELLS: usize = 10;
/// Longest log line kept, characters (the rest is cut).
pub const MAX_LINE: usize = 1000;

/// `[#####.....] 50%`, or `-` when the progress is unknown.
pub fn text_bar(progress: Option<f64>) -> String {
    let Some(p) = progress.filter(|p| p.is_finite()) else {
        return "-".into();
    };
    let p = p.clamp(0.0, 1.0);
    let full = ((p * BAR_CELLS as f64).round() as usize).min(BAR_CELLS);
    format!(
        "[{}{}] {:.0}%",
        "#".repeat(full),
        ".".repeat(BAR_CELLS - full),
        p * 100.0
    )
}

/// One supervisor event in words; a start leaves out the devices (the card shows them on a
/// line of their own, [`short_devices`]).
pub fn describe(e: &SupervisorEvent) -> String {
    match e {
        SupervisorEvent::Queued { waiting_for } => format!("queued: waiting for {waiting_for}"),
        SupervisorEvent::Started {
            attempt, resume, ..
        } => {
            let resumed = if *resume { ", resumed" } else { "" };
            format!("started attempt {attempt}{resumed}")
        }
        SupervisorEvent::ReplicaExited { rank, code, signal } => match (code, signal) {
            (_, Some(s)) => format!("rank {rank} killed by signal {s}"),
            (Some(c), None) => format!("rank {rank} exited with code {c}"),
            (None, None) => format!("rank {rank} exited"),
        },
        SupervisorEvent::Restarting {
            attempt,
            after_s,
            reason,
        } => format!("restarting (attempt {attempt}) in {after_s:.0}s: {reason}"),
        SupervisorEvent::Stopped => "stopped".into(),
        SupervisorEvent::Completed => "completed".into(),
        e @ SupervisorEvent::Paused { .. } => e.pause_text().unwrap_or_default(),
        SupervisorEvent::Failed { reason } => format!("failed: {reason}"),
        e @ SupervisorEvent::Membership { .. } => e.membership_text().unwrap_or_default(),
    }
}

/// The devices of a run's record (`RunRecord::devices`, as the supervisor logs them) in a few
/// words: `CPU, 4 thread(s) per replica (ddp.devices = "auto": no NVIDIA driver
/// (libnvidia-ml.so.1 not found): running on CPU)` becomes `2 × CPU (no NVIDIA driver)` for 2
/// replicas; GPUs stay as they are (`GPUs 0 (NVIDIA H100), 1 (NVIDIA H100)`).
pub fn short_devices(devices: &str, replicas: usize) -> String {
    let Some(rest) = devices.strip_prefix("CPU") else {
        return devices.to_string();
    };
    // The note of `ddp.devices = "auto"` falling back: the reason before ": running on CPU",
    // without its own parenthesised detail.
    let reason = rest
        .split_once("\": ")
        .map(|(_, why)| why.trim_end_matches(')'))
        .map(|why| why.strip_suffix(": running on CPU").unwrap_or(why))
        .map(|why| match why.find(" (") {
            Some(i) => &why[..i],
            None => why,
        });
    match reason {
        Some(why) => format!("{replicas} × CPU ({why})"),
        None => format!("{replicas} × CPU"),
    }
}

/// A log line as a terminal would leave it: the text after its last carriage return (progress
/// bars redraw a line that way), without ANSI escape sequences or other control characters, cut
/// at [`MAX_LINE`] characters.
pub fn clean_line(line: &str) -> String {
    let line = line.rsplit('\r').find(|s| !s.is_empty()).unwrap_or("");
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: ESC [ parameters final-byte (0x40..=0x7e); other escapes: ESC + one char.
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else if !c.is_control() || c == '\t' {
            out.push(c);
        }
    }
    shorten(&out, MAX_LINE)
}

/// `s` cut to `max` characters, with `…` when cut.
pub fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}
