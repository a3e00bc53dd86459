//! The Devices view: each GPU (utilisation, memory, temperature, power, history, holder), or
//! without GPUs the CPU cores and memory; then the processes of live runs.

use ddp_workspaces::engine::devices::telemetry::{GpuSample, History, Telemetry, TelemetryHistory};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, Widget};

use super::DevicesState;
use crate::theme::Theme;
use crate::views::text::{bar, bytes, sparkline, truncate};

pub fn render(t: Theme, devices: &DevicesState, area: Rect, buf: &mut Buffer) {
    let block = Block::default()
        .borders(Borders::TOP)
        .title(Span::styled(" Devices ", t.title()));
    let inner = block.inner(area);
    block.render(area, buf);
    let Some(tel) = &devices.telemetry else {
        Paragraph::new(" Sampling devices …")
            .style(t.dim())
            .render(inner, buf);
        return;
    };
    let gpu_rows = if tel.gpus.is_empty() {
        0
    } else {
        tel.gpus.len() as u16 * 2 + 1
    };
    let cpu_rows = if tel.gpus.is_empty() {
        // One bar per core, in two columns when there are many.
        (tel.cpu.per_core_pct.len() as u16).div_ceil(if inner.width >= 100 { 2 } else { 1 }) + 3
    } else {
        3
    };
    let [top, mid, procs] = Layout::vertical([
        Constraint::Length(gpu_rows),
        Constraint::Length(cpu_rows),
        Constraint::Min(3),
    ])
    .areas(inner);
    if !tel.gpus.is_empty() {
        render_gpus(t, &devices.history, tel, top, buf);
    }
    render_cpu(t, &devices.history, tel, mid, buf);
    render_processes(t, tel, procs, buf);
}

fn pct_line(t: Theme, label: &str, pct: Option<f64>, width: usize) -> Vec<Span<'static>> {
    let p = pct.unwrap_or(0.0);
    vec![
        Span::styled(format!("{label:<5}"), t.dim()),
        Span::styled(bar(p / 100.0, width), t.level(p / 100.0)),
        Span::raw(match pct {
            Some(p) => format!(" {p:>5.1}%"),
            None => "     - ".into(),
        }),
    ]
}

fn history_of(h: &History<Option<f64>>) -> Vec<f64> {
    h.iter().map(|v| v.unwrap_or(f64::NAN)).collect()
}

fn render_gpus(
    t: Theme,
    history: &TelemetryHistory,
    tel: &Telemetry,
    area: Rect,
    buf: &mut Buffer,
) {
    let mut lines = Vec::new();
    if let Some(note) = &tel.gpu_note {
        lines.push(Line::from(Span::styled(format!(" {note}"), t.dim())));
    }
    let bar_w = (area.width as usize).saturating_sub(60).clamp(8, 30);
    let spark_w = (area.width as usize)
        .saturating_sub(bar_w + 50)
        .clamp(0, 40);
    for g in &tel.gpus {
        let hist = history.gpu(g.index);
        lines.push(gpu_title(t, g));
        let mut spans = vec![Span::raw("  ")];
        spans.extend(pct_line(t, "util", g.utilization_pct, bar_w));
        if let Some(h) = hist {
            spans.push(Span::raw(" "));
            spans.push(Span::styled(
                sparkline(&history_of(&h.utilization_pct), spark_w),
                t.ok(),
            ));
        }
        let mem_pct = match (g.memory_used_bytes, g.memory_total_bytes) {
            (Some(u), Some(tot)) if tot > 0 => Some(u as f64 * 100.0 / tot as f64),
            _ => None,
        };
        spans.push(Span::raw("  "));
        spans.extend(pct_line(t, "mem", mem_pct, bar_w / 2));
        if let (Some(u), Some(tot)) = (g.memory_used_bytes, g.memory_total_bytes) {
            spans.push(Span::styled(
                format!(" {}/{}", bytes(u), bytes(tot)),
                t.dim(),
            ));
        }
        lines.push(Line::from(spans));
    }
    Paragraph::new(lines).render(area, buf);
}

fn gpu_title(t: Theme, g: &GpuSample) -> Line<'static> {
    let temp = g.temperature_c.map_or("-".into(), |c| format!("{c:.0}°C"));
    let power = match (g.power_w, g.power_limit_w) {
        (Some(p), Some(l)) => format!("{p:.0}/{l:.0} W"),
        (Some(p), None) => format!("{p:.0} W"),
        _ => "- W".into(),
    };
    let holder = match &g.held_by {
        Some(run) => {
            let ranks: Vec<String> = g
                .processes
                .iter()
                .filter_map(|p| p.owner.as_ref().map(|o| o.role()))
                .collect();
            if ranks.is_empty() {
                format!("run {run}")
            } else {
                format!("run {run} ({})", ranks.join(", "))
            }
        }
        None => "free".into(),
    };
    Line::from(vec![
        Span::styled(format!(" GPU {} ", g.index), t.title()),
        Span::styled(
            format!("{} ", g.name),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(" {temp}  {power}  ")),
        Span::styled(
            holder,
            if g.held_by.is_some() {
                t.marked()
            } else {
                t.dim()
            },
        ),
    ])
}

fn render_cpu(t: Theme, history: &TelemetryHistory, tel: &Telemetry, area: Rect, buf: &mut Buffer) {
    let cores = &tel.cpu.per_core_pct;
    let mut lines = Vec::new();
    let spark_w = (area.width as usize).saturating_sub(40).min(60);
    let mut total = vec![Span::raw(" ")];
    total.extend(pct_line(t, "cpu", Some(tel.cpu.total_pct), 20));
    total.push(Span::raw(format!(" {} cores ", cores.len())));
    total.push(Span::styled(
        sparkline(&history.cpu_total_pct().to_vec(), spark_w),
        t.ok(),
    ));
    lines.push(Line::from(total));
    let m = &tel.memory;
    let mut mem = vec![Span::raw(" ")];
    mem.extend(pct_line(t, "mem", Some(m.used_pct()), 20));
    mem.push(Span::raw(format!(
        " {}/{} ",
        bytes(m.used_bytes()),
        bytes(m.total_bytes)
    )));
    mem.push(Span::styled(
        sparkline(&history.memory_used_pct().to_vec(), spark_w),
        t.ok(),
    ));
    lines.push(Line::from(mem));
    if tel.gpus.is_empty() {
        lines.push(Line::from(Span::styled(
            format!(
                " no GPU: {}",
                tel.gpu_note.as_deref().unwrap_or("none found")
            ),
            t.dim(),
        )));
        let two = area.width >= 100;
        let w = if two {
            area.width as usize / 2
        } else {
            area.width as usize
        };
        let bar_w = w.saturating_sub(20).clamp(4, 40);
        let per_row = if two { 2 } else { 1 };
        for chunk in cores.chunks(per_row).enumerate() {
            let (row, pcts) = chunk;
            let mut spans = Vec::new();
            for (j, p) in pcts.iter().enumerate() {
                let i = row * per_row + j;
                spans.push(Span::raw(" "));
                spans.extend(pct_line(t, &format!("{i:>3}"), Some(*p), bar_w));
                spans.push(Span::raw("   "));
            }
            lines.push(Line::from(spans));
        }
    }
    Paragraph::new(lines).render(area, buf);
}

fn render_processes(t: Theme, tel: &Telemetry, area: Rect, buf: &mut Buffer) {
    let block = Block::default()
        .borders(Borders::TOP)
        .title(Span::styled(" Processes of live runs ", t.title()));
    let inner = block.inner(area);
    block.render(area, buf);
    if tel.processes.is_empty() {
        Paragraph::new(" No live runs.")
            .style(t.dim())
            .render(inner, buf);
        return;
    }
    let header = Row::new(["PID", "RUN", "ROLE", "CPU", "RSS", "COMMAND"])
        .style(Style::new().add_modifier(Modifier::BOLD));
    let cmd_w = (inner.width as usize).saturating_sub(60).max(10);
    let rows: Vec<Row> = tel
        .processes
        .iter()
        .map(|p| {
            Row::new(vec![
                Cell::from(p.pid.to_string()),
                Cell::from(format!(
                    "{} {}",
                    p.owner.experiment,
                    p.owner.run_id.get(9..).unwrap_or(&p.owner.run_id)
                )),
                Cell::from(p.owner.role()),
                Cell::from(p.cpu_pct.map_or("-".into(), |c| format!("{c:.0}%"))),
                Cell::from(p.rss_bytes.map_or("-".into(), bytes)),
                Cell::from(truncate(&p.command, cmd_w)),
            ])
        })
        .collect();
    Table::new(
        rows,
        [
            Constraint::Length(8),
            Constraint::Length(24),
            Constraint::Length(10),
            Constraint::Length(5),
            Constraint::Length(10),
            Constraint::Min(10),
        ],
    )
    .header(header)
    .column_spacing(1)
    .render(inner, buf);
}

#[cfg(test)]
mod tests {
    //! The Devices view, with and without GPUs.

    use crate::ui::tests::*;

    #[test]
    fn devices_without_gpus() {
        let mut app = app_with_runs(100, 30);
        keys(&mut app, "D");
        let s = screen(&app, 100, 30);
        assert_eq!(s[1], format!(" Devices {}", "─".repeat(91)));
        assert_eq!(s[2], " Sampling devices …");
        app.update(Msg::Telemetry(cpu_telemetry()));
        let s = screen(&app, 100, 30);
        assert_rows(
            &s,
            2,
            &[
                " cpu  █████████···········  45.0% 4 cores ▄",
                " mem  █████···············  25.0% 4.0 GiB/16.0 GiB ▄",
                " no GPU: no NVIDIA driver (libnvidia-ml.so.1 not found)",
                "   0  ███···························  10.0%      1  ███████████████···············  50.0%",
                "   2  ███████████████████████████···  90.0%      3  █████████·····················  30.0%",
                &format!(" Processes of live runs {}", "─".repeat(76)),
                "PID      RUN                      ROLE       CPU   RSS        COMMAND",
                "4242     mnist 120000-aaaaaa      rank 0     97%   512.0 MiB  ddp-trainer --rank 0",
                "",
            ],
        );
        assert_eq!(s[29], " ? help  Esc back  q quit (runs keep running)");
        // Narrow: one core a row; no live runs.
        let mut t = cpu_telemetry();
        t.processes.clear();
        app.update(Msg::Telemetry(t));
        let s = screen(&app, 80, 24);
        assert_has(&s, "   3  ");
        assert_has(&s, " No live runs.");
        assert_lacks(&s, "      1  ");
    }

    #[test]
    fn devices_with_two_simulated_gpus() {
        let mut app = app_with_runs(100, 30);
        keys(&mut app, "D");
        app.update(Msg::Telemetry(gpu_telemetry()));
        let s = screen(&app, 100, 30);
        assert_rows(
            &s,
            2,
            &[
                " simulated: 2 GPU(s) from DDP_SIMULATED_GPUS (NVML not used)",
                &format!(" GPU 0 Simulated GPU  58°C  360/700 W  run {A}"),
            ],
        );
        assert!(s[4].starts_with("  util "), "{}", s[4]);
        assert!(s[4].contains("50.0%"), "{}", s[4]);
        assert!(s[4].ends_with(" 40.0 GiB/80.0 GiB"), "{}", s[4]);
        assert_eq!(s[5], " GPU 1 Simulated GPU  77°C  618/700 W  free");
        assert!(s[6].ends_with("75.8% 60.6 GiB/80.0 GiB"), "{}", s[6]);
        assert_has(&s, " cpu  █████████···········  45.0% 4 cores");
        // With GPUs, no per-core bars and no "no GPU" note.
        assert_lacks(&s, "no GPU");
        assert_lacks(&s, "  90.0%");
        assert_has(&s, "4242     mnist 120000-aaaaaa      rank 0");
    }
}
