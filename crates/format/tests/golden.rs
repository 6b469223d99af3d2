//! Golden fixtures (`fixtures/v1/`): the current code reads the checked-in savepoint and gets
//! exactly the expected state; regenerating gives byte-identical files (format stability);
//! each corrupted copy gives a clear error naming the file and offset, never a panic.
//!
//! Regenerate with `cargo run -p statekit-format --example gen_fixtures -- fixtures/v1` — only
//! when the format version changes (then add `fixtures/v2/` and keep `v1` readable).

#[path = "../examples/gen_fixtures/generator.rs"]
mod generator;

use statekit_core::storage::LocalStorage;
use statekit_core::{KeyGroupRange, KeyedStateView, MemoryView, OperatorStateData};
use statekit_format::*;
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/v1")
}

fn read_tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).expect("read_dir") {
            let e = e.expect("entry");
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p
                    .strip_prefix(root)
                    .expect("prefix")
                    .to_string_lossy()
                    .replace('\\', "/");
                out.insert(rel, std::fs::read(&p).expect("read"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

#[test]
fn regenerating_gives_byte_identical_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    generator::write_all(dir.path()).expect("generate");
    let dirs = std::iter::once(generator::BASIC).chain(generator::CORRUPT.iter().map(|c| c.0));
    let (mut fresh, mut checked_in) = (BTreeMap::new(), BTreeMap::new());
    for d in dirs {
        for (name, bytes) in read_tree(&dir.path().join(d)) {
            fresh.insert(format!("{d}/{name}"), bytes);
        }
        for (name, bytes) in read_tree(&fixtures().join(d)) {
            checked_in.insert(format!("{d}/{name}"), bytes);
        }
    }
    assert_eq!(
        fresh.keys().collect::<Vec<_>>(),
        checked_in.keys().collect::<Vec<_>>(),
        "fixture file list differs; regenerate only with a format version bump"
    );
    for (name, bytes) in &fresh {
        assert!(
            checked_in[name] == *bytes,
            "{name}: the current writer no longer produces the checked-in bytes (format changed?)"
        );
    }
    let total: usize = checked_in.values().map(Vec::len).sum();
    assert!(total < 64 * 1024, "fixtures must stay small ({total} bytes)");
}

#[test]
fn savepoint_basic_reads_back_exactly() {
    let root = fixtures().join(generator::BASIC);
    let storage = LocalStorage::new(&root);
    // What the generator meant to write, rebuilt in memory.
    let tmp = tempfile::tempdir().expect("tempdir");
    let expected = generator::write_savepoint(tmp.path()).expect("generate");

    let meta = read_metadata(&storage, METADATA_FILE_NAME).expect("metadata");
    assert_eq!(meta, expected.metadata);
    // Hard-coded anchors, independent of the generator.
    assert_eq!(meta.kind, SnapshotKind::Savepoint);
    assert_eq!(meta.checkpoint_id, 42);
    assert_eq!(meta.job_id, "0123456789abcdef0123456789abcdef");
    let uids: Vec<&str> = meta.operators.iter().map(|o| o.uid.as_str()).collect();
    assert_eq!(uids, ["word-counter", "enricher"]);
    assert_eq!(meta.operators[0].operator_id.to_string().len(), 32);
    assert_eq!((meta.operators[0].parallelism, meta.operators[1].parallelism), (2, 3));
    assert!(!meta.operators[0].finished && meta.operators[1].finished);
    assert_eq!(meta.operators[0].keyed_states.len(), 5);
    assert_eq!(meta.operators[0].subtasks[1].key_groups, KeyGroupRange::new(4, 7));

    for (path, view) in &expected.keyed {
        let size = std::fs::metadata(root.join(path)).expect("stat").len();
        let reader = KeyedFileReader::open(&storage, path, Some(size)).expect("open");
        reader.verify().expect("verify");
        let got = MemoryView::collect(&reader, KeyGroupRange::all(reader.max_parallelism())).expect("collect");
        assert_eq!(got.entries(), view.entries(), "{path}");
        assert_eq!(reader.states(), view.states(), "{path}");
        assert_eq!(reader.key_group_range(), view.key_group_range(), "{path}");
    }
    for (path, snap) in &expected.operator {
        assert_eq!(&read_operator_file(&storage, path, None).expect("read"), snap, "{path}");
    }

    // Spot checks of decoded values: word-counter's "count" of alice is 1, heidi's 8; the
    // union state holds the subtask's watermark.
    let mut counts = BTreeMap::new();
    for i in 0..2 {
        let r = KeyedFileReader::open(&storage, &format!("word-counter/{i}.keyed"), None).expect("open");
        let _ = r
            .visit_range(KeyGroupRange::all(8), &mut |e| {
                if e.state == 0 {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(e.value);
                    counts.insert(String::from_utf8_lossy(e.key).to_string(), i64::from_be_bytes(b));
                }
                Ok(ControlFlow::Continue(()))
            })
            .expect("visit");
    }
    assert_eq!(counts.len(), 8);
    assert_eq!(counts["alice"], 1);
    assert_eq!(counts["heidi"], 8);
    let op1 = read_operator_file(&storage, "word-counter/1.operator", None).expect("read");
    assert_eq!(
        op1.states[1].1,
        OperatorStateData::List(vec![1_700_000_000_001i64.to_be_bytes().to_vec()])
    );

    let report = verify_snapshot(&storage).expect("verify");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.files, 7);
    assert_eq!(
        report.entries,
        67 + 2 + 12,
        "67 word-counter entries, 2 enricher entries, 12 operator elements"
    );
}

fn problems_of(dir: &str) -> Vec<FormatError> {
    let storage = LocalStorage::new(fixtures().join(dir));
    let report = verify_snapshot(&storage).expect("metadata is intact");
    for p in &report.problems {
        eprintln!("{dir}: {p}");
    }
    report.problems
}

#[test]
fn corrupt_bitflip_is_reported_with_file_and_offset() {
    let problems = problems_of("corrupt-bitflip");
    assert_eq!(problems.len(), 1, "{problems:?}");
    let FormatError::Corrupt {
        file, offset, field, ..
    } = &problems[0]
    else {
        panic!("{:?}", problems[0])
    };
    assert!(file.ends_with("word-counter/0.keyed"), "{file}");
    assert_eq!(field, "block.crc32");
    // The damaged block is the first one of the first key group.
    let storage = LocalStorage::new(fixtures().join("corrupt-bitflip"));
    let r = KeyedFileReader::open(&storage, "word-counter/0.keyed", None).expect("header and index are intact");
    let first = &r.key_groups()[0];
    assert_eq!(*offset, first.offset);
    let msg = problems[0].to_string();
    assert!(msg.contains(&format!("offset {}", first.offset)), "{msg}");
    // Other key groups of the same file still read.
    let other = r.key_groups()[1].key_group;
    let _ = r
        .visit_key_group(other, &mut |_| Ok(std::ops::ControlFlow::Continue(())))
        .expect("undamaged key group reads");
    assert!(r
        .visit_key_group(first.key_group, &mut |_| Ok(std::ops::ControlFlow::Continue(())))
        .is_err());
}

#[test]
fn corrupt_truncated_is_reported_as_a_size_mismatch() {
    let problems = problems_of("corrupt-truncated");
    assert_eq!(problems.len(), 1, "{problems:?}");
    let msg = problems[0].to_string();
    assert!(
        msg.contains("word-counter/1.keyed") && msg.contains("file size") && msg.contains("truncated"),
        "{msg}"
    );
    // Without the recorded size the missing trailer gives it away.
    let storage = LocalStorage::new(fixtures().join("corrupt-truncated"));
    let e = KeyedFileReader::open(&storage, "word-counter/1.keyed", None).expect_err("truncated");
    assert!(e.to_string().contains("trailer"), "{e}");
}

#[test]
fn corrupt_version_is_unsupported_version() {
    let problems = problems_of("corrupt-version");
    assert_eq!(problems.len(), 1, "{problems:?}");
    match &problems[0] {
        FormatError::UnsupportedVersion { file, found, supported } => {
            assert!(file.ends_with("enricher/0.keyed"), "{file}");
            assert_eq!((*found, *supported), (2, FORMAT_VERSION));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn corrupt_metadata_crc_fails_verification() {
    let storage = LocalStorage::new(fixtures().join("corrupt-metadata-crc"));
    let e = verify_snapshot(&storage).expect_err("bad metadata");
    match &e {
        FormatError::Corrupt { file, field, .. } => {
            assert!(file.ends_with("_metadata"), "{file}");
            assert_eq!(field, "crc32");
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("checksum mismatch"), "{e}");
}
