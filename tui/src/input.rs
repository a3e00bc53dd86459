//! A one-line text input (filter, search, new-run command, tags): editing keys, and splitting a
//! command line into words the way a shell would for the simple cases (quotes, backslashes).

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InputLine {
    pub text: String,
    /// Cursor position in chars.
    pub cursor: usize,
}

/// What a key did to an input line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edit {
    /// The text changed (or the cursor moved).
    Changed,
    Submit,
    Cancel,
    /// Tab (completion, where the owner offers it).
    Complete,
    /// Not an editing key.
    Ignored,
}

impl InputLine {
    pub fn new(text: &str) -> InputLine {
        InputLine {
            text: text.to_string(),
            cursor: text.chars().count(),
        }
    }

    fn byte(&self, char_pos: usize) -> usize {
        self.text
            .char_indices()
            .nth(char_pos)
            .map_or(self.text.len(), |(i, _)| i)
    }

    pub fn key(&mut self, key: KeyEvent) -> Edit {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Enter => Edit::Submit,
            KeyCode::Esc => Edit::Cancel,
            KeyCode::Tab => Edit::Complete,
            KeyCode::Char('c') if ctrl => Edit::Cancel,
            KeyCode::Char('u') if ctrl => {
                let b = self.byte(self.cursor);
                self.text.replace_range(..b, "");
                self.cursor = 0;
                Edit::Changed
            }
            KeyCode::Char('w') if ctrl => {
                let b = self.byte(self.cursor);
                let before = self.text[..b].trim_end();
                let start = before.rfind(' ').map_or(0, |i| i + 1);
                let removed = self.text[start..b].chars().count();
                self.text.replace_range(start..b, "");
                self.cursor -= removed;
                Edit::Changed
            }
            KeyCode::Char('a') if ctrl => {
                self.cursor = 0;
                Edit::Changed
            }
            KeyCode::Char('e') if ctrl => {
                self.cursor = self.text.chars().count();
                Edit::Changed
            }
            KeyCode::Char(c) if !ctrl => {
                let b = self.byte(self.cursor);
                self.text.insert(b, c);
                self.cursor += 1;
                Edit::Changed
            }
            KeyCode::Backspace if self.cursor > 0 => {
                self.cursor -= 1;
                let b = self.byte(self.cursor);
                self.text.remove(b);
                Edit::Changed
            }
            KeyCode::Delete if self.cursor < self.text.chars().count() => {
                let b = self.byte(self.cursor);
                self.text.remove(b);
                Edit::Changed
            }
            KeyCode::Left => {
                self.cursor = self.cursor.saturating_sub(1);
                Edit::Changed
            }
            KeyCode::Right => {
                self.cursor = (self.cursor + 1).min(self.text.chars().count());
                Edit::Changed
            }
            KeyCode::Home => {
                self.cursor = 0;
                Edit::Changed
            }
            KeyCode::End => {
                self.cursor = self.text.chars().count();
                Edit::Changed
            }
            _ => Edit::Ignored,
        }
    }

    /// Replaces the last word (the one being completed) with `word`.
    pub fn replace_last_word(&mut self, word: &str) {
        let start = self.text.rfind(' ').map_or(0, |i| i + 1);
        self.text.replace_range(start.., word);
        self.cursor = self.text.chars().count();
    }

    /// The word being typed (after the last space).
    pub fn last_word(&self) -> &str {
        self.text.rsplit(' ').next().unwrap_or("")
    }
}

/// Splits a command line into words: whitespace separates, '…' and "…" group, `\` escapes.
pub fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') | (None, '\\') => match chars.next() {
                Some(n) => word.push(n),
                None => return Err("a `\\` ends the line".into()),
            },
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
        if quote.is_some() {
            in_word = true;
        }
    }
    if let Some(q) = quote {
        return Err(format!("unclosed {q}"));
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    #[test]
    fn editing_keys() {
        let mut i = InputLine::default();
        for c in "héllo".chars() {
            assert_eq!(i.key(k(KeyCode::Char(c))), Edit::Changed);
        }
        i.key(k(KeyCode::Left));
        i.key(k(KeyCode::Left));
        i.key(k(KeyCode::Backspace));
        assert_eq!(i.text, "hélo");
        i.key(k(KeyCode::Home));
        i.key(k(KeyCode::Delete));
        assert_eq!((i.text.as_str(), i.cursor), ("élo", 0));
        assert_eq!(i.key(k(KeyCode::Enter)), Edit::Submit);
        assert_eq!(i.key(k(KeyCode::Esc)), Edit::Cancel);
        assert_eq!(i.key(k(KeyCode::Tab)), Edit::Complete);
        let mut i = InputLine::new("run a.toml --set x=1");
        i.key(KeyEvent::new(KeyCode::Char('w'), KeyModifiers::CONTROL));
        assert_eq!(i.text, "run a.toml --set ");
        assert_eq!(i.last_word(), "");
        i.replace_last_word("y=2");
        assert_eq!(i.text, "run a.toml --set y=2");
        i.key(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
        assert_eq!(i.text, "");
    }

    #[test]
    fn words_split_like_a_shell() {
        assert_eq!(
            split_words(r#"a.toml --set name="my run" --set 'x=a b' c\ d"#).unwrap(),
            ["a.toml", "--set", "name=my run", "--set", "x=a b", "c d"]
        );
        assert_eq!(split_words("  ").unwrap(), Vec::<String>::new());
        assert_eq!(split_words("''").unwrap(), [""]);
        assert_eq!(split_words("'open").unwrap_err(), "unclosed '");
    }
}
