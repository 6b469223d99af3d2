//! The entry cursor against a small savepoint written here: walks, pages (forwards, from any
//! position, backwards), filters, searches, and a damaged key group reported while the walk
//! goes on.

use statekit_checkpoint::SnapshotWriter;
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{
    key_group_for_key, BackendConfig, ErrorKind, KeyGroupRange, KeyedStateBackend, StateDescriptor, StateFunctions,
    TypeSchema,
};
use statekit_snapshot::cursor::{
    CursorEntry, CursorError, Direction, EntryCursor, EntryFilter, KeyedEntries, Position, Walked, Watch,
};
use statekit_snapshot::Snapshot;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MAX_P: u32 = 16;
const KEYS: u32 = 60;

fn key(i: u32) -> String {
    format!("key-{i:03}")
}

/// A savepoint of operator `op` (2 subtasks of 16 key groups): value state `count` (key i →
/// i), list state `items` (key i → [0, 1, 2] for even i) and an empty value state `none`.
fn savepoint(dir: &Path) -> PathBuf {
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir));
    let writer = SnapshotWriter::new_savepoint(storage, "", "00112233445566778899aabbccddeeff", 1).expect("writer");
    writer.register_operator("op", 2, MAX_P).expect("register");
    for i in 0..2u32 {
        let config = BackendConfig::for_subtask(MAX_P, 2, i).expect("config");
        let mut b = statekit_hashmap::HashMapBackend::new(config).expect("backend");
        let count = b
            .register(
                StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64),
                StateFunctions::None,
            )
            .expect("count");
        let items = b
            .register(
                StateDescriptor::list("items", TypeSchema::Utf8, TypeSchema::I64),
                StateFunctions::None,
            )
            .expect("items");
        b.register(
            StateDescriptor::value("none", TypeSchema::Utf8, TypeSchema::I64),
            StateFunctions::None,
        )
        .expect("none");
        for k in 0..KEYS {
            let name = key(k);
            if !b.key_group_range().contains(key_group_for_key(name.as_bytes(), MAX_P)) {
                continue;
            }
            b.put(count, name.as_bytes(), b"", &i64::from(k).to_be_bytes())
                .expect("put");
            if k % 2 == 0 {
                for e in 0..3i64 {
                    b.add(items, name.as_bytes(), b"", &e.to_be_bytes()).expect("add");
                }
            }
        }
        let view = b.snapshot(1).expect("snapshot");
        writer
            .write_subtask("op", i, Some(view.as_ref()), None, false)
            .expect("write");
    }
    let name = writer.dir().to_string();
    writer.finish().expect("finish");
    dir.join(name)
}

/// Every entry a walk hands out, and the damaged key groups.
fn walk_all(cursor: &mut EntryCursor) -> (Vec<CursorEntry>, Vec<u32>) {
    let (mut entries, mut damaged) = (Vec::new(), Vec::new());
    let flow = cursor
        .walk(&mut |w| {
            match w {
                Walked::Entry(e) => entries.push(e.to_entry()),
                Walked::Damaged(d) => damaged.push(d.key_group),
                Walked::KeyGroupDone(_) => {}
            }
            ControlFlow::Continue(())
        })
        .expect("walk");
    assert!(flow.is_continue());
    (entries, damaged)
}

/// [`savepoint`] in a fresh directory (kept alive by the first half), opened.
fn savepoint_reader() -> (tempfile::TempDir, Snapshot) {
    let dir = tempfile::tempdir().expect("tempdir");
    let reader = Snapshot::open(savepoint(dir.path())).expect("open");
    (dir, reader)
}

fn cursor(sp: &Path, state: &str, filter: EntryFilter) -> Result<EntryCursor, CursorError> {
    let reader = Snapshot::open(sp).expect("open");
    EntryCursor::open(&reader, "op", state, filter)
}

#[test]
fn a_walk_hands_out_every_entry_in_key_group_order_with_positions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sp = savepoint(dir.path());
    let (all, damaged) = walk_all(&mut cursor(&sp, "count", EntryFilter::default()).expect("cursor"));
    assert!(damaged.is_empty());
    assert_eq!(all.len(), KEYS as usize);
    let mut last: Option<Position> = None;
    for e in &all {
        let k = std::str::from_utf8(&e.key).expect("utf8");
        assert_eq!(e.position.key_group, key_group_for_key(k.as_bytes(), MAX_P));
        let want = match &last {
            Some(p) if p.key_group == e.position.key_group => p.index + 1,
            Some(p) => {
                assert!(p.key_group < e.position.key_group, "key-group order");
                0
            }
            None => 0,
        };
        assert_eq!(e.position.index, want, "{e:?}");
        assert_eq!(e.element, None);
        last = Some(e.position.clone());
    }
    // A list's elements carry their index in the list.
    let (items, _) = walk_all(&mut cursor(&sp, "items", EntryFilter::default()).expect("cursor"));
    assert_eq!(items.len(), 3 * (KEYS as usize).div_ceil(2));
    for chunk in items.chunks(3) {
        let els: Vec<Option<u64>> = chunk.iter().map(|e| e.element).collect();
        assert_eq!(els, vec![Some(0), Some(1), Some(2)]);
        assert!(chunk.iter().all(|e| e.key == chunk[0].key));
    }
    // A state no file holds entries of: nothing, no error.
    let (none, _) = walk_all(&mut cursor(&sp, "none", EntryFilter::default()).expect("cursor"));
    assert!(none.is_empty());
}

#[test]
fn filters_narrow_the_walk_and_a_key_reads_only_its_key_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sp = savepoint(dir.path());
    let k = key(7);
    let kg = key_group_for_key(k.as_bytes(), MAX_P);
    let mut c = cursor(
        &sp,
        "count",
        EntryFilter {
            key: Some(k.clone().into_bytes()),
            ..EntryFilter::default()
        },
    )
    .expect("cursor");
    assert_eq!(c.key_groups(), KeyGroupRange::new(kg, kg));
    let (one, _) = walk_all(&mut c);
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].value, 7i64.to_be_bytes());

    let range = KeyGroupRange::new(3, 5);
    let (some, _) = walk_all(
        &mut cursor(
            &sp,
            "count",
            EntryFilter {
                key_groups: Some(range),
                ..EntryFilter::default()
            },
        )
        .expect("cursor"),
    );
    let (all, _) = walk_all(&mut cursor(&sp, "count", EntryFilter::default()).expect("cursor"));
    let want: Vec<&CursorEntry> = all.iter().filter(|e| range.contains(e.position.key_group)).collect();
    assert_eq!(some.iter().collect::<Vec<_>>(), want);

    // A predicate: positions count the entries that pass it.
    let odd = EntryFilter {
        matches: Some(Arc::new(
            |_: &StateDescriptor, e: &statekit_snapshot::cursor::EntryRef<'_>| {
                e.value.last().is_some_and(|b| b % 2 == 1)
            },
        )),
        ..EntryFilter::default()
    };
    let (odds, _) = walk_all(&mut cursor(&sp, "count", odd).expect("cursor"));
    assert_eq!(odds.len(), KEYS as usize / 2);
    assert!(odds.iter().any(|e| e.position.index > 0));

    let e = cursor(
        &sp,
        "count",
        EntryFilter {
            key_groups: Some(KeyGroupRange::new(10, MAX_P)),
            ..EntryFilter::default()
        },
    )
    .expect_err("beyond the key groups");
    assert_eq!(e.kind(), ErrorKind::Caller);
    assert_eq!(
        e.to_string(),
        "key group 16 does not exist: operator \"op\" has 16 key groups"
    );
    let e = cursor(&sp, "nope", EntryFilter::default()).expect_err("no such state");
    assert!(matches!(e, CursorError::NoSuchState { .. }), "{e}");
}

/// Counts the calls, never cancels.
#[derive(Default)]
struct Counting {
    asked: u64,
}

impl Watch for Counting {
    fn cancelled(&mut self) -> bool {
        self.asked += 1;
        false
    }
}

#[test]
fn pages_forwards_backwards_and_from_any_position_agree_with_the_walk() {
    let (_dir, reader) = savepoint_reader();
    let entries = KeyedEntries::open(&reader, "op", KeyGroupRange::all(MAX_P)).expect("views");
    let (all, _) = walk_all(&mut entries.cursor("count", EntryFilter::default()));

    // Forwards, page after page.
    let mut c = entries.cursor("count", EntryFilter::default());
    let mut paged = Vec::new();
    let mut watch = Counting::default();
    loop {
        let page = c.next_page(7, &mut watch).expect("page");
        assert!(page.entries.len() <= 7);
        assert!(page.damaged.is_empty());
        paged.extend(page.entries);
        if !page.more {
            break;
        }
    }
    assert_eq!(paged, all);
    assert!(watch.asked > 0);

    // From a position: the entry there first.
    let at = all[23].position.clone();
    c.seek(at.clone());
    let page = c.next_page(5, &mut ()).expect("page");
    assert_eq!(page.start, at);
    assert_eq!(page.entries, all[23..28].to_vec());
    assert_eq!(c.position(), &all[27].position.next());
    c.seek_key_group(all[23].position.key_group);
    let page = c.next_page(1, &mut ()).expect("page");
    assert_eq!(page.entries[0].position.index, 0);

    // Backwards: the page before a position, and the last page.
    let page = c.page_before(Some(&at), 5, &mut ()).expect("page");
    assert_eq!(page.entries, all[18..23].to_vec());
    assert!(page.more);
    assert_eq!(page.start, all[18].position);
    let last = c.page_before(None, 4, &mut ()).expect("page");
    assert_eq!(last.entries, all[all.len() - 4..].to_vec());
    assert!(!last.more);
    let first = c.page_before(Some(&all[2].position), 10, &mut ()).expect("page");
    assert_eq!(first.entries, all[..2].to_vec());
    assert_eq!(first.start, Position::START);
}

/// Cancels at once.
struct Cancel;

impl Watch for Cancel {
    fn cancelled(&mut self) -> bool {
        true
    }
}

#[test]
fn searches_find_wrap_and_stop_when_cancelled() {
    let (_dir, reader) = savepoint_reader();
    let entries = KeyedEntries::open(&reader, "op", KeyGroupRange::all(MAX_P)).expect("views");
    let (all, _) = walk_all(&mut entries.cursor("count", EntryFilter::default()));
    let mut c = entries.cursor("count", EntryFilter::default());

    // An exact key, read in its key group only.
    let p = c.find_key(key(42).as_bytes()).expect("find").expect("found");
    let e = all.iter().find(|e| e.position == p).expect("there");
    assert_eq!(e.key, key(42).as_bytes());
    assert_eq!(c.find_key(b"no-such-key").expect("find"), None);

    // Every entry whose key ends in 5, in walk order; n from each finds the next, wrapping.
    let ends5 = |e: &statekit_snapshot::cursor::EntryRef<'_>| e.key.ends_with(b"5");
    let hits: Vec<&CursorEntry> = all.iter().filter(|e| e.key.ends_with(b"5")).collect();
    assert!(hits.len() > 2);
    for (i, h) in hits.iter().enumerate() {
        let next = c
            .find(&h.position, Direction::Next, &ends5, &mut ())
            .expect("find")
            .expect("found");
        let want = hits[(i + 1) % hits.len()];
        assert_eq!(next.position, want.position);
        assert_eq!(next.wrapped, i + 1 == hits.len());
        let prev = c
            .find(&h.position, Direction::Prev, &ends5, &mut ())
            .expect("find")
            .expect("found");
        let want = hits[(i + hits.len() - 1) % hits.len()];
        assert_eq!(prev.position, want.position);
        assert_eq!(prev.wrapped, i == 0);
    }
    let nothing = c
        .find(&Position::START, Direction::Next, &|_| false, &mut ())
        .expect("find");
    assert_eq!(nothing, None);
    let e = c
        .find(&Position::START, Direction::Next, &ends5, &mut Cancel)
        .expect_err("cancelled");
    assert!(matches!(e, CursorError::Cancelled), "{e}");
    let e = c.next_page(3, &mut Cancel).expect_err("cancelled");
    assert!(matches!(e, CursorError::Cancelled), "{e}");
}

/// The keyed data files (`*.skd`) under `dir`, in path order.
fn keyed_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(keyed_files(&p));
        } else if p.extension().is_some_and(|x| x == "skd") {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn a_damaged_key_group_is_reported_and_the_walk_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sp = savepoint(dir.path());
    let (clean, _) = walk_all(&mut cursor(&sp, "count", EntryFilter::default()).expect("cursor"));
    // Flip one byte of the first key group's block of a keyed data file (the data follows a short
    // header).
    let path = keyed_files(&sp).into_iter().next().expect("a keyed data file");
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[120] ^= 0x40;
    std::fs::write(&path, &bytes).expect("write");

    let (entries, damaged) = walk_all(&mut cursor(&sp, "count", EntryFilter::default()).expect("cursor"));
    assert_eq!(damaged.len(), 1, "{damaged:?}");
    let bad = damaged[0];
    let others: Vec<&CursorEntry> = clean.iter().filter(|e| e.position.key_group != bad).collect();
    assert_eq!(
        entries
            .iter()
            .filter(|e| e.position.key_group != bad)
            .collect::<Vec<_>>(),
        others
    );
    assert!(others.iter().any(|e| e.position.key_group > bad), "the walk went on");

    // Pages name it and hold the entries around it; a search that runs into it fails.
    let reader = Snapshot::open(&sp).expect("open");
    let mut c = EntryCursor::open(&reader, "op", "count", EntryFilter::default()).expect("cursor");
    let page = c.next_page(clean.len() + 1, &mut ()).expect("page");
    assert_eq!(page.damaged.len(), 1);
    assert_eq!(page.damaged[0].key_group, bad);
    assert!(page.damaged[0].to_string().starts_with(&format!("key group {bad}: ")));
    assert_eq!(page.damaged[0].error.kind(), ErrorKind::Corrupt);
    let back = c.page_before(None, clean.len() + 1, &mut ()).expect("page");
    assert_eq!(back.entries, page.entries);
    assert_eq!(back.damaged.len(), 1);
    let e = c
        .find(&Position::START, Direction::Next, &|_| false, &mut ())
        .expect_err("damaged");
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    assert!(matches!(e, CursorError::Damaged(ref d) if d.key_group == bad), "{e}");
}

/// Apache Flink's own savepoint: a key is looked up in the key group Flink put it in (its
/// murmur(hashCode) rule, recorded with the operator), both when a cursor is opened for one
/// key and by `find_key`.
#[test]
fn flink_keys_are_found_in_flinks_key_groups() {
    let sp = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/flink/flink-1.20.5/savepoint-hashmap-canonical/savepoint");
    let uid = "fdae8dad403fd2441defe2c3680362f5";
    let schema = statekit_snapshot::OpenOptions {
        state_schema: true,
        ..Default::default()
    };
    let reader = Snapshot::open_with(&sp, &schema).expect("open");
    let entries = KeyedEntries::open(&reader, uid, KeyGroupRange::all(128)).expect("views");
    let (all, _) = walk_all(&mut entries.cursor("count", EntryFilter::default()));
    // Flink's String serializer: a length, then the characters.
    let stored = all
        .iter()
        .find(|e| e.key.ends_with(b"hello"))
        .expect("the word hello")
        .clone();
    let statekit_kg = key_group_for_key(&stored.key, 128);
    assert_ne!(
        stored.position.key_group, statekit_kg,
        "a key statekit's rule places elsewhere"
    );

    let p = entries
        .cursor("count", EntryFilter::default())
        .find_key(&stored.key)
        .expect("find")
        .expect("found");
    assert_eq!(p, stored.position);
    let mut one = EntryCursor::open(
        &reader,
        uid,
        "count",
        EntryFilter {
            key: Some(stored.key.clone()),
            ..EntryFilter::default()
        },
    )
    .expect("cursor");
    assert_eq!(
        one.key_groups(),
        KeyGroupRange::new(stored.position.key_group, stored.position.key_group)
    );
    assert_eq!(walk_all(&mut one).0, vec![stored]);
}
