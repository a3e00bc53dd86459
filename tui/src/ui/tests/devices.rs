//! The Devices view, with and without GPUs.

use super::*;

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
