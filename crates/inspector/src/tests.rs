//! Screen snapshots (`TestBackend` + insta) and pure `update` tests, on the golden fixtures.
//! The worker runs inline (no thread), so every screen is deterministic.

use super::app::{update, Action, App};
use super::draw::render;
use super::keys::action_for;
use super::screens::Screen;
use super::worker::{Request, Worker};
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
                    "C-u" => KeyCode::Null,
                    other => panic!("unknown key <{other}>"),
                };
                (code, end + 1)
            } else {
                (KeyCode::Char(c), c.len_utf8())
            };
            rest = &rest[len..];
            // `<C-u>`: Ctrl-U.
            let event = if code == KeyCode::Null {
                KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL)
            } else {
                KeyEvent::new(code, KeyModifiers::NONE)
            };
            if let Some(a) = action_for(&self.app, event) {
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
        let e = self.app.entries().expect("entries screen");
        e.page
            .as_ref()
            .map(|p| {
                p.rows
                    .iter()
                    .map(|r| statekit_core::text::text(&e.desc.key_schema, &r.key))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn selected_key(&self) -> Option<String> {
        let e = self.app.entries()?;
        e.selected()
            .map(|r| statekit_core::text::text(&e.desc.key_schema, &r.key))
    }
}

// ---- screens -------------------------------------------------------------------------

#[test]
fn screen_snapshot_list() {
    let h = Harness::open_path(&fixtures_dir(), "fixtures/v1", 80, 24);
    assert_eq!(h.app.screen(), Screen::Snapshots);
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
    assert_eq!(h.app.screen(), Screen::States);
    insta::assert_snapshot!(h.screen());
}

#[test]
fn screen_entries_typed() {
    let mut h = Harness::open("savepoint-basic", 80, 24);
    h.keys("<Enter>jj<Enter>");
    assert_eq!(h.app.screen(), Screen::Entries);
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
    let first = h.screen();
    assert!(first.contains("↓ more"), "{first}");
    insta::assert_snapshot!(first);
    // j / Down / PgDn scroll (they do not close it); every key shows on some scrolled screen.
    let mut seen = first.clone();
    let mut last = first;
    for _ in 0..100 {
        h.keys("j");
        assert!(h.app.help, "j scrolls, it does not close the help");
        let s = h.screen();
        if s == last {
            break;
        }
        seen.push_str(&s);
        last = s;
    }
    for (k, _) in super::keys::HELP {
        assert!(seen.contains(k), "scrolled help lacks {k}");
    }
    assert!(last.contains("↑ more") && !last.contains("↓ more"), "{last}");
    insta::assert_snapshot!("screen_help_overlay_narrow_end", last);
    // Past the end it stays; PgUp and k go back up; g (any other key) closes it.
    let end = h.app.help_scroll;
    h.keys("j<Down><PgDn>");
    assert_eq!(h.app.help_scroll, end);
    h.keys("<PgUp>");
    assert!(h.app.help_scroll < end);
    h.keys("<PgUp><PgUp><PgUp><PgUp><PgUp><PgUp><PgUp><PgUp>k");
    assert_eq!(h.app.help_scroll, 0);
    h.keys("g");
    assert!(!h.app.help);
    assert_eq!(h.app.sel(), 0, "the closing key does nothing else");
    // Opened again, it starts at the top.
    h.keys("?jj?");
    h.keys("?");
    assert_eq!(h.app.help_scroll, 0);
}

#[test]
fn help_fits_on_a_large_terminal() {
    let mut h = Harness::open("savepoint-basic", 80, 24);
    assert_eq!(super::draw::help_max_scroll((80, 24)), 0);
    h.keys("?j");
    assert!(h.app.help);
    assert_eq!(h.app.help_scroll, 0);
    assert!(!h.screen().contains("more"), "{}", h.screen());
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
    // One damaged block: its key group is skipped and named, the entries around it shown.
    let mut h = Harness::open("corrupt-bitflip", 130, 24);
    h.keys("<Enter><Enter>");
    let s = h.screen();
    assert!(s.contains("BROKEN, skipped"), "{s}");
    assert!(
        s.contains("key group 0: corrupt-bitflip/word-counter/0.keyed: offset 117"),
        "{s}"
    );
    assert!(s.contains("\"heidi\""), "the key groups after it are read: {s}");
    insta::assert_snapshot!(s);
    // Back out and on: the app keeps working.
    h.keys("<Esc><Esc>j<Enter><Enter>");
    assert!(h.app.entries().is_some_and(|e| e.error.is_none()));
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
    assert_eq!(h.app.sel(), n - 1);
    h.keys("j");
    assert_eq!(h.app.sel(), n - 1, "stays on the last row");
    h.keys("g");
    assert_eq!(h.app.sel(), 0);
    h.keys("k");
    assert_eq!(h.app.sel(), 0);
    h.keys("/savepoint-basic<Enter>");
    assert_eq!(h.app.snapshots[h.app.sel()].label, "savepoint-basic");
    h.keys("l");
    assert_eq!(h.app.screen(), Screen::Operators);
    assert_eq!(h.app.operator().map(|o| o.uid.as_str()), Some("word-counter"));
    h.keys("j");
    assert_eq!(h.app.operator().map(|o| o.uid.as_str()), Some("enricher"));
    h.keys("<Enter><Enter>");
    assert_eq!(h.app.screen(), Screen::Entries);
    assert_eq!(h.keys_on_page(), vec!["11", "33"]);
    h.keys("h");
    assert_eq!(h.app.screen(), Screen::States);
    assert!(h.app.entries().is_none(), "leaving drops the page");
    h.keys("<Esc><Esc>");
    assert_eq!(h.app.screen(), Screen::Snapshots);
    h.keys("<Esc>");
    assert_eq!(h.app.screen(), Screen::Snapshots);
    h.keys("q");
    assert!(h.app.quit);
}

#[test]
fn entries_page_by_page() {
    // 80x12 without the pane: 7 rows a page; per-window has 32 entries.
    let mut h = Harness::open("savepoint-basic", 80, 12);
    assert_eq!(h.app.page_size(), 7);
    h.keys("<Enter>jj<Enter>");
    let e = |h: &Harness| h.app.entries().cloned().expect("entries");
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
    // The prompt opens empty: what is typed replaces the filter in force.
    h.keys("f");
    assert_eq!(h.app.prompt.as_ref().map(|p| p.text.as_str()), Some(""));
    h.keys("zzz<Enter>");
    assert_eq!(h.app.filter(), "zzz");
    assert!(h.keys_on_page().is_empty());
    assert!(h.screen().contains("no entries match the filter"));
    // Ctrl-U clears what was typed; an empty filter turns it off.
    h.keys("fabc<C-u>");
    assert_eq!(h.app.prompt.as_ref().map(|p| p.text.as_str()), Some(""));
    h.keys("<Enter>");
    assert_eq!(h.app.filter(), "");
    assert_eq!(h.keys_on_page().len(), 8);
    // Esc in a prompt cancels it.
    h.keys("fabc<Esc>");
    assert!(h.app.prompt.is_none());
    assert_eq!(h.app.filter(), "");
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
    assert_eq!(app.screen(), Screen::States);
    assert!(app.entries().is_none());
    assert!(app.loading.is_none());
}

// ---- operator state ------------------------------------------------------------------

/// The typed lines of the operator state rows that pass the filter.
fn op_lines(h: &Harness) -> Vec<String> {
    let v = h.app.opstate().expect("operator state screen");
    v.list.visible.iter().map(|&i| v.rows()[i].line.clone()).collect()
}

fn op_selected(h: &Harness) -> String {
    h.app
        .opstate()
        .and_then(|v| v.selected())
        .map(|r| r.line.clone())
        .unwrap_or_default()
}

/// Copies directory `from` to `to` (recursively).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let dst = to.join(e.file_name());
        if e.file_type().expect("file type").is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).expect("copy");
        }
    }
}

#[test]
fn screen_opstate_list_80x24() {
    let mut h = Harness::open("savepoint-basic", 80, 24);
    h.keys("<Enter>/offsets<Enter><Enter>");
    assert_eq!(h.app.screen(), Screen::OpState);
    assert_eq!(
        op_lines(&h),
        [
            "subtask=0 element[0]=0",
            "subtask=0 element[1]=1",
            "subtask=0 element[2]=2",
            "subtask=1 element[0]=100",
            "subtask=1 element[1]=101",
            "subtask=1 element[2]=102",
        ],
        "as `statekit dump` prints them"
    );
    h.keys("jjjj");
    let s = h.screen();
    assert!(s.contains("value: 101") && s.contains("value hex: 0x"), "{s}");
    insta::assert_snapshot!(s);
}

#[test]
fn screen_opstate_union_40x12() {
    let mut h = Harness::open("savepoint-basic", 40, 12);
    h.keys("<Enter>/watermarks<Enter><Enter>");
    assert_eq!(h.app.screen(), Screen::OpState);
    // A union list: every subtask gets all elements.
    assert_eq!(op_lines(&h).len(), 4);
    insta::assert_snapshot!(h.screen());
}

#[test]
fn screen_opstate_broadcast_typed_and_hex() {
    let mut h = Harness::open("savepoint-basic", 80, 24);
    h.keys("<Enter>/rules<Enter><Enter>j");
    assert_eq!(
        op_lines(&h),
        [
            "subtask=0 key=\"min-length\" value=\"3\"",
            "subtask=0 key=\"stop-word\" value=\"the\"",
            "subtask=1 key=\"min-length\" value=\"3\"",
            "subtask=1 key=\"stop-word\" value=\"the\"",
        ]
    );
    let s = h.screen();
    assert!(s.contains("key: \"stop-word\"") && s.contains("key hex: 0x"), "{s}");
    insta::assert_snapshot!(s);
    h.keys("x");
    insta::assert_snapshot!("screen_opstate_broadcast_hex", h.screen());
}

#[test]
fn opstate_navigation_search_filter() {
    // 80x12: no pane, 7 rows of the table at once.
    let mut h = Harness::open("savepoint-basic", 80, 12);
    h.keys("<Enter>/offsets<Enter><Enter>");
    let sel = |h: &Harness| h.app.opstate().map_or(0, |v| v.list.sel);
    assert_eq!(sel(&h), 0);
    h.keys("k");
    assert_eq!(sel(&h), 0);
    h.keys("jj");
    assert_eq!(op_selected(&h), "subtask=0 element[2]=2");
    h.keys("G");
    assert_eq!(op_selected(&h), "subtask=1 element[2]=102");
    h.keys("j");
    assert_eq!(sel(&h), 5, "stays on the last row");
    h.keys("g");
    assert_eq!(sel(&h), 0);
    h.keys("<PgDn>");
    assert_eq!(sel(&h), 5, "a page down, clamped");
    h.keys("<PgUp>");
    assert_eq!(sel(&h), 0);
    // Search the typed lines, n / N wrapping.
    h.keys("/=10<Enter>");
    assert_eq!(op_selected(&h), "subtask=1 element[0]=100");
    h.keys("n");
    assert_eq!(op_selected(&h), "subtask=1 element[1]=101");
    h.keys("nn");
    assert_eq!(op_selected(&h), "subtask=1 element[0]=100", "wraps around");
    h.keys("N");
    assert_eq!(op_selected(&h), "subtask=1 element[2]=102", "wraps backwards");
    h.keys("/nothing<Enter>");
    assert_eq!(h.app.status.as_deref(), Some("not found: nothing"));
    assert_eq!(op_selected(&h), "subtask=1 element[2]=102", "stays");
    // Filter.
    h.keys("fsubtask=1<Enter>");
    assert_eq!(op_lines(&h).len(), 3);
    assert_eq!(sel(&h), 0);
    assert!(h.screen().contains("[filter: subtask=1]"));
    h.keys("fzzz<Enter>");
    assert!(op_lines(&h).is_empty());
    assert!(h.screen().contains("no elements match the filter"));
    h.keys("f<BS><BS><BS><BS><BS><BS><BS><BS><BS><BS><BS><BS><Enter>");
    assert_eq!(op_lines(&h).len(), 6);
    // Esc: back to the states, the same row selected; h too.
    h.keys("<Esc>");
    assert_eq!(h.app.screen(), Screen::States);
    assert!(h.app.opstate().is_none());
    h.keys("<Enter>");
    assert_eq!(h.app.screen(), Screen::OpState);
    assert_eq!(h.app.filter(), "", "a new screen starts unfiltered");
    h.keys("h");
    assert_eq!(h.app.screen(), Screen::States);
    // An empty list state (enricher's `pending`, three subtasks).
    h.keys("<Esc>j<Enter>/pending<Enter><Enter>");
    assert_eq!(h.app.screen(), Screen::OpState);
    assert!(h.screen().contains("no elements in 3 subtasks"), "{}", h.screen());
}

#[test]
fn opstate_rows_beyond_the_limit_are_counted_not_kept() {
    let mut h = Harness::open("savepoint-basic", 80, 24);
    h.app.op_keep = 4;
    h.keys("<Enter>/offsets<Enter><Enter>");
    let v = h.app.opstate().expect("operator state screen");
    assert_eq!(v.rows().len(), 4);
    assert_eq!(v.read.as_ref().map(|r| r.not_shown), Some(2));
    let s = h.screen();
    assert!(s.contains("… 2 more elements not shown (use statekit dump)"), "{s}");
    h.act(Action::Resize(40, 12));
    assert!(h.screen().contains("… 2 more not shown"), "{}", h.screen());
}

#[test]
fn screen_opstate_corrupted_file() {
    // No fixture has a damaged operator file: a copy of savepoint-basic with one bit
    // flipped in the middle of word-counter/0.operator.
    let dir = tempfile::tempdir().expect("tempdir");
    let sp = dir.path().join("corrupt-operator");
    copy_dir(&fixture("savepoint-basic"), &sp);
    let file = sp.join("word-counter/0.operator");
    let mut bytes = std::fs::read(&file).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&file, bytes).expect("write");
    let mut h = Harness::open_path(&sp, "corrupt-operator", 80, 24);
    h.keys("<Enter>/rules<Enter><Enter>");
    let s = h.screen();
    assert!(s.contains("cannot read this operator state"), "{s}");
    assert!(
        s.contains("corrupt-operator/word-counter/0.operator"),
        "names the file: {s}"
    );
    assert!(!s.contains(&dir.path().display().to_string()), "no temp paths: {s}");
    insta::assert_snapshot!(s);
    // Back out and on: the app keeps working (keyed state is in other files).
    h.keys("<Esc>g<Enter>");
    assert!(h.app.entries().is_some_and(|e| e.error.is_none()));
}

#[test]
fn opstate_is_read_on_the_worker_with_progress_and_cancel() {
    let path = fixture("savepoint-basic");
    let (mut app, first) = App::new(&path, "savepoint-basic");
    let latest = Arc::new(AtomicU64::new(0));
    let mut worker = Worker::new(latest.clone());
    latest.store(first.gen(), Ordering::SeqCst);
    let mut msgs = Vec::new();
    worker.handle(first, &mut |m| msgs.push(m));
    for m in msgs {
        update(&mut app, Action::Loaded(m));
    }
    update(&mut app, Action::Enter);
    let op_state = app
        .visible_states()
        .iter()
        .position(|s| matches!(s, super::screens::StateItem::Operator(_)))
        .expect("an operator state");
    app.set_sel(op_state);
    // Enter only asks: nothing is read on the UI side.
    let Some(req) = update(&mut app, Action::Enter) else {
        panic!("entering an operator state asks the worker");
    };
    assert!(
        matches!(req, Request::OpState { ref state, .. } if state == "offsets"),
        "{req:?}"
    );
    assert_eq!(app.screen(), Screen::OpState);
    assert!(app.loading.is_some());
    assert!(app.opstate().is_some_and(|v| v.read.is_none()));
    let mut t = Terminal::new(TestBackend::new(80, 24)).expect("test terminal");
    t.draw(|f| render(&app, f)).expect("draw");
    assert!(t.backend().to_string().contains("reading operator state…"));
    // Progress counts subtasks.
    latest.store(req.gen(), Ordering::SeqCst);
    let mut msgs = Vec::new();
    worker.handle(req.clone(), &mut |m| msgs.push(m));
    let progress = msgs
        .iter()
        .find(|m| matches!(m, super::worker::Msg::Progress { .. }))
        .cloned()
        .expect("progress");
    update(&mut app, Action::Loaded(progress));
    t.draw(|f| render(&app, f)).expect("draw");
    assert!(t.backend().to_string().contains("(0/2 subtasks)"), "{}", t.backend());
    // Esc before the answer: it is ignored, and the worker is told at once.
    let Some(cancel) = update(&mut app, Action::Back) else {
        panic!("leaving a read in progress cancels it");
    };
    assert!(matches!(cancel, Request::Cancel { gen } if gen > req.gen()));
    for m in msgs {
        update(&mut app, Action::Loaded(m));
    }
    assert_eq!(app.screen(), Screen::States);
    assert!(app.opstate().is_none() && app.loading.is_none());
    // A superseded read sends nothing.
    latest.store(cancel.gen(), Ordering::SeqCst);
    let mut msgs = Vec::new();
    worker.handle(req, &mut |m| msgs.push(m));
    assert!(msgs.is_empty(), "{msgs:?}");
}

// ---- the diff view -------------------------------------------------------------------

mod diff_view {
    use super::*;
    use statekit_checkpoint::SnapshotWriter;
    use statekit_core::keygroup::subtask_for_key_group;
    use statekit_core::storage::{LocalStorage, Storage};
    use statekit_core::{
        encode_value, key_group_for_key, BackendConfig, KeyedStateBackend, OperatorStateData, OperatorStateDescriptor,
        OperatorStateMode, OperatorStateSnapshot, StateDescriptor, StateFunctions, TypeSchema, Value,
    };
    use statekit_hashmap::HashMapBackend;
    use std::collections::BTreeMap;

    const MAX_P: u32 = 8;

    fn i64v(x: i64) -> Vec<u8> {
        encode_value(&TypeSchema::I64, &Value::I64(x)).expect("i64")
    }

    fn strv(s: &str) -> Vec<u8> {
        encode_value(&TypeSchema::Utf8, &Value::Str(s.to_string())).expect("utf8")
    }

    /// A small job's state: operator `counter` (keyed), `source` (operator state), and
    /// optionally `sink`.
    #[derive(Clone)]
    struct Model {
        counter_parallelism: u32,
        count: BTreeMap<&'static str, i64>,
        recent: BTreeMap<&'static str, Vec<i64>>,
        next: BTreeMap<&'static str, BTreeMap<&'static str, i64>>,
        /// Name of the extra value state (`legacy` or `fresh`).
        extra: &'static str,
        offsets: Vec<i64>,
        sink: bool,
    }

    fn model_a() -> Model {
        Model {
            counter_parallelism: 2,
            count: [("alpha", 1), ("bravo", 2), ("charlie", 3)].into_iter().collect(),
            recent: [("alpha", vec![1, 2])].into_iter().collect(),
            next: [("alpha", [("x", 1), ("y", 2)].into_iter().collect())]
                .into_iter()
                .collect(),
            extra: "legacy",
            offsets: vec![10, 20],
            sink: false,
        }
    }

    fn model_b() -> Model {
        Model {
            counter_parallelism: 3,
            count: [("alpha", 1), ("bravo", 5), ("delta", 4)].into_iter().collect(),
            recent: [("alpha", vec![1, 2, 3])].into_iter().collect(),
            next: [("alpha", [("x", 1), ("y", 3), ("z", 4)].into_iter().collect())]
                .into_iter()
                .collect(),
            extra: "fresh",
            offsets: vec![10, 30],
            sink: true,
        }
    }

    /// Writes `m` as a canonical savepoint at `dir/name` (a fixed name: nothing random on screen).
    fn write(dir: &Path, name: &str, m: &Model) -> PathBuf {
        let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir));
        let writer = SnapshotWriter::new_savepoint(storage, "", "0123456789abcdef0123456789abcdef", 1).expect("writer");
        writer.register_operator("source", 1, MAX_P).expect("register source");
        let desc = OperatorStateDescriptor {
            name: "offsets".into(),
            mode: OperatorStateMode::List,
            value_schema: TypeSchema::I64,
            key_schema: None,
        };
        let snap = OperatorStateSnapshot {
            states: vec![(
                desc,
                OperatorStateData::List(m.offsets.iter().map(|&o| i64v(o)).collect()),
            )],
        };
        writer
            .write_subtask("source", 0, None, Some(&snap), false)
            .expect("write source");
        let p = m.counter_parallelism;
        writer.register_operator("counter", p, MAX_P).expect("register counter");
        let descs = [
            StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64),
            StateDescriptor::list("recent", TypeSchema::Utf8, TypeSchema::I64),
            StateDescriptor::map("next", TypeSchema::Utf8, TypeSchema::Utf8, TypeSchema::I64),
            StateDescriptor::value(m.extra, TypeSchema::Utf8, TypeSchema::I64),
        ];
        let owner = |k: &str| subtask_for_key_group(MAX_P, p, key_group_for_key(&strv(k), MAX_P)) as usize;
        let mut backends: Vec<HashMapBackend> = (0..p)
            .map(|i| HashMapBackend::new(BackendConfig::for_subtask(MAX_P, p, i).expect("config")).expect("backend"))
            .collect();
        let handles: Vec<Vec<_>> = backends
            .iter_mut()
            .map(|b| {
                descs
                    .iter()
                    .map(|d| b.register(d.clone(), StateFunctions::None).expect("register state"))
                    .collect()
            })
            .collect();
        for (k, v) in &m.count {
            let o = owner(k);
            backends[o].put(handles[o][0], &strv(k), &[], &i64v(*v)).expect("put");
            backends[o]
                .put(handles[o][3], &strv(k), &[], &i64v(0))
                .expect("put extra");
        }
        for (k, l) in &m.recent {
            let o = owner(k);
            let els: Vec<Vec<u8>> = l.iter().map(|&x| i64v(x)).collect();
            let refs: Vec<&[u8]> = els.iter().map(|e| e.as_slice()).collect();
            backends[o]
                .list_update(handles[o][1], &strv(k), &[], &refs)
                .expect("list");
        }
        for (k, map) in &m.next {
            let o = owner(k);
            for (uk, v) in map {
                backends[o]
                    .map_put(handles[o][2], &strv(k), &[], &strv(uk), &i64v(*v))
                    .expect("map");
            }
        }
        for (i, b) in backends.iter_mut().enumerate() {
            let view = b.snapshot(1).expect("snapshot");
            writer
                .write_subtask("counter", i as u32, Some(view.as_ref()), None, false)
                .expect("write counter");
        }
        if m.sink {
            writer.register_operator("sink", 1, MAX_P).expect("register sink");
            writer.write_subtask("sink", 0, None, None, false).expect("write sink");
        }
        let random = writer.dir().to_string();
        writer.finish().expect("finish");
        let path = dir.join(name);
        std::fs::rename(dir.join(random), &path).expect("rename the savepoint");
        path
    }

    /// Two savepoints `old` and `new` in a temp dir, with known differences.
    fn pair() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = write(dir.path(), "old", &model_a());
        let b = write(dir.path(), "new", &model_b());
        (dir, a, b)
    }

    fn open_diff(a: &Path, a_label: &str, b: &Path, b_label: &str, w: u16, h: u16) -> Harness {
        let (mut app, first) = App::new_diff(a, a_label, b, b_label);
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

    /// The selected row's line (typed).
    fn selected_line(h: &Harness) -> String {
        h.app
            .diff()
            .and_then(|d| d.selected())
            .map(|r| r.line.clone())
            .unwrap_or_default()
    }

    fn lines(h: &Harness) -> Vec<String> {
        let d = h.app.diff().expect("diff view");
        d.list.visible.iter().map(|&i| d.rows[i].line.clone()).collect()
    }

    #[test]
    fn known_changes_rows_and_summary() {
        let (_dir, a, b) = pair();
        let h = open_diff(&a, "old", &b, "new", 120, 40);
        assert_eq!(h.app.screen(), Screen::Diff);
        let got = lines(&h);
        // Every known change is there, typed, with its marker.
        for needle in [
            "= counter   parallelism 2 -> 3 (layout only)",
            "- counter legacy  removed:",
            "+ counter fresh  added:",
            "~ counter count \"bravo\" 2 -> 5",
            "- counter count \"charlie\" 3",
            "+ counter count \"delta\" 4",
            "~ counter recent \"alpha\" [1, 2] -> [1, 2, 3]",
            "~ counter next \"alpha\" user_key=\"y\" 2 -> 3",
            "+ counter next \"alpha\" user_key=\"z\" 4",
            "~ source offsets  1 elements removed, 1 added",
            "- source offsets element 20",
            "+ source offsets element 30",
            "+ sink   operator added",
        ] {
            assert!(
                got.iter().any(|l| l.starts_with(needle)),
                "no row {needle:?} in {got:#?}"
            );
        }
        // Grouped: operator → state → key (all rows of a state together, its record first).
        let state_of = |l: &String| l.split(' ').take(3).collect::<Vec<_>>().join(" ");
        let mut seen: Vec<String> = Vec::new();
        for l in &got {
            let s = state_of(l);
            if seen.last() != Some(&s) {
                assert!(!seen.contains(&s), "rows of {s:?} are not together: {got:#?}");
                seen.push(s);
            }
        }
        let end = h.app.diff().and_then(|d| d.end.clone()).expect("ended");
        let end = end.expect("no error");
        assert_eq!(end.summary.layout, 1);
        assert_eq!(end.not_shown, 0);
        let s = h.screen();
        assert!(s.contains("differences: 1 operator (+1)"), "{s}");
        assert!(s.contains("1 rescaled operator (layout only)"), "{s}");
    }

    #[test]
    fn screen_diff_known_changes_80x24() {
        let (_dir, a, b) = pair();
        let mut h = open_diff(&a, "old", &b, "new", 80, 24);
        // The first key row of `count`, in the pane.
        h.keys("/bravo\" 2<Enter>");
        assert!(
            selected_line(&h).starts_with("~ counter count \"bravo\""),
            "{}",
            selected_line(&h)
        );
        let s = h.screen();
        assert!(s.contains("old: 2") && s.contains("new: 5"), "{s}");
        insta::assert_snapshot!(s);
    }

    #[test]
    fn screen_diff_known_changes_wide() {
        let (_dir, a, b) = pair();
        let mut h = open_diff(&a, "old", &b, "new", 120, 30);
        h.keys("/user_key=\"y\"<Enter>");
        let s = h.screen();
        assert!(s.contains("user key: \"y\""), "{s}");
        insta::assert_snapshot!(s);
        // Hex: the same rows, bytes as hex.
        h.keys("x");
        let s = h.screen();
        assert!(s.contains("0x"), "{s}");
        insta::assert_snapshot!("screen_diff_known_changes_wide_hex", s);
    }

    #[test]
    fn screen_diff_narrow_40x12() {
        let (_dir, a, b) = pair();
        let h = open_diff(&a, "old", &b, "new", 40, 12);
        insta::assert_snapshot!(h.screen());
    }

    #[test]
    fn screen_diff_identical() {
        let a = fixture("savepoint-basic");
        let h = open_diff(&a, "savepoint-basic", &a, "savepoint-basic", 80, 24);
        let s = h.screen();
        assert!(s.contains("no differences"), "{s}");
        assert!(h.app.diff().is_some_and(|d| d.rows.is_empty()));
        insta::assert_snapshot!(s);
    }

    #[test]
    fn layout_only_is_not_a_difference() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = write(dir.path(), "p2", &model_a());
        let mut m = model_a();
        m.counter_parallelism = 3;
        let b = write(dir.path(), "p3", &m);
        let h = open_diff(&a, "p2", &b, "p3", 80, 24);
        assert_eq!(lines(&h).len(), 1);
        let s = h.screen();
        assert!(s.contains("no differences") && s.contains("1 rescaled operator"), "{s}");
        let end = h
            .app
            .diff()
            .and_then(|d| d.end.clone())
            .expect("ended")
            .expect("no error");
        assert!(end.summary.identical() && end.summary.layout == 1);
        assert!(s.contains("= counter"), "{s}");
    }

    #[test]
    fn screen_diff_corrupted_side() {
        let h = open_diff(
            &fixture("savepoint-basic"),
            "savepoint-basic",
            &fixture("corrupt-bitflip"),
            "corrupt-bitflip",
            80,
            24,
        );
        let s = h.screen();
        assert!(s.contains("cannot compare these snapshots"), "{s}");
        assert!(
            s.contains("corrupt-bitflip/word-counter/0.keyed"),
            "names the file: {s}"
        );
        assert!(!s.contains("fixtures"), "no paths: {s}");
        insta::assert_snapshot!(s);
    }

    #[test]
    fn unreadable_metadata_is_an_error_on_screen() {
        let h = open_diff(
            &fixture("corrupt-metadata-crc"),
            "corrupt-metadata-crc",
            &fixture("savepoint-basic"),
            "savepoint-basic",
            80,
            24,
        );
        let s = h.screen();
        assert!(
            s.contains("cannot compare") && s.contains("corrupt-metadata-crc"),
            "{s}"
        );
    }

    #[test]
    fn navigation_search_filter_in_the_diff_list() {
        let (_dir, a, b) = pair();
        // 80x12: no pane; the list shows a few rows, so paging and scrolling matter.
        let mut h = open_diff(&a, "old", &b, "new", 80, 12);
        let n = lines(&h).len();
        assert!(n >= 13, "{n} rows");
        let sel = |h: &Harness| h.app.diff().map_or(0, |d| d.list.sel);
        let top = |h: &Harness| h.app.diff().map_or(0, |d| d.list.top);
        assert_eq!(sel(&h), 0);
        h.keys("k");
        assert_eq!(sel(&h), 0);
        h.keys("jj");
        assert_eq!(sel(&h), 2);
        h.keys("G");
        assert_eq!(sel(&h), n - 1);
        assert!(top(&h) > 0, "scrolled to the last row");
        assert!(h.screen().contains(&format!("of {n}")));
        h.keys("j");
        assert_eq!(sel(&h), n - 1);
        h.keys("g");
        assert_eq!((sel(&h), top(&h)), (0, 0));
        let page = h.app.page();
        h.keys("<PgDn>");
        assert_eq!(sel(&h), page);
        h.keys("<PgUp>");
        assert_eq!(sel(&h), 0);
        // Search, n / N (wrapping).
        h.keys("/counter count<Enter>");
        assert!(selected_line(&h).starts_with("~ counter count") || selected_line(&h).contains("counter count"));
        let first = sel(&h);
        h.keys("n");
        assert!(sel(&h) > first && selected_line(&h).contains("counter count"));
        h.keys("N");
        assert_eq!(sel(&h), first);
        h.keys("/nothing-like-this<Enter>");
        assert_eq!(h.app.status.as_deref(), Some("not found: nothing-like-this"));
        // Filter.
        h.keys("fsource<Enter>");
        assert_eq!(lines(&h).len(), 3);
        assert!(lines(&h).iter().all(|l| l.contains("source")));
        assert!(h.screen().contains("[filter: source]"));
        h.keys("fzzz<Enter>");
        assert!(lines(&h).is_empty());
        assert!(h.screen().contains("no differences match the filter"));
        h.keys("f<BS><BS><BS><BS><BS><BS><BS><BS><BS><Enter>");
        assert_eq!(lines(&h).len(), n);
        // Opened with --diff: Esc has nowhere to go, q quits.
        h.keys("<Esc>");
        assert_eq!(h.app.screen(), Screen::Diff);
        h.keys("q");
        assert!(h.app.quit);
    }

    #[test]
    fn rows_beyond_the_limit_are_counted_not_kept() {
        let (_dir, a, b) = pair();
        let (mut app, _) = App::new_diff(&a, "old", &b, "new");
        app.diff_keep = 4;
        let _ = update(&mut app, Action::Resize(80, 24));
        // The request again, with the smaller limit.
        let sides = app.diff().map(|d| d.sides.clone()).expect("diff view");
        let gen = app.gen;
        let req = Request::Diff { gen, sides, keep: 4 };
        let latest = Arc::new(AtomicU64::new(0));
        let mut h = Harness {
            app,
            worker: Worker::new(latest.clone()),
            latest,
        };
        h.run(req);
        let d = h.app.diff().expect("diff view");
        assert_eq!(d.rows.len(), 4);
        let end = d.end.clone().expect("ended").expect("no error");
        assert!(end.not_shown > 0);
        let s = h.screen();
        assert!(
            s.contains(&format!(
                "… {} more differences not shown (use statekit diff)",
                end.not_shown
            )),
            "{s}"
        );
    }

    #[test]
    fn d_marks_the_base_then_diffs() {
        let mut h = Harness::open_path(&fixtures_dir(), "fixtures/v1", 80, 24);
        h.keys("/savepoint-basic<Enter>d");
        let base = h.app.sel();
        assert_eq!(h.app.diff_base, Some(base));
        assert!(h.screen().contains("[base] savepoint-basic"));
        assert!(h
            .app
            .status
            .as_deref()
            .is_some_and(|s| s.starts_with("base: savepoint-basic")));
        // d again on the base unmarks; Esc unmarks too.
        h.keys("d");
        assert_eq!(h.app.diff_base, None);
        h.keys("d<Esc>");
        assert_eq!(h.app.diff_base, None);
        assert_eq!(h.app.screen(), Screen::Snapshots);
        // d on elsewhere than the snapshot list: a hint, nothing marked.
        // Mark, move to another, d: the diff of base → selected.
        h.keys("d/corrupt-truncated<Enter>d");
        assert_eq!(h.app.screen(), Screen::Diff);
        let d = h.app.diff().expect("diff view");
        assert_eq!(d.sides[0].label, "savepoint-basic");
        assert_eq!(d.sides[1].label, "corrupt-truncated");
        let s = h.screen();
        assert!(s.contains("diff savepoint-basic → corrupt-truncated"), "{s}");
        assert!(
            s.contains("cannot compare") && s.contains("corrupt-truncated/word-counter/1.keyed"),
            "{s}"
        );
        // Esc: back to the list, the base still marked.
        h.keys("<Esc>");
        assert_eq!(h.app.screen(), Screen::Snapshots);
        assert!(h.app.diff().is_none());
        assert_eq!(h.app.diff_base, Some(base));
        h.keys("<Esc>");
        assert_eq!(h.app.diff_base, None);
        // Elsewhere, d only explains.
        h.keys("/savepoint-basic<Enter><Enter>d");
        assert_eq!(h.app.screen(), Screen::Operators);
        assert!(h.app.status.as_deref().is_some_and(|s| s.contains("snapshot list")));
    }

    #[test]
    fn screen_diff_from_the_snapshot_list() {
        // Two good snapshots of one directory: savepoint-basic and the changelog checkpoint.
        let mut h = Harness::open_path(&fixtures_dir(), "fixtures/v1", 80, 24);
        h.keys("/savepoint-basic<Enter>d");
        insta::assert_snapshot!("screen_diff_base_marked", h.screen());
        h.keys("/changelog-checkpoint<Enter>d");
        let s = h.screen();
        assert!(s.contains("differences:"), "{s}");
        insta::assert_snapshot!(s);
    }

    #[test]
    fn a_newer_request_cancels_the_diff() {
        let (_dir, a, b) = pair();
        let (mut app, req) = App::new_diff(&a, "old", &b, "new");
        let latest = Arc::new(AtomicU64::new(0));
        let mut worker = Worker::new(latest.clone());
        // A newer request was sent before the worker got to the diff: no answer at all.
        latest.store(req.gen() + 1, Ordering::SeqCst);
        let mut msgs = Vec::new();
        worker.handle(req, &mut |m| msgs.push(m));
        assert!(msgs.is_empty(), "{msgs:?}");
        // Cancelled midway (after the first progress report): no end, no rows after it.
        let (_, req) = App::new_diff(&a, "old", &b, "new");
        let gen = req.gen();
        latest.store(gen, Ordering::SeqCst);
        let mut msgs = Vec::new();
        let l2 = latest.clone();
        worker.handle(req, &mut |m| {
            if matches!(m, super::super::worker::Msg::Progress { ref what, .. } if what == "comparing") {
                l2.store(gen + 1, Ordering::SeqCst);
            }
            msgs.push(m)
        });
        assert!(
            !msgs.iter().any(|m| matches!(m, super::super::worker::Msg::Diff { .. })),
            "{msgs:?}"
        );
        for m in msgs {
            update(&mut app, Action::Loaded(m));
        }
    }

    #[test]
    fn leaving_a_running_diff_cancels_it_at_once() {
        let mut h = Harness::open_path(&fixtures_dir(), "fixtures/v1", 80, 24);
        h.keys("/savepoint-basic<Enter>d/changelog-checkpoint<Enter>");
        // d on the second: the comparison is asked for, and not run yet.
        let Some(diff) = update(&mut h.app, Action::MarkDiff) else {
            panic!("d on a second snapshot asks for the diff");
        };
        assert!(matches!(diff, Request::Diff { .. }));
        assert_eq!(h.app.screen(), Screen::Diff);
        assert!(h.app.loading.is_some());
        // Esc: back to the list, and a Cancel of a newer generation, with nothing to do.
        let before = h.app.gen;
        let Some(cancel) = update(&mut h.app, Action::Back) else {
            panic!("leaving a running diff cancels it");
        };
        assert_eq!(cancel, Request::Cancel { gen: before + 1 });
        assert_eq!(h.app.gen, before + 1, "the generation moves");
        assert!(cancel.gen() > diff.gen());
        assert_eq!(h.app.screen(), Screen::Snapshots);
        assert!(h.app.loading.is_none() && h.app.diff().is_none());
        // The loader raises its latest generation without queueing work, so the walk
        // stops at its next check instead of at the next request.
        let loader = super::super::worker::Loader::spawn().expect("loader");
        loader.send(cancel.clone());
        assert_eq!(loader.latest(), cancel.gen());
        // The worker, seeing that generation, answers the diff with nothing.
        h.latest.fetch_max(cancel.gen(), Ordering::SeqCst);
        let mut msgs = Vec::new();
        h.worker.handle(diff, &mut |m| msgs.push(m));
        assert!(msgs.is_empty(), "{msgs:?}");
        // Nothing running: Esc has nothing to cancel.
        h.keys("d");
        assert!(update(&mut h.app, Action::Back).is_none());
    }

    #[test]
    fn cells_match_the_cli_lines() {
        let (_dir, a, b) = pair();
        let ra = crate::open::open_side(&a, &Default::default()).expect("a");
        let rb = crate::open::open_side(&b, &Default::default()).expect("b");
        let mut n = 0;
        statekit_snapshot::diff::diff_snapshots(
            statekit_snapshot::diff::Side {
                label: "a",
                snapshot: &ra,
            },
            statekit_snapshot::diff::Side {
                label: "b",
                snapshot: &rb,
            },
            &Default::default(),
            &mut |d| {
                let text = statekit_snapshot::diff::text::difference_text(&d);
                assert_eq!(
                    statekit_snapshot::diff::text::difference_parts(&d),
                    text.len(),
                    "{text:?}"
                );
                for (i, line) in text.iter().enumerate() {
                    let c = statekit_snapshot::diff::text::difference_cell(&d, i, false).expect("cell");
                    // Same values as the CLI prints.
                    let ok = line.contains(&c.what)
                        || c.what.starts_with("operator ")
                        || c.what.starts_with("added: ")
                        || c.what.starts_with("removed: ");
                    assert!(ok, "{line:?} vs {c:?}");
                    assert_eq!(
                        line.trim_start().chars().next(),
                        Some(if c.sign == '=' { '~' } else { c.sign })
                    );
                    n += 1;
                }
                std::ops::ControlFlow::Continue(())
            },
        )
        .expect("diff");
        assert!(n > 10);
    }
}

/// A real Apache Flink savepoint (`fixtures/flink/`), browsed like statekit's own: the
/// operators by id, an operator's keyed states (read from the heads of its state streams),
/// and the entries of the word count, the non-ASCII keys among them.
#[test]
fn screen_flink_savepoint() {
    let sp = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/flink/flink-1.20.5/savepoint-hashmap-canonical/savepoint");
    let mut h = Harness::open_path(&sp, "flink-1.20.5/savepoint-hashmap-canonical", 100, 30);
    insta::assert_snapshot!("screen_flink_savepoint", h.screen());
    // The word count (operator fdae8dad…), its one state, its entries.
    h.keys("jj<Enter>");
    insta::assert_snapshot!("screen_flink_savepoint_states", h.screen());
    h.keys("<Enter>");
    assert_eq!(h.app.screen(), Screen::Entries);
    let keys = h.keys_on_page();
    assert!(keys.len() > 10, "{keys:?}");
    insta::assert_snapshot!("screen_flink_savepoint_entries", h.screen());
    // Every key is there, non-ASCII ones included: search finds them.
    h.keys("/grüße<Enter>");
    assert_eq!(h.selected_key().as_deref(), Some("\"grüße\""), "{}", h.screen());
}

/// The snapshot list says `not verified` until the background verification of each snapshot
/// reports, then `ok` or `BROKEN` — the words `statekit ls --verify` uses; a single snapshot
/// opened says the same in its metadata pane.
#[test]
fn snapshots_are_verified_in_the_background() {
    let mut h = crate::headless::Headless::open(&fixtures_dir(), None, (120, 30)).expect("open");
    h.wait_verified(std::time::Duration::from_secs(120)).expect("verified");
    let status = |label: &str| {
        h.app
            .snapshots
            .iter()
            .find(|s| s.label == label)
            .map(|s| s.status())
            .unwrap_or("missing")
    };
    assert_eq!(status("savepoint-basic"), "ok");
    assert_eq!(status("native-savepoint"), "ok");
    assert_eq!(status("corrupt-bitflip"), "BROKEN");
    assert_eq!(status("corrupt-native-sst"), "BROKEN");
    assert_eq!(status("corrupt-metadata-crc"), "BROKEN");
    let screen = h.draw().expect("draw");
    assert!(screen.contains("BROKEN") && screen.contains(" ok "), "{screen}");
    assert!(!screen.contains("not verified"), "{screen}");

    let mut one = crate::headless::Headless::open(&fixture("corrupt-bitflip"), None, (120, 30)).expect("open");
    one.wait_verified(std::time::Duration::from_secs(60)).expect("verified");
    assert_eq!(one.app.snapshot_status(), "BROKEN");
    let screen = one.draw().expect("draw");
    assert!(screen.contains("snapshot: BROKEN"), "{screen}");
}
