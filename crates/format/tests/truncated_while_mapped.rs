//! A data file truncated by another program while a reader has it mapped (issue 10, point 13):
//! the reader neither dies of SIGBUS nor reports damage or a partial result — it says the file
//! was truncated while being read.

use statekit_core::storage::LocalStorage;
use statekit_core::{KeyGroupRange, KeyedStateView, MemoryView, OwnedEntry, StateDescriptor, TypeSchema};
use statekit_format::{write_keyed_file, KeyedFileReader, WriteOptions};

#[test]
fn truncation_while_mapped_is_reported_as_truncation() {
    let max_p = 16;
    let states = vec![StateDescriptor::value("v", TypeSchema::Utf8, TypeSchema::Bytes)];
    let entries: Vec<OwnedEntry> = (0..4000)
        .map(|i| {
            let key = format!("key-{i}").into_bytes();
            // Incompressible enough to span many pages.
            let value = (0..64).map(|j| ((i * 31 + j * 7) % 251) as u8).collect();
            OwnedEntry::value(0, key, value, max_p)
        })
        .collect();
    let view = MemoryView::new(max_p, KeyGroupRange::all(max_p), states, entries);
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = LocalStorage::new(dir.path());
    let info = write_keyed_file(
        &view,
        KeyGroupRange::all(max_p),
        &storage,
        "f.keyed",
        &WriteOptions::default(),
    )
    .expect("write");
    assert!(info.file.size > 32 << 10, "{} bytes", info.file.size);
    let reader = KeyedFileReader::open(&storage, "f.keyed", Some(info.file.size)).expect("open");
    // Another program truncates the file to a tenth while it is mapped.
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("f.keyed"))
        .expect("open for truncation")
        .set_len(info.file.size / 10)
        .expect("truncate");
    let mut failure = None;
    for kg in KeyGroupRange::all(max_p) {
        if let Err(e) = reader.visit_key_group(kg, &mut |_| Ok(std::ops::ControlFlow::Continue(()))) {
            failure = Some(e.to_string());
            break;
        }
    }
    let failure = failure.expect("reading past the new end fails");
    assert!(
        failure.contains("truncated by another program while it was being read"),
        "{failure}"
    );
    let v = reader.verify().expect_err("verify fails").to_string();
    assert!(v.contains("truncated by another program"), "{v}");
}
