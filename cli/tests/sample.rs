//! `ddp sample` end to end: a tiny GPT trained by `ddp run` in a temporary workspace, then the
//! real binary's text, exit codes and messages.

mod common;
use common::*;

use std::path::Path;
use std::time::Duration;

use ddp_workspaces::commands::SampleOptions;
use ddp_workspaces::present::sample::Sampler;
use ddp_workspaces::test_util::{MLP_SPEC, completed_run};
use ddp_workspaces::{Run, RunStatus, Workspace};

const LIMIT: Duration = Duration::from_secs(120);

fn sample(ws: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["sample"];
    all.extend(args);
    run_ddp(ws, &all, LIMIT)
}

/// The library's text for `options` (what every front end prints), and the newline after it.
fn library_text(run: &Run, options: SampleOptions) -> String {
    Sampler::new(run.clone(), &options.request())
        .unwrap()
        .collect()
        .unwrap()
        .0
        .concat()
        + "\n"
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn sampling_a_trained_gpt_is_reproducible_and_refuses_what_it_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let args = tiny_gpt_run("tiny");
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(run_ddp(&ws, &words, LIMIT));
    let (runs, _) = Workspace::open(&ws).unwrap().runs().unwrap();
    let gpt = runs[0].clone();
    assert_eq!(gpt.record.status, RunStatus::Completed);
    let id = gpt.record.id.as_str();

    // The same seed, the same text: the prompt, 60 characters, a newline.
    let a = ok(sample(
        &ws,
        &[
            "latest", "--prompt", "KING", "--tokens", "60", "--seed", "3",
        ],
    ));
    assert!(a.starts_with("KING") && a.ends_with('\n'), "{a:?}");
    assert_eq!(a.chars().count(), 4 + 60 + 1, "{a:?}");
    let corpus =
        std::fs::read_to_string(repo().join("examples/data/shakespeare/input.txt")).unwrap();
    assert!(a.chars().all(|c| corpus.contains(c)), "{a:?}");
    assert_eq!(
        ok(sample(
            &ws,
            &[id, "--prompt", "KING", "--tokens", "60", "--seed", "3"]
        )),
        a
    );
    let other = ok(sample(
        &ws,
        &[
            "latest", "--prompt", "KING", "--tokens", "60", "--seed", "4",
        ],
    ));
    assert_ne!(other, a);
    assert_eq!(other.chars().count(), 65);
    // Exactly the library's text, which the kernel and the TUI show too.
    let options = SampleOptions {
        prompt: "KING".into(),
        tokens: 60,
        seed: 3,
        ..SampleOptions::default()
    };
    assert_eq!(library_text(&gpt, options), a);

    // The final model is the last checkpoint's weights: the same text from either.
    let from = |w: &str| {
        ok(sample(
            &ws,
            &[
                "latest",
                "--prompt",
                "KING",
                "--tokens",
                "60",
                "--seed",
                "3",
                "--checkpoint",
                w,
            ],
        ))
    };
    assert_eq!(from("latest"), a);
    assert_eq!(from("checkpoints/step-00000006.safetensors"), a);
    assert_ne!(from("checkpoints/step-00000003.safetensors"), a);
    let best = from("best");
    assert!(best == a || best == from("checkpoints/step-00000003.safetensors"));
    // Greedy, and no tokens at all.
    let greedy = |seed: &str| {
        ok(sample(
            &ws,
            &[
                "latest",
                "--temperature",
                "0",
                "--tokens",
                "20",
                "--seed",
                seed,
            ],
        ))
    };
    assert_eq!(greedy("1"), greedy("2"));
    assert_eq!(greedy("1").chars().count(), 1 + 20 + 1);
    assert_eq!(
        ok(sample(
            &ws,
            &["latest", "--prompt", "KING", "--tokens", "0"]
        )),
        "KING\n"
    );

    // A character the training text does not have.
    let o = sample(&ws, &["latest", "--prompt", "KING €"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(o.stdout.is_empty());
    assert_eq!(
        stderr(&o),
        format!(
            "ddp: the prompt's character '€' (U+20AC) at position 5 (counting from 0) is not in the \
             vocabulary of run {id}, the 79 characters of its training text\n"
        )
    );

    // A run that is not a language model.
    let mlp = completed_run(&ws, MLP_SPEC);
    let o = sample(&ws, &[&mlp.record.id]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(o.stdout.is_empty());
    assert_eq!(
        stderr(&o),
        format!(
            "ddp: run {} is not a language model (model \"mlp\" on data \"synthetic\"): sampling \
             generates text from a model.name = \"gpt\" run on data.name = \"text\"\n",
            mlp.record.id
        )
    );
    // Bad options are clap's errors, exit 2; so is a model file that is not there.
    let o = sample(&ws, &[id, "--top-k", "-1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = sample(&ws, &[id, "--checkpoint", "nope.safetensors"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        stderr(&o).starts_with("ddp: no model file nope.safetensors"),
        "{}",
        text(&o)
    );
}
