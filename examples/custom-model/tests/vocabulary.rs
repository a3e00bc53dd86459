//! A custom language model whose logits do not fit the data's vocabulary is refused before
//! training, with exit code 2 and a message giving both sizes.

use std::path::Path;
use std::process::Command;

#[test]
fn logits_of_another_vocabulary_are_refused_with_both_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let text = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/shakespeare/input.txt");
    let spec = dir.path().join("spec.toml");
    // The byte tokenizer has 256 ids; custom-lm returns 79 logits per position.
    std::fs::write(
        &spec,
        format!(
            "name = \"bytes\"\n[model]\nname = \"custom\"\nblock = 32\n[data]\nname = \"text\"\npath = \"{}\"\ntokenizer = \"byte\"\n[train]\nsteps = 2\n",
            text.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_custom-lm"))
        .arg(&spec)
        .args(["--standalone", "--nproc", "1", "--out"])
        .arg(dir.path().join("run"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "the model returns shape [1, 32, 79] for token ids [1, 32]; the data's vocabulary has 256 ids, so a language model must return logits [batch, time, 256]"
        ),
        "{stderr}"
    );
    assert!(!dir.path().join("run/model.safetensors").exists());
}
