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
    let mut argv = vec![name.to_string()];
    argv.extend(split(line)?);
    T::try_parse_from(argv).map_err(|e| Error::Invalid(e.render().to_string().trim_end().into()))
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
    fn parse_errors_are_plain_text_with_suggestions() {
        #[derive(clap::Parser, Debug)]
        struct Ls {
            #[command(flatten)]
            args: crate::commands::LsArgs,
        }
        let ls = parse_line::<Ls>("ls", "--experiment 'a b' --json").unwrap();
        assert_eq!(ls.args.filter.experiment.as_deref(), Some("a b"));
        let e = parse_line::<Ls>("ls", "--jsn").unwrap_err().to_string();
        assert!(e.contains("unexpected argument '--jsn'"), "{e}");
        assert!(e.contains("'--json'"), "a suggestion: {e}");
        assert!(!e.contains('\u{1b}'), "no colours: {e:?}");
    }
}
