//! Front ends (the `ddp` CLI here; a TUI, a notebook kernel) are built over `ddp-workspaces`
//! alone: the CLI's sources must not reach into `ddp-trainer`. What they need lives in the
//! library (`actions`, `metrics`, `summary`, `format`, `fsutil`, `spec`, `supervisor`).

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn the_cli_does_not_use_the_trainer_directly() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src.join("main.rs")];
    rust_files(&src.join("cli"), &mut files);
    assert!(files.len() > 5, "{files:?}");
    let mut offenders = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (i, line) in text.lines().enumerate() {
            if line.contains("ddp_trainer") {
                offenders.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "the CLI must use ddp_workspaces only (move what it needs into the library):\n{}",
        offenders.join("\n")
    );
}
