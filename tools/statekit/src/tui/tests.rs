//! Screen snapshots (`TestBackend` + insta) and pure `update` tests, on the golden fixtures.
//! The worker runs inline (no thread), so every screen is deterministic.

use super::app::{update, Action, App, Screen};
use super::keys::action_for;
use super::loader::{Request, Worker};
use super::view::render;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/v1")
}

fn fixture(name: &str) -> PathBuf {
    fixtures_dir().join(name)
}

struct Harness {
    app: App,
    worker: Worker,
    latest: Arc<AtomicU64>,
}

impl Harness {
    /// Opens `path`, shown as `title`, in a `w`×`h` terminal, and lets every read finish.
    fn open_path(path: &Path, title: &str, w: u16, h: u16) -> Harness {
        let (mut app, first) = App::new(path, title);
        assert!(update(&mut app, Action::Resize(w, h)).is_none());
        let latest = Arc::new(AtomicU64::new(0));
        let mut h = Harness {
            app,
            worker: Worker::new(latest.clone()),
            latest,
        };
        h.run(first);
        h
    }

    fn open(name: &str, w: u16, h: u16) -> Harness {
        Self::open_path(&fixture(name), name, w, h)
    }

    fn run(&mut self, req: Request) {
        self.latest.fetch_max(req.gen(), Ordering::SeqCst);
        let mut msgs = Vec::new();
        self.worker.handle(req, &mut |m| msgs.push(m));
        for m in msgs {
            if let Some(r) = update(&mut self.app, Action::Loaded(m)) {
                self.run(r);
            }
        }
        assert!(self.app.loading.is_none(), "a read did not finish");
    }

    fn act(&mut self, a: Action) -> &mut Self {
        if let Some(r) = update(&mut self.app, a) {
            self.run(r);
        }
        self
    }

    /// Presses keys: characters, or `<Enter>`, `<Esc>`, `<Down>`, `<PgDn>`, … in angle brackets.
    fn keys(&mut self, keys: &str) -> &mut Self {
        let mut rest = keys;
        while let Some(c) = rest.chars().next() {
            let (code, len) = if c == '<' && rest.contains('>') {
                let end = rest.find('>').unwrap_or(0);
                let name = &rest[1..end];
                let code = match name {
                    "Enter" => KeyCode::Enter,
                    "Esc" => KeyCode::Esc,
                    "Down" => KeyCode::Down,
                    "Up" => KeyCode::Up,
                    "PgDn" => KeyCode::PageDown,
                    "PgUp" => KeyCode::PageUp,
                    "BS" => KeyCode::Backspace,
                    other => panic!("unknown key <{other}>"),
                };
                (code, end + 1)
            } else {
                (KeyCode::Char(c), c.len_utf8())
            };
            rest = &rest[len..];
            if let Some(a) = action_for(&self.app, KeyEvent::new(code, KeyModifiers::NONE)) {
                self.act(a);
            }
        }
        self
    }

    fn screen(&self) -> String {
        let (w, h) = self.app.size;
        let mut t = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
        t.draw(|f| render(&self.app, f)).expect("draw");
        t.backend().to_string()
    }

    /// The (typed) keys of the entries on the page.
    fn keys_on_page(&self) -> Vec<String> {
        let e = self.app.entries.as_ref().expect("entries screen");
        e.page
            .as_ref()
            .map(|p| {
                p.rows
                    .iter()
                    .map(|r| crate::render::text(&e.desc.key_schema, &r.key))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn selected_key(&self) -> Option<String> {
        let e = self.app.entries.as_ref()?;
        e.selected().map(|r| crate::render::text(&e.desc.key_schema, &r.key))
    }
}

// ---- screens -------------------------------------------------------------------------

#[test]
fn screen_snapshot_list() {
    let h = Harness::open_path(&fixtures_dir(), "fixtures/v1", 80, 24);
    assert_eq!(h.app.screen, Screen::Snapshots);
    insta::assert_snapshot!(h.screen());
}

#[test]
fn screen_snapshot_list_broken_selected() {
    let mut h = Harness::open_path(&fixtures_dir(), "fixtures/v1", 100, 24);
    h.keys("/metadata-crc<Enter>");
    insta::assert_snapshot!(h.screen());
}

#[test]
fn screen_operators_80x24() {
    let h = Harness::open("savepoint-basic", 80, 24);
    insta::assert_snapshot!(h.screen());
}

#[test]
fn screen_operators_narrow_40x12() {
    let h = Harness::open("savepoint-basic", 40, 12);
    insta::assert_snapshot!(h.screen());
}

#[test]
fn screen_metadata_pane_narrow_40x12() {
    let mut h = Harness::open("savepoint-basic", 40, 12);
    h.keys("m");
    insta::assert_snapshot!(h.screen());
}

#[test]
fn screen_states() {
    let mut h = Harness::open("savepoint-basic", 80, 24);
    h.keys("<Enter>");
    assert_eq!(h.app.screen, Screen::States);
    insta::assert_snapshot!(h.screen());
}

#[test]
fn screen_entries_typed() {
    let mut h = Harness::open("savepoint-basic", 80, 24);
    h.keys("<Enter>jj<Enter>");
    assert_eq!(h.app.screen, Screen::Entries);
    insta::assert_snapshot!(h.screen());
}

#[test]
fn screen_entries_hex() {
    let mut h = Harness::open("savepoint-basic", 80, 24);
    h.keys("<Enter>jj<Enter>x");
    insta::assert_snapshot!(h.screen());
}

#[test]
fn screen_entries_list_state() {
    let mut h = Harness::open("savepoint-basic", 100, 30);
    h.keys("<Enter>j<Enter>");
    insta::assert_snapshot!(h.screen());
}

#[test]
fn screen_entries_narrow_40x12() {
    let mut h = Harness::open("savepoint-basic", 40, 12);
    h.keys("<Enter><Enter>");
    insta::assert_snapshot!(h.screen());
}

#[test]
fn screen_metadata_pane_wide() {
    let h = Harness::open("savepoint-basic", 120, 30);
    insta::assert_snapshot!(h.screen());
}

#[test]
fn screen_help_overlay() {
    let mut h = Harness::open("savepoint-basic", 80, 24);
    h.keys("?");
    assert!(h.app.help);
    let s = h.screen();
    for (k, _) in super::keys::HELP {
        assert!(s.contains(k), "help lacks {k}");
    }
    insta::assert_snapshot!(s);
    h.keys("x");
    assert!(!h.app.help && !h.app.hex, "a key closes the help and does nothing else");
}

#[test]
fn screen_help_overlay_narrow() {
    let mut h = Harness::open("savepoint-basic", 40, 12);
    h.keys("?");
    insta::assert_snapshot!(h.screen());
}

#[test]
fn screen_changelog_checkpoint() {
    let mut h = Harness::open("changelog-checkpoint", 80, 24);
    h.keys("<Enter>");
    insta::assert_snapshot!(h.screen());
    h.keys("<Enter><Enter>");
    insta::assert_snapshot!("screen_changelog_checkpoint_entries", h.screen());
}

#[cfg(feature = "rocksdb")]
#[test]
fn screen_native_savepoint() {
    let mut h = Harness::open("native-savepoint", 80, 24);
    insta::assert_snapshot!(h.screen());
    h.keys("<Enter><Enter>");
    insta::assert_snapshot!("screen_native_savepoint_entries", h.screen());
}

#[test]
fn screen_corrupted_metadata() {
    let h = Harness::open("corrupt-metadata-crc", 80, 24);
    let s = h.screen();
    assert!(s.contains("cannot open this snapshot"), "{s}");
    assert!(s.contains("crc32"), "{s}");
    insta::assert_snapshot!(s);
}

#[test]
fn screen_corrupted_data_file() {
    let mut h = Harness::open("corrupt-bitflip", 80, 24);
    h.keys("<Enter><Enter>");
    let s = h.screen();
    assert!(s.contains("cannot read this state"), "{s}");
    insta::assert_snapshot!(s);
    // Back out and on: the app keeps working.
    h.keys("<Esc><Esc>j<Enter><Enter>");
    assert!(h.app.entries.as_ref().is_some_and(|e| e.error.is_none()));
}

#[test]
fn screen_empty_savepoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn statekit_core::storage::Storage> =
        Arc::new(statekit_core::storage::LocalStorage::new(dir.path()));
    let writer = statekit_checkpoint::SnapshotWriter::new_savepoint(storage, "", "job", 1).expect("writer");
    let name = writer.dir().to_string();
    writer.finish().expect("finish");
    // The random directory name is not shown: the title is fixed.
    let h = Harness::open_path(&dir.path().join(name), "empty-savepoint", 80, 24);
    let s = h.screen();
    assert!(s.contains("holds no operators"), "{s}");
    insta::assert_snapshot!(s);
}

// ---- pure update: navigation, search, filter -----------------------------------------

#[test]
fn navigation_in_and_out() {
    let mut h = Harness::open_path(&fixtures_dir(), "fixtures/v1", 80, 24);
    let n = h.app.snapshots.len();
    assert!(n >= 10);
    h.keys("G");
    assert_eq!(h.app.sel[0], n - 1);
    h.keys("j");
    assert_eq!(h.app.sel[0], n - 1, "stays on the last row");
    h.keys("g");
    assert_eq!(h.app.sel[0], 0);
    h.keys("k");
    assert_eq!(h.app.sel[0], 0);
    h.keys("/savepoint-basic<Enter>");
    assert_eq!(h.app.snapshots[h.app.sel[0]].label, "savepoint-basic");
    h.keys("l");
    assert_eq!(h.app.screen, Screen::Operators);
    assert_eq!(h.app.operator().map(|o| o.uid.as_str()), Some("word-counter"));
    h.keys("j");
    assert_eq!(h.app.operator().map(|o| o.uid.as_str()), Some("enricher"));
    h.keys("<Enter><Enter>");
    assert_eq!(h.app.screen, Screen::Entries);
    assert_eq!(h.keys_on_page(), vec!["11", "33"]);
    h.keys("h");
    assert_eq!(h.app.screen, Screen::States);
    assert!(h.app.entries.is_none(), "leaving drops the page");
    h.keys("<Esc><Esc>");
    assert_eq!(h.app.screen, Screen::Snapshots);
    h.keys("<Esc>");
    assert_eq!(h.app.screen, Screen::Snapshots);
    h.keys("q");
    assert!(h.app.quit);
}

#[test]
fn entries_page_by_page() {
    // 80x12 without the pane: 7 rows a page; per-window has 32 entries.
    let mut h = Harness::open("savepoint-basic", 80, 12);
    assert_eq!(h.app.page_size(), 7);
    h.keys("<Enter>jj<Enter>");
    let e = |h: &Harness| h.app.entries.clone().expect("entries");
    assert_eq!(e(&h).page.expect("page").rows.len(), 7);
    assert_eq!(e(&h).first_index, Some(0));
    h.keys("<PgDn>");
    assert_eq!(e(&h).first_index, Some(7));
    assert_eq!(e(&h).sel, 0);
    // j past the last row loads the next page.
    h.keys("jjjjjjj");
    assert_eq!(e(&h).first_index, Some(14));
    assert_eq!(e(&h).sel, 0);
    // k before the first row loads the previous page, selecting its last row.
    h.keys("k");
    assert_eq!(e(&h).first_index, Some(7));
    assert_eq!(e(&h).sel, 6);
    h.keys("G");
    let last = e(&h);
    assert_eq!(last.first_index, Some(25));
    assert_eq!(last.sel, 6);
    assert_eq!(h.selected_key().as_deref(), Some("\"frank\""));
    h.keys("j");
    assert_eq!(e(&h).first_index, Some(25), "no page after the last");
    h.keys("<PgUp><PgUp><PgUp><PgUp>");
    assert_eq!(e(&h).first_index, Some(0));
    h.keys("<PgUp>");
    assert_eq!(e(&h).first_index, Some(0));
    assert_eq!(e(&h).sel, 0);
    // Every entry exactly once, forward.
    let mut seen = Vec::new();
    h.keys("g");
    loop {
        seen.extend(h.keys_on_page());
        let before = e(&h).first_index;
        h.keys("<PgDn>");
        if e(&h).first_index == before {
            break;
        }
    }
    assert_eq!(seen.len(), 32);
}

#[test]
fn search_exact_key_and_next_prev() {
    let mut h = Harness::open("savepoint-basic", 80, 12);
    h.keys("<Enter><Enter>");
    // count: grace, bob, carol, alice, dave, erin, heidi, frank (key-group order).
    h.keys("/heidi<Enter>");
    assert_eq!(h.selected_key().as_deref(), Some("\"heidi\""));
    assert!(h.app.status.as_deref().is_some_and(|s| s.contains("key group 6")));
    let s = h.screen();
    assert!(s.contains("heidi"), "{s}");
    // Substring search: keys containing "a", then n/N.
    h.keys("/a<Enter>");
    assert_eq!(
        h.selected_key().as_deref(),
        Some("\"frank\""),
        "next after heidi containing a"
    );
    h.keys("n");
    assert_eq!(h.selected_key().as_deref(), Some("\"grace\""), "wraps around");
    h.keys("n");
    assert_eq!(h.selected_key().as_deref(), Some("\"carol\""));
    h.keys("N");
    assert_eq!(h.selected_key().as_deref(), Some("\"grace\""));
    h.keys("N");
    assert_eq!(h.selected_key().as_deref(), Some("\"frank\""), "wraps backwards");
    h.keys("/nobody<Enter>");
    assert_eq!(h.app.status.as_deref(), Some("not found: nobody"));
    assert_eq!(h.selected_key().as_deref(), Some("\"frank\""), "stays");
}

#[test]
fn search_in_lists() {
    let mut h = Harness::open("savepoint-basic", 80, 24);
    h.keys("/enr<Enter>");
    assert_eq!(h.app.operator().map(|o| o.uid.as_str()), Some("enricher"));
    h.keys("n");
    assert_eq!(
        h.app.operator().map(|o| o.uid.as_str()),
        Some("enricher"),
        "the only match"
    );
    h.keys("/r<Enter>n");
    assert_eq!(h.app.operator().map(|o| o.uid.as_str()), Some("word-counter"));
}

#[test]
fn filter_lists_and_entries() {
    let mut h = Harness::open("savepoint-basic", 80, 24);
    h.keys("fenr<Enter>");
    assert_eq!(h.app.visible_operators().len(), 1);
    assert_eq!(h.app.operator().map(|o| o.uid.as_str()), Some("enricher"));
    assert!(h.screen().contains("[filter: enr]"));
    h.keys("f<BS><BS><BS><Enter>");
    assert_eq!(h.app.visible_operators().len(), 2);
    h.keys("<Enter>fer<Enter>");
    // States of word-counter whose name contains "er": none of count/recent/per-window/…
    let names: Vec<_> = h.app.visible_states();
    assert_eq!(names.len(), 2, "per-window and watermarks");
    h.keys("f<BS><BS><Enter><Enter>");
    // Entries of count whose line contains "value=5" (erin).
    h.keys("fvalue=5<Enter>");
    assert_eq!(h.keys_on_page(), vec!["\"erin\""]);
    assert!(h.screen().contains("[filter: value=5]"));
    // The prompt starts with the current filter.
    h.keys("fzzz<Enter>");
    assert_eq!(h.app.filters[3], "value=5zzz");
    assert!(h.keys_on_page().is_empty());
    assert!(h.screen().contains("no entries match the filter"));
    h.keys("f<BS><BS><BS><BS><BS><BS><BS><BS><BS><BS><Enter>");
    assert_eq!(h.keys_on_page().len(), 8);
    // Esc in a prompt cancels it.
    h.keys("fabc<Esc>");
    assert!(h.app.prompt.is_none());
    assert_eq!(h.app.filters[3], "");
}

#[test]
fn resize_repages_and_keeps_the_screen_usable() {
    let mut h = Harness::open("savepoint-basic", 80, 24);
    h.keys("<Enter><Enter>");
    let before = h.app.page_size();
    h.act(Action::Resize(40, 12));
    assert_ne!(h.app.page_size(), before);
    assert_eq!(h.keys_on_page().len(), h.app.page_size());
    h.act(Action::Resize(20, 5));
    let _ = h.screen();
    h.act(Action::Resize(200, 60));
    let _ = h.screen();
    assert_eq!(h.keys_on_page().len(), 8);
}

#[test]
fn stale_answers_are_ignored() {
    let path = fixture("savepoint-basic");
    let (mut app, first) = App::new(&path, "savepoint-basic");
    let latest = Arc::new(AtomicU64::new(0));
    let mut worker = Worker::new(latest.clone());
    let mut msgs = Vec::new();
    latest.store(first.gen(), Ordering::SeqCst);
    worker.handle(first, &mut |m| msgs.push(m));
    for m in msgs {
        update(&mut app, Action::Loaded(m));
    }
    update(&mut app, Action::Enter);
    let Some(req) = update(&mut app, Action::Enter) else {
        panic!("entering a state reads a page");
    };
    // The user backs out before the page arrives: its answer must not show.
    update(&mut app, Action::Back);
    let mut msgs = Vec::new();
    worker.handle(req, &mut |m| msgs.push(m));
    for m in msgs {
        update(&mut app, Action::Loaded(m));
    }
    assert_eq!(app.screen, Screen::States);
    assert!(app.entries.is_none());
    assert!(app.loading.is_none());
}
