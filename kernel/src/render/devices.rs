//! `%ddp devices`: the machine's GPUs (utilisation, memory, temperature, power, the run holding
//! each), CPU cores and memory, and the processes of the workspace's live runs, from one
//! [`Telemetry`] sample.

use ddp_workspaces::engine::devices::telemetry::{GpuSample, Telemetry};
use ddp_workspaces::present::report::Table;

use super::table::{bar, html_table, note};
use super::{Output, html_escape};

/// The devices as text (tables and lines) and HTML (tables, bars for utilisation).
pub fn devices(t: &Telemetry) -> Output {
    let mut plain = String::new();
    let mut html = String::from("<div class=\"ddp-devices\">\n");

    let gpu_title = if t.gpus.is_empty() {
        "GPUs: none"
    } else {
        "GPUs"
    };
    plain.push_str(gpu_title);
    plain.push('\n');
    html.push_str(&heading(gpu_title));
    if !t.gpus.is_empty() {
        let table = gpu_table(&t.gpus);
        plain.push_str(&table.to_text());
        html.push_str(&html_table(&table));
    }
    match (&t.gpu_note, t.gpus.is_empty()) {
        (Some(n), _) => {
            plain.push_str(&format!("({n})\n"));
            html.push_str(&note(n));
        }
        (None, true) => {
            plain.push_str("(no GPUs)\n");
            html.push_str(&note("no GPUs"));
        }
        (None, false) => {}
    }

    let cores = t.cpu.per_core_pct.len();
    let cpu = format!(
        "CPU: {cores} cores, {:.0}% in use (over {:.1}s)",
        t.cpu.total_pct, t.interval_s
    );
    let per_core: Vec<String> = t
        .cpu
        .per_core_pct
        .iter()
        .map(|p| format!("{p:.0}"))
        .collect();
    plain.push_str(&format!("\n{cpu}\n"));
    if !per_core.is_empty() {
        plain.push_str(&format!("per core %: {}\n", per_core.join(" ")));
    }
    html.push_str(&heading(&cpu));
    html.push_str("<div style=\"display:flex;flex-wrap:wrap;gap:3px;max-width:640px\">");
    for (i, p) in t.cpu.per_core_pct.iter().enumerate() {
        html.push_str(&format!(
            "<div title=\"core {i}: {p:.0}%\" style=\"width:60px\">{}</div>",
            load_bar(*p)
        ));
    }
    html.push_str("</div>\n");

    let m = &t.memory;
    let mem = format!(
        "memory: {} of {} used ({:.0}%)",
        bytes(m.used_bytes()),
        bytes(m.total_bytes),
        m.used_pct()
    );
    plain.push_str(&format!("{mem}\n"));
    html.push_str(&heading(&mem));
    html.push_str(&format!(
        "<div style=\"width:240px\">{}</div>\n",
        load_bar(m.used_pct())
    ));

    let procs = process_table(t);
    let title = if t.processes.is_empty() {
        "processes: no live runs"
    } else {
        "processes"
    };
    plain.push_str(&format!("\n{title}\n"));
    html.push_str(&heading(title));
    if !t.processes.is_empty() {
        plain.push_str(&procs.to_text());
        html.push_str(&html_table(&procs));
    }
    for n in &t.notes {
        plain.push_str(&format!("note: {n}\n"));
        html.push_str(&note(n));
    }
    html.push_str("</div>");
    Output::rich(plain, html)
}

fn gpu_table(gpus: &[GpuSample]) -> Table {
    let rows = gpus
        .iter()
        .map(|g| {
            let memory = match (g.memory_used_bytes, g.memory_total_bytes) {
                (Some(u), Some(t)) => format!("{} / {}", bytes(u), bytes(t)),
                (Some(u), None) => bytes(u),
                _ => "-".into(),
            };
            let power = match (g.power_w, g.power_limit_w) {
                (Some(p), Some(l)) => format!("{p:.0} / {l:.0} W"),
                (Some(p), None) => format!("{p:.0} W"),
                _ => "-".into(),
            };
            vec![
                g.index.to_string(),
                g.name.clone(),
                opt(g.utilization_pct, |u| format!("{u:.0}%")),
                memory,
                opt(g.temperature_c, |c| format!("{c:.0}°C")),
                power,
                g.processes.len().to_string(),
                g.held_by.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    Table::new(
        &[
            "GPU", "NAME", "UTIL", "MEMORY", "TEMP", "POWER", "PROCS", "RUN",
        ],
        rows,
    )
}

fn process_table(t: &Telemetry) -> Table {
    let rows = t
        .processes
        .iter()
        .map(|p| {
            vec![
                p.owner.run_id.clone(),
                p.owner.experiment.clone(),
                p.owner.role(),
                p.pid.to_string(),
                opt(p.cpu_pct, |c| format!("{c:.0}%")),
                opt(p.rss_bytes, bytes),
                p.command.clone(),
            ]
        })
        .collect();
    Table::new(
        &["RUN", "EXPERIMENT", "ROLE", "PID", "CPU", "RSS", "COMMAND"],
        rows,
    )
}

fn opt<T: Copy>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map(f).unwrap_or_else(|| "-".into())
}

/// A size in bytes with a binary unit: `512 B`, `3.4 MiB`, `79.6 GiB`.
pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

fn heading(text: &str) -> String {
    format!(
        "<div style=\"font-weight:600;margin-top:8px\">{}</div>\n",
        html_escape(text)
    )
}

/// A bar for a load: green, amber over 60%, red over 90%.
fn load_bar(pct: f64) -> String {
    let colour = if pct > 90.0 {
        "#dc2626"
    } else if pct > 60.0 {
        "#d97706"
    } else {
        "#16a34a"
    };
    bar(pct, colour)
}
