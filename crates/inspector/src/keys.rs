//! Key presses to [`Action`]s, and the key list the help overlay shows.

use super::app::{Action, App};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// Every key, as the help overlay lists it: (keys, what they do).
pub const HELP: &[(&str, &str)] = &[
    ("j / Down", "next row"),
    ("k / Up", "previous row"),
    ("g / Home", "first row (entries: first page)"),
    ("G / End", "last row (entries: last page)"),
    ("PgDn / PgUp", "a screen down / up (entries: next / previous page)"),
    (
        "Enter / l / Right",
        "open: snapshot, operator, state (keyed or operator)",
    ),
    ("Esc / h / Left", "back one level"),
    ("/", "search entries by key (exact key first), lists by name"),
    ("n / N", "next / previous match"),
    ("f", "filter entries by their text, lists by name; empty: off"),
    ("Ctrl-U", "in the search or filter prompt: clear it"),
    ("x", "typed values / hex bytes"),
    ("m", "metadata pane: sizes, bytes per key group"),
    ("d", "diff: mark the base snapshot; d on another diffs them"),
    ("?", "this help (j/k/PgUp/PgDn scroll; other keys close)"),
    ("q / Ctrl-C", "quit"),
];

/// The action for `key` in the app's current mode (help overlay, prompt, or normal). In the
/// help overlay j/k/arrows/PgUp/PgDn scroll it (`update` sends them there while it shows),
/// `q` quits and any other key closes it.
pub fn action_for(app: &App, key: KeyEvent) -> Option<Action> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    if ctrl && key.code == KeyCode::Char('c') {
        return Some(Action::Quit);
    }
    if app.prompt.is_some() {
        return match key.code {
            KeyCode::Esc => Some(Action::PromptCancel),
            KeyCode::Enter => Some(Action::PromptSubmit),
            KeyCode::Backspace => Some(Action::PromptBackspace),
            KeyCode::Char('u') if ctrl => Some(Action::PromptClear),
            KeyCode::Char(c) if !ctrl => Some(Action::PromptInput(c)),
            _ => None,
        };
    }
    if app.help {
        return match key.code {
            KeyCode::Char('q') => Some(Action::Quit),
            KeyCode::Char('j') | KeyCode::Down => Some(Action::Down),
            KeyCode::Char('k') | KeyCode::Up => Some(Action::Up),
            KeyCode::PageDown => Some(Action::PageDown),
            KeyCode::PageUp => Some(Action::PageUp),
            _ => Some(Action::ToggleHelp),
        };
    }
    Some(match key.code {
        KeyCode::Char('q') => Action::Quit,
        KeyCode::Char('j') | KeyCode::Down => Action::Down,
        KeyCode::Char('k') | KeyCode::Up => Action::Up,
        KeyCode::Char('g') | KeyCode::Home => Action::Top,
        KeyCode::Char('G') | KeyCode::End => Action::Bottom,
        KeyCode::PageDown => Action::PageDown,
        KeyCode::PageUp => Action::PageUp,
        KeyCode::Char('f') if ctrl => Action::PageDown,
        KeyCode::Char('b') if ctrl => Action::PageUp,
        KeyCode::Enter | KeyCode::Char('l') | KeyCode::Right => Action::Enter,
        KeyCode::Esc | KeyCode::Char('h') | KeyCode::Left | KeyCode::Backspace => Action::Back,
        KeyCode::Char('/') => Action::StartSearch,
        KeyCode::Char('n') => Action::SearchNext,
        KeyCode::Char('N') => Action::SearchPrev,
        KeyCode::Char('f') => Action::StartFilter,
        KeyCode::Char('x') => Action::ToggleHex,
        KeyCode::Char('m') => Action::ToggleMeta,
        KeyCode::Char('d') => Action::MarkDiff,
        KeyCode::Char('?') => Action::ToggleHelp,
        _ => return None,
    })
}
