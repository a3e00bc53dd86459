//! Command lines as words, and words as a command's arguments: the one splitter and parser of
//! every front end that reads a typed command line (the kernel's magics, the TUI's dialogs).

use clap::Parser;

use crate::{Error, Result};

/// Splits `line` into words as a POSIX shell would (quotes, backslash escapes), without
/// expanding anything. Unbalanced quotes are [`Error::Invalid`].
pub fn split(line: &str) -> Result<Vec<String>> {
    shlex::split(line).ok_or_else(|| Error::Invalid(format!("unbalanced quotes in `{line}`")))
}

/// Parses `line` (split by [`split`]) as the arguments of the command named `name`: clap's
/// checks, with its message, usage line and suggestions as plain text (no colours) in
/// [`Error::Invalid`]. `--help` is an error too, whose text is the help.
pub fn parse_line<T: Parser>(name: &str, line: &str) -> Result<T> {
    parse_words(name, &split(line)?)
}

/// [`parse_line`] of words already split.
pub fn parse_words<T: Parser>(name: &str, words: &[String]) -> Result<T> {
    let argv = std::iter::once(name).chain(words.iter().map(String::as_str));
    T::try_parse_from(argv).map_err(|e| Error::Invalid(e.render().to_string().trim_end().into()))
}

/// The first paragraph of a parse error from [`parse_line`] on one line, without clap's
/// `error: ` prefix: what a one-line dialog shows ("unexpected argument '--detach' found").
pub fn one_line(message: &str) -> String {
    let first = message.split("\n\n").next().unwrap_or(message);
    let words: Vec<&str> = first.split_whitespace().collect();
    let text = words.join(" ");
    text.strip_prefix("error: ").unwrap_or(&text).to_string()
}

/// The arguments of `T` on one line, from its definition ([`synopsis_of`]).
pub fn synopsis<T: clap::CommandFactory>() -> String {
    synopsis_of(&T::command())
}

/// The arguments of a command on one line: positional words by value name, then every option
/// as `[--long VALUE]` (`...` when repeatable), e.g.
/// `SPEC [--set KEY=VALUE]... [--replicas N] [--trainer PATH] [--name NAME]`.
pub fn synopsis_of(cmd: &clap::Command) -> String {
    let value = |a: &clap::Arg| {
        a.get_value_names()
            .and_then(|v| v.first())
            .map_or_else(|| a.get_id().as_str().to_uppercase(), |v| v.to_string())
    };
    let mut parts: Vec<String> = cmd
        .get_positionals()
        .map(|a| {
            let v = value(a);
            if a.is_required_set() {
                v
            } else {
                format!("[{v}]")
            }
        })
        .collect();
    for a in cmd.get_arguments().filter(|a| !a.is_positional()) {
        let Some(long) = a.get_long().filter(|l| *l != "help") else {
            continue;
        };
        let repeat = if matches!(a.get_action(), clap::ArgAction::Append) {
            "..."
        } else {
            ""
        };
        if a.get_action().takes_values() {
            parts.push(format!("[--{long} {}]{repeat}", value(a)));
        } else {
            parts.push(format!("[--{long}]"));
        }
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_like_a_shell() {
        assert_eq!(
            split(r#"a.toml --set name="my run" --set 'x=a b' c\ d"#).unwrap(),
            ["a.toml", "--set", "name=my run", "--set", "x=a b", "c d"]
        );
        assert_eq!(split("  ").unwrap(), Vec::<String>::new());
        assert_eq!(split("''").unwrap(), [""]);
        let e = split("'open").unwrap_err();
        assert_eq!(e.to_string(), "unbalanced quotes in `'open`");
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn a_synopsis_and_one_line_errors_come_from_the_definitions() {
        use super::super::run::RunArgs;
        assert_eq!(
            synopsis::<RunArgs>(),
            "SPEC [--set KEY=VALUE]... [--replicas N] [--precision P] [--trainer PATH] \
             [--name NAME] [--on WHERE] [--nodes N] [--gpus-per-node G] [--partition PARTITION] [--time LIMIT] \
             [--account ACCOUNT] [--qos QOS] [--constraint CONSTRAINT] [--sbatch-arg ARG]... \
             [--master URL] [--tasks N] [--gpus-per-task G] [--spark-conf KEY=VALUE]..."
        );
        let e = parse_line::<RunArgs>("run", "").unwrap_err().to_string();
        assert_eq!(
            one_line(&e),
            "the following required arguments were not provided: <SPEC>"
        );
        let e = parse_line::<RunArgs>("run", "a.toml --detach").unwrap_err();
        assert_eq!(
            one_line(&e.to_string()),
            "unexpected argument '--detach' found"
        );
    }

    #[test]
    fn parse_errors_are_plain_text_with_suggestions() {
        #[derive(clap::Parser, Debug)]
        struct Ls {
            #[command(flatten)]
            args: super::super::runs::LsArgs,
        }
        let ls = parse_line::<Ls>("ls", "--experiment 'a b' --json").unwrap();
        assert_eq!(ls.args.filter.experiment.as_deref(), Some("a b"));
        let e = parse_line::<Ls>("ls", "--jsn").unwrap_err().to_string();
        assert!(e.contains("unexpected argument '--jsn'"), "{e}");
        assert!(e.contains("'--json'"), "a suggestion: {e}");
        assert!(!e.contains('\u{1b}'), "no colours: {e:?}");
    }
}
