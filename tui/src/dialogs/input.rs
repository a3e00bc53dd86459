//! A one-line text input (filter, search, new-run command, tags): its editing keys.

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
}
