//! What the movement keys do to a plain scroll position (the Run view's events and spec panes,
//! the Compare view's key table).

use crate::keys::Action;

/// Up/down/page/home/end on a scroll position over `len` rows.
pub(crate) fn scroll(pos: &mut usize, action: Action, page: usize, len: usize) {
    let max = len.saturating_sub(1);
    *pos = match action {
        Action::Up => pos.saturating_sub(1),
        Action::Down => (*pos + 1).min(max),
        Action::PageUp => pos.saturating_sub(page),
        Action::PageDown => (*pos + page).min(max),
        Action::Home => 0,
        Action::End => max,
        _ => *pos,
    };
}
