//! Colours and emphasis, honouring `NO_COLOR` (<https://no-color.org>): without colour every
//! distinction is kept with bold, dim, reversed or text alone.

use ddp_workspaces::RunStatus;
use ratatui::style::{Color, Modifier, Style};

/// Series colours (matplotlib's tab10, as `ddp plot` uses), cycled.
const SERIES: [Color; 10] = [
    Color::Rgb(31, 119, 180),
    Color::Rgb(255, 127, 14),
    Color::Rgb(44, 160, 44),
    Color::Rgb(214, 39, 40),
    Color::Rgb(148, 103, 189),
    Color::Rgb(140, 86, 75),
    Color::Rgb(227, 119, 194),
    Color::Rgb(127, 127, 127),
    Color::Rgb(188, 189, 34),
    Color::Rgb(23, 190, 207),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    pub color: bool,
}

impl Theme {
    /// Colour unless `NO_COLOR` is set to anything non-empty.
    pub fn from_env() -> Theme {
        Theme {
            color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }
    }

    fn fg(self, c: Color) -> Style {
        if self.color {
            Style::new().fg(c)
        } else {
            Style::new()
        }
    }

    /// The status word's style: live states stand out, failures are bold.
    pub fn status(self, s: RunStatus) -> Style {
        match s {
            RunStatus::Queued => self.fg(Color::Gray),
            RunStatus::Running => self.fg(Color::Green).add_modifier(Modifier::BOLD),
            RunStatus::Restarting => self.fg(Color::Yellow).add_modifier(Modifier::BOLD),
            RunStatus::Completed => self.fg(Color::Cyan),
            RunStatus::Failed => self.fg(Color::Red).add_modifier(Modifier::BOLD),
            RunStatus::Stopped => self.fg(Color::Magenta),
            RunStatus::Paused => self.fg(Color::Blue),
        }
    }

    pub fn title(self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }

    pub fn key(self) -> Style {
        self.fg(Color::Yellow).add_modifier(Modifier::BOLD)
    }

    pub fn dim(self) -> Style {
        Style::new().add_modifier(Modifier::DIM)
    }

    pub fn selected(self) -> Style {
        if self.color {
            Style::new()
                .bg(Color::DarkGray)
                .add_modifier(Modifier::BOLD)
        } else {
            Style::new().add_modifier(Modifier::REVERSED)
        }
    }

    pub fn marked(self) -> Style {
        self.fg(Color::Yellow).add_modifier(Modifier::BOLD)
    }

    pub fn warning(self) -> Style {
        self.fg(Color::Yellow)
    }

    pub fn error(self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }

    pub fn ok(self) -> Style {
        self.fg(Color::Green)
    }

    pub fn tab(self, active: bool) -> Style {
        if active {
            self.fg(Color::Cyan)
                .add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
        } else {
            self.dim()
        }
    }

    /// The colour of series `i` (a run, a rank); `Reset` without colour.
    pub fn series(self, i: usize) -> Color {
        if self.color {
            SERIES[i % SERIES.len()]
        } else {
            Color::Reset
        }
    }

    /// A line's colour by how good its result is, from 0 (worst) to 1 (best), `None` without
    /// one; `Reset` without colour.
    pub fn rank(self, weight: Option<f64>) -> Color {
        if !self.color {
            return Color::Reset;
        }
        match weight {
            None => Color::DarkGray,
            Some(w) if w > 0.8 => Color::LightRed,
            Some(w) if w > 0.4 => Color::Yellow,
            Some(_) => Color::Blue,
        }
    }

    /// A gauge/bar colour for a fraction in [0, 1] (green, yellow, red as it fills).
    pub fn level(self, fraction: f64) -> Style {
        self.fg(if fraction < 0.6 {
            Color::Green
        } else if fraction < 0.85 {
            Color::Yellow
        } else {
            Color::Red
        })
    }
}
