//! Every `ddp` subcommand that the kernel's `%ddp` magic offers too takes the same arguments:
//! the same options with the same help, and the same words parse to the same values (the
//! shared `ddp_workspaces::commands` structs). What a front end adds of its own is listed here,
//! so a new option in one front end and not the other fails until it is listed or shared.

use clap::{Arg, Command, CommandFactory, FromArgMatches};
use ddp_cli::args::Cli;
use ddp_kernel::magics::LineMagic;
use ddp_workspaces::commands::{
    self, CompareArgs, LogsArgs, LsArgs, PlotArgs, RunAddress, RunArgs, SampleArgs, ShowArgs,
};

/// Options only the CLI has: a terminal waits for runs unless told not to, follows logs, and
/// writes plots to files.
const CLI_ONLY: &[(&str, &str)] = &[
    ("run", "detach"),
    ("resume", "detach"),
    ("logs", "follow"),
    ("plot", "output"),
    ("sweep", "detach"),
];
/// Options only the kernel has: a cell shows a live card and returns unless told to wait.
const KERNEL_ONLY: &[(&str, &str)] = &[("run", "wait"), ("resume", "wait")];

fn cli() -> Command {
    Cli::command()
}

fn kernel() -> Command {
    LineMagic::command()
}

/// The subcommands both front ends offer, in the order their help lists them.
fn shared() -> Vec<String> {
    let k = kernel();
    let mut subs: Vec<_> = cli()
        .get_subcommands()
        .filter(|c| k.find_subcommand(c.get_name()).is_some())
        .map(|c| (c.get_display_order(), c.get_name().to_string()))
        .collect();
    subs.sort();
    subs.into_iter().map(|(_, name)| name).collect()
}

/// The names of `cmd`'s subcommands in the order its help lists them.
fn listed(cmd: &Command) -> Vec<String> {
    let mut cmd = cmd.clone();
    cmd.build();
    let mut subs: Vec<_> = cmd
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| (c.get_display_order(), c.get_name().to_string()))
        .collect();
    subs.sort();
    subs.into_iter().map(|(_, name)| name).collect()
}

/// Both front ends list the shared subcommands in the same order, starting a run first.
#[test]
fn help_lists_subcommands_in_working_order() {
    assert_eq!(
        listed(&cli()),
        [
            "run", "ls", "show", "logs", "stop", "scale", "resume", "rm", "tag", "sweep",
            "compare", "plot", "sample", "export", "new", "help"
        ]
    );
    let kernel_order: Vec<String> = listed(&kernel())
        .into_iter()
        .filter(|name| shared().contains(name))
        .collect();
    assert_eq!(kernel_order, shared());
}

/// What a user sees of an argument, and how it parses.
fn describe(a: &Arg) -> String {
    format!(
        "long {:?} short {:?} value {:?} help {:?} long help {:?} required {} positional {} \
         action {:?} num_args {:?} default {:?} possible {:?}",
        a.get_long(),
        a.get_short(),
        a.get_value_names(),
        a.get_help().map(|h| h.to_string()),
        a.get_long_help().map(|h| h.to_string()),
        a.is_required_set(),
        a.is_positional(),
        a.get_action(),
        a.get_num_args(),
        a.get_default_values(),
        a.get_possible_values()
            .iter()
            .map(|v| v.get_name().to_string())
            .collect::<Vec<_>>(),
    )
}

/// The arguments of `sub` in `cmd` (without `--help` and the CLI's global `--workspace`) that
/// are not in `own`, described.
fn arguments(cmd: &Command, sub: &str, own: &[(&str, &str)]) -> Vec<(String, String)> {
    let sub_cmd = cmd.find_subcommand(sub).expect("a subcommand");
    let mut args: Vec<(String, String)> = sub_cmd
        .get_arguments()
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "workspace"))
        .filter(|a| !own.contains(&(sub, a.get_id().as_str())))
        .map(|a| (a.get_id().to_string(), describe(a)))
        .collect();
    args.sort();
    args
}

#[test]
fn the_shared_subcommands_are_the_ones_expected() {
    assert_eq!(
        shared(),
        [
            "run", "ls", "show", "logs", "stop", "scale", "resume", "sweep", "compare", "plot",
            "sample"
        ]
    );
    for (sub, id) in CLI_ONLY {
        let found = cli()
            .find_subcommand(sub)
            .unwrap()
            .get_arguments()
            .any(|a| a.get_id() == id);
        assert!(found, "the CLI's {sub} has no --{id}: update CLI_ONLY");
    }
    for (sub, id) in KERNEL_ONLY {
        let k = kernel();
        let found = k
            .find_subcommand(sub)
            .unwrap()
            .get_arguments()
            .any(|a| a.get_id() == id);
        assert!(found, "%ddp {sub} has no --{id}: update KERNEL_ONLY");
    }
}

#[test]
fn shared_subcommands_have_the_same_options_and_help() {
    for sub in shared() {
        let c = arguments(&cli(), &sub, CLI_ONLY);
        let k = arguments(&kernel(), &sub, KERNEL_ONLY);
        let ids = |v: &[(String, String)]| v.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>();
        assert_eq!(
            ids(&c),
            ids(&k),
            "`ddp {sub}` and `%ddp {sub}` differ in their options"
        );
        for ((id, cd), (_, kd)) in c.iter().zip(&k) {
            assert_eq!(cd, kd, "`ddp {sub}` and `%ddp {sub}` differ in {id}");
        }
    }
}

/// Parses `line` as `sub` in both front ends (the CLI's with `cli_extra`, the words its own
/// required options need) and reads the shared struct `T` from each.
fn both<T: FromArgMatches>(
    sub: &str,
    line: &str,
    cli_extra: &[&str],
) -> (Result<T, String>, Result<T, String>) {
    let words = commands::split(line).unwrap();
    let parse = |cmd: Command, bin: &str, extra: &[&str]| -> Result<T, String> {
        let argv = [bin.to_string(), sub.to_string()]
            .into_iter()
            .chain(words.clone())
            .chain(extra.iter().map(|w| w.to_string()));
        let m = cmd
            .try_get_matches_from(argv)
            .map_err(|e| e.kind().to_string())?;
        T::from_arg_matches(m.subcommand_matches(sub).unwrap()).map_err(|e| e.to_string())
    };
    (parse(cli(), "ddp", cli_extra), parse(kernel(), "%ddp", &[]))
}

fn same<T: FromArgMatches + PartialEq + std::fmt::Debug>(sub: &str, lines: &[&str]) {
    same_with::<T>(sub, lines, &[]);
}

fn same_with<T>(sub: &str, lines: &[&str], cli_extra: &[&str])
where
    T: FromArgMatches + PartialEq + std::fmt::Debug,
{
    for line in lines {
        let (c, k) = both::<T>(sub, line, cli_extra);
        assert_eq!(
            c, k,
            "`ddp {sub} {line}` and `%ddp {sub} {line}` parse differently"
        );
    }
}

#[test]
fn the_same_words_parse_to_the_same_values() {
    same::<RunArgs>(
        "run",
        &[
            "examples/mnist.toml",
            "a.toml --set train.lr=0.1 --set=train.epochs=2 --replicas 2 --name 'my run' --trainer bin/t",
            "",
            "a.toml --set",
            "a.toml --set x",
            "a.toml --replicas two",
            "a.toml b.toml",
        ],
    );
    same::<LsArgs>(
        "ls",
        &[
            "",
            "--experiment mnist-cnn --status running --sweep latest --json",
            "--status nosuch",
            "--jsn",
        ],
    );
    same::<ShowArgs>("show", &["latest", "mnist@latest --json", ""]);
    same::<LogsArgs>("logs", &["abc", "abc --rank 1 --tail 20", "abc --rank x"]);
    same::<RunAddress>("stop", &["latest", "", "a b"]);
    same::<RunAddress>("resume", &["20261121-120857-ad4c4d", ""]);
    same::<CompareArgs>("compare", &["a b c", "--sweep latest --json", "a --sweep"]);
    same_with::<PlotArgs>(
        "plot",
        &["a b", "a --sweep s --x epoch", "--x time", "--x nope"],
        &["--output", "plot.svg"],
    );
    same::<SampleArgs>(
        "sample",
        &[
            "latest",
            "r1 --prompt 'KING ' --tokens 20 --temperature 0 --top-k 0 --seed 7 --checkpoint best",
            "r1 --checkpoint checkpoints/step-00000006.safetensors",
            "r1 --temperature -1",
            "r1 --tokens many",
            "--seed 1",
        ],
    );
    // The values really are read: a line that sets everything is not the default.
    let (c, _) = both::<LsArgs>("ls", "--experiment e --json", &[]);
    assert_eq!(c.unwrap().filter.experiment.as_deref(), Some("e"));
}
