//! Keys: one table per view, mapping keys to [`Action`]s. The same tables make the footer and
//! the help overlay, so a key cannot work without being documented (or the reverse).

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use crate::views::run::Pane;

/// What a key asks for; its meaning depends on the view ([`crate::app::App::act`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Quit,
    Back,
    Help,
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    Open,
    /// `/`: filter the runs, or search the log.
    Find,
    CycleSort,
    ReverseSort,
    ToggleGroup,
    ToggleMark,
    Compare,
    NewRun,
    Stop,
    Resume,
    Delete,
    Tags,
    Notes,
    Devices,
    NextPane,
    Pane(Pane),
    NextLogTab,
    PrevLogTab,
    ToggleFollow,
    ToggleWrap,
    SearchNext,
    SearchPrev,
    Smoother,
    Rougher,
    ToggleLogScale,
    CycleX,
    /// `p`: the Sample pane of a language-model run, with the prompt dialog.
    Sample,
    /// Generate again from the same prompt with the next seed.
    SampleAgain,
    /// `w`: the Sweep view of the selected run's sweep.
    OpenSweep,
    /// `p` in the Sweep view: promote the selected (paused) trial by hand.
    Promote,
}

/// The view whose keys apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    Runs,
    Run(Pane),
    Devices,
    Compare,
    Sweep,
}

/// One binding: the keys as written in the help, what it does, and the key codes.
pub struct Binding {
    pub keys: &'static str,
    pub help: &'static str,
    pub action: Action,
    codes: &'static [KeyCode],
    /// Shown in the footer (the rest only in the help overlay).
    pub footer: bool,
}

const fn b(
    keys: &'static str,
    help: &'static str,
    action: Action,
    codes: &'static [KeyCode],
    footer: bool,
) -> Binding {
    Binding {
        keys,
        help,
        action,
        codes,
        footer,
    }
}

use KeyCode::{Char, Down, End, Enter, Esc, Home, Left, PageDown, PageUp, Right, Tab, Up};

const MOVE: [Binding; 4] = [
    b(
        "↑/k ↓/j",
        "move / scroll",
        Action::Up,
        &[Up, Char('k')],
        false,
    ),
    b("", "", Action::Down, &[Down, Char('j')], false),
    b(
        "PgUp PgDn",
        "page up / down",
        Action::PageUp,
        &[PageUp],
        false,
    ),
    b("", "", Action::PageDown, &[PageDown], false),
];
const ENDS: [Binding; 2] = [
    b(
        "Home/g End/G",
        "top / bottom",
        Action::Home,
        &[Home, Char('g')],
        false,
    ),
    b("", "", Action::End, &[End, Char('G')], false),
];
const COMMON: [Binding; 3] = [
    b("?", "help", Action::Help, &[Char('?')], true),
    b("Esc", "back", Action::Back, &[Esc], true),
    b(
        "q",
        "quit (runs keep running)",
        Action::Quit,
        &[Char('q')],
        true,
    ),
];
const RUN_ACTIONS: [Binding; 6] = [
    b("n", "new run", Action::NewRun, &[Char('n')], true),
    b("s", "stop (asks)", Action::Stop, &[Char('s')], true),
    b("r", "resume", Action::Resume, &[Char('r')], true),
    b(
        "d",
        "delete (asks; not a live run)",
        Action::Delete,
        &[Char('d')],
        false,
    ),
    b("t", "edit tags", Action::Tags, &[Char('t')], false),
    b(
        "e",
        "edit notes.md in $EDITOR",
        Action::Notes,
        &[Char('e')],
        false,
    ),
];
const RUNS: [Binding; 8] = [
    b("Enter", "open run", Action::Open, &[Enter], true),
    b("/", "filter", Action::Find, &[Char('/')], true),
    b(
        "o",
        "sort by next column",
        Action::CycleSort,
        &[Char('o')],
        false,
    ),
    b(
        "O",
        "reverse sort",
        Action::ReverseSort,
        &[Char('O')],
        false,
    ),
    b(
        "x",
        "group by experiment",
        Action::ToggleGroup,
        &[Char('x')],
        false,
    ),
    b(
        "Space",
        "mark for compare",
        Action::ToggleMark,
        &[Char(' ')],
        false,
    ),
    b(
        "c",
        "compare marked runs",
        Action::Compare,
        &[Char('c')],
        true,
    ),
    b("", "", Action::Open, &[Right, Char('l')], false),
];
const OPEN_SWEEP: Binding = b(
    "w",
    "the run's sweep",
    Action::OpenSweep,
    &[Char('w')],
    false,
);
const SWEEP: [Binding; 4] = [
    b(
        "Enter",
        "open the trial's run",
        Action::Open,
        &[Enter],
        true,
    ),
    b("s", "stop the search", Action::Stop, &[Char('s')], true),
    b("r", "resume the search", Action::Resume, &[Char('r')], true),
    b(
        "p",
        "promote the trial",
        Action::Promote,
        &[Char('p')],
        true,
    ),
];
const PANES: [Binding; 6] = [
    b("Tab", "next pane", Action::NextPane, &[Tab], true),
    b(
        "1-5",
        "charts logs events spec sample",
        Action::Pane(Pane::Charts),
        &[Char('1')],
        false,
    ),
    b("", "", Action::Pane(Pane::Logs), &[Char('2')], false),
    b("", "", Action::Pane(Pane::Events), &[Char('3')], false),
    b("", "", Action::Pane(Pane::Spec), &[Char('4')], false),
    b("", "", Action::Pane(Pane::Sample), &[Char('5')], false),
];
/// `p` outside the Sample pane (a run that is not a language model is told so).
const SAMPLE_OPEN: Binding = b(
    "p",
    "sample text (language models)",
    Action::Sample,
    &[Char('p')],
    false,
);
const SAMPLE: [Binding; 2] = [
    b("p", "prompt and sample", Action::Sample, &[Char('p')], true),
    b(
        "Enter",
        "sample again (next seed)",
        Action::SampleAgain,
        &[Enter],
        true,
    ),
];
const CHARTS: [Binding; 4] = [
    b(
        "+ -",
        "smoothing",
        Action::Smoother,
        &[Char('+'), Char('=')],
        true,
    ),
    b("", "", Action::Rougher, &[Char('-'), Char('_')], false),
    b(
        "l",
        "log scale (loss)",
        Action::ToggleLogScale,
        &[Char('l')],
        true,
    ),
    b(
        "X",
        "x: step, epoch, time",
        Action::CycleX,
        &[Char('X')],
        true,
    ),
];
const DEVICES: Binding = b("D", "devices", Action::Devices, &[Char('D')], false);
const LOGS: [Binding; 7] = [
    b(
        "[ ] ← →",
        "previous / next log",
        Action::PrevLogTab,
        &[Char('['), Left],
        true,
    ),
    b("", "", Action::NextLogTab, &[Char(']'), Right], false),
    b("f", "follow", Action::ToggleFollow, &[Char('f')], true),
    b("w", "wrap", Action::ToggleWrap, &[Char('w')], true),
    b("/", "search", Action::Find, &[Char('/')], true),
    b(
        "n N",
        "next / previous match",
        Action::SearchNext,
        &[Char('n')],
        false,
    ),
    b("", "", Action::SearchPrev, &[Char('N')], false),
];

/// The bindings of a context, in help order.
pub fn bindings(ctx: Context) -> Vec<&'static Binding> {
    let mut v: Vec<&'static Binding> = Vec::new();
    match ctx {
        Context::Runs => {
            v.extend(&RUNS);
            v.push(&OPEN_SWEEP);
            v.extend(&RUN_ACTIONS);
            v.push(&DEVICES);
            v.extend(&MOVE);
            v.extend(&ENDS);
        }
        Context::Run(pane) => {
            v.extend(&PANES);
            match pane {
                Pane::Charts => v.extend(&CHARTS),
                // `n` searches on in the Logs pane: no new-run key there.
                Pane::Logs => v.extend(&LOGS),
                Pane::Events | Pane::Spec => {}
                Pane::Sample => v.extend(&SAMPLE),
            }
            if pane != Pane::Sample {
                v.push(&SAMPLE_OPEN);
            }
            v.extend(
                RUN_ACTIONS
                    .iter()
                    .filter(|b| !(pane == Pane::Logs && b.action == Action::NewRun)),
            );
            v.push(&DEVICES);
            v.extend(&MOVE);
            v.extend(&ENDS);
        }
        Context::Devices => {
            v.extend(&MOVE);
        }
        Context::Compare => {
            v.extend(&CHARTS);
            v.push(&DEVICES);
            v.extend(&MOVE);
        }
        Context::Sweep => {
            v.extend(&SWEEP);
            v.push(&DEVICES);
            v.extend(&MOVE);
            v.extend(&ENDS);
        }
    }
    v.extend(&COMMON);
    v
}

/// The action of `key` in `ctx`, if any. Ctrl-C quits everywhere.
pub fn action(ctx: Context, key: KeyEvent) -> Option<Action> {
    if key.modifiers.contains(KeyModifiers::CONTROL) {
        return match key.code {
            Char('c') => Some(Action::Quit),
            Char('d') => Some(Action::PageDown),
            Char('u') => Some(Action::PageUp),
            _ => None,
        };
    }
    if key.code == KeyCode::BackTab {
        return Some(Action::NextPane);
    }
    bindings(ctx)
        .into_iter()
        .find(|b| b.codes.contains(&key.code))
        .map(|b| b.action)
}

/// "key what" pairs for the footer.
pub fn footer(ctx: Context) -> Vec<(&'static str, &'static str)> {
    bindings(ctx)
        .into_iter()
        .filter(|b| b.footer && !b.keys.is_empty())
        .map(|b| (b.keys, b.help))
        .collect()
}

/// "key what" pairs for the help overlay (every documented binding).
pub fn help(ctx: Context) -> Vec<(&'static str, &'static str)> {
    bindings(ctx)
        .into_iter()
        .filter(|b| !b.keys.is_empty())
        .map(|b| (b.keys, b.help))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    #[test]
    fn keys_depend_on_the_view() {
        assert_eq!(action(Context::Runs, key(Char('n'))), Some(Action::NewRun));
        assert_eq!(
            action(Context::Run(Pane::Logs), key(Char('n'))),
            Some(Action::SearchNext)
        );
        assert_eq!(
            action(Context::Run(Pane::Charts), key(Char('n'))),
            Some(Action::NewRun)
        );
        assert_eq!(action(Context::Runs, key(Char('/'))), Some(Action::Find));
        assert_eq!(
            action(Context::Run(Pane::Charts), key(Char('l'))),
            Some(Action::ToggleLogScale)
        );
        assert_eq!(action(Context::Runs, key(Char('l'))), Some(Action::Open));
        assert_eq!(
            action(Context::Run(Pane::Spec), key(Char('3'))),
            Some(Action::Pane(Pane::Events))
        );
        assert_eq!(action(Context::Devices, key(Char('s'))), None);
        assert_eq!(
            action(Context::Run(Pane::Spec), key(Char('p'))),
            Some(Action::Sample)
        );
        assert_eq!(
            action(Context::Run(Pane::Sample), key(Enter)),
            Some(Action::SampleAgain)
        );
        assert_eq!(action(Context::Run(Pane::Charts), key(Enter)), None);
        assert_eq!(action(Context::Runs, key(Char('p'))), None);
        assert_eq!(
            action(
                Context::Devices,
                KeyEvent::new(Char('c'), KeyModifiers::CONTROL)
            ),
            Some(Action::Quit)
        );
        for ctx in [
            Context::Runs,
            Context::Run(Pane::Charts),
            Context::Run(Pane::Logs),
            Context::Devices,
            Context::Compare,
        ] {
            assert_eq!(action(ctx, key(Char('q'))), Some(Action::Quit), "{ctx:?}");
            assert_eq!(action(ctx, key(Esc)), Some(Action::Back), "{ctx:?}");
            assert_eq!(action(ctx, key(Char('?'))), Some(Action::Help), "{ctx:?}");
        }
    }

    #[test]
    fn no_key_is_bound_twice_in_one_view() {
        for ctx in [
            Context::Runs,
            Context::Run(Pane::Charts),
            Context::Run(Pane::Logs),
            Context::Run(Pane::Events),
            Context::Run(Pane::Spec),
            Context::Run(Pane::Sample),
            Context::Devices,
            Context::Compare,
        ] {
            let mut seen = Vec::new();
            for b in bindings(ctx) {
                for c in b.codes {
                    assert!(!seen.contains(c), "{c:?} bound twice in {ctx:?}");
                    seen.push(*c);
                }
            }
        }
    }
}
