//! A key-group read touches only that key group's blocks: everything else of the data area
//! can be destroyed and the key group still reads back exactly.

use statekit_core::storage::{Blob, MemoryStorage, Storage};
use statekit_core::{KeyGroupRange, KeyedStateView, MemoryView, OwnedEntry, StateDescriptor, StateError, TypeSchema};
use statekit_format::*;
use std::ops::ControlFlow;
use std::sync::Arc;

fn view() -> MemoryView {
    let states = vec![
        StateDescriptor::value("v", TypeSchema::Utf8, TypeSchema::Bytes),
        StateDescriptor::list("l", TypeSchema::Utf8, TypeSchema::Bytes),
    ];
    let mut entries = Vec::new();
    for i in 0..400u32 {
        let key = format!("user-{i}").into_bytes();
        let kg = statekit_core::key_group_for_key(&key, 32);
        for s in 0..2 {
            entries.push(OwnedEntry {
                key_group: kg,
                state: s,
                key: key.clone(),
                namespace: vec![],
                user_key: None,
                value: format!("value {i} of state {s}, padded to make several blocks").into_bytes(),
                timestamp: None,
            });
        }
    }
    MemoryView::new(32, KeyGroupRange::all(32), states, entries)
}

fn entries_of(v: &dyn KeyedStateView, kg: u32) -> Result<Vec<OwnedEntry>, StateError> {
    let mut out = Vec::new();
    let _ = v.visit_key_group(kg, &mut |e| {
        out.push(OwnedEntry::from_entry(kg, e));
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(out)
}

#[test]
fn reading_one_key_group_ignores_every_other_block() {
    let view = view();
    for compression in [Compression::None, Compression::Lz4, Compression::Zstd { level: 3 }] {
        let storage = MemoryStorage::new();
        let opts = WriteOptions {
            compression,
            block_size: 256,
        };
        let info = write_keyed_file(&view, KeyGroupRange::all(32), &storage, "k", &opts).expect("write");
        assert!(
            info.key_groups.iter().any(|k| k.stored_bytes > 600),
            "some key group spans several blocks"
        );
        let bytes = storage.open("k").expect("open").bytes().to_vec();
        let data_start = info.key_groups[0].offset as usize;
        let last = info.key_groups.last().expect("non-empty");
        let data_end = (last.offset + last.stored_bytes) as usize;
        for target in &info.key_groups {
            let keep = target.offset as usize..(target.offset + target.stored_bytes) as usize;
            let mut wrecked = bytes.clone();
            for (i, b) in wrecked.iter_mut().enumerate().take(data_end).skip(data_start) {
                if !keep.contains(&i) {
                    *b = 0xA5;
                }
            }
            let reader =
                KeyedFileReader::from_blob(Arc::new(wrecked) as Arc<dyn Blob>, "wrecked".into()).expect("open");
            assert_eq!(
                reader.key_group_byte_range(target.key_group),
                Some(target.offset..target.offset + target.stored_bytes)
            );
            let got = entries_of(&reader, target.key_group).expect("target key group reads");
            let want = entries_of(&view, target.key_group).expect("view");
            assert_eq!(got, want, "{compression:?} key group {}", target.key_group);
            assert_eq!(got.len() as u64, target.entries);
            // Every other key group, and the full verify, see the damage.
            if info.key_groups.len() > 1 {
                assert!(reader.verify().is_err());
                let other = info
                    .key_groups
                    .iter()
                    .find(|k| k.key_group != target.key_group)
                    .expect("other");
                let err = entries_of(&reader, other.key_group).expect_err("damaged");
                let StateError::Other(inner) = &err else {
                    panic!("unexpected error {err:?}")
                };
                match inner.downcast_ref::<FormatError>() {
                    Some(FormatError::Corrupt { file, offset, .. }) => {
                        assert_eq!(file, "wrecked");
                        assert_eq!(*offset, other.offset, "the error points at the key group's first block");
                    }
                    e => panic!("unexpected {e:?}"),
                }
            }
        }
    }
}

#[test]
fn sub_range_visit_reads_only_that_range() {
    let view = view();
    let storage = MemoryStorage::new();
    let info = write_keyed_file(&view, KeyGroupRange::all(32), &storage, "k", &WriteOptions::default()).expect("write");
    let mut bytes = storage.open("k").expect("open").bytes().to_vec();
    // Destroy key groups 0..16; key groups 16..32 remain readable as a range.
    for k in info.key_groups.iter().filter(|k| k.key_group < 16) {
        for b in &mut bytes[k.offset as usize..(k.offset + k.stored_bytes) as usize] {
            *b = 0;
        }
    }
    let reader = KeyedFileReader::from_blob(Arc::new(bytes) as Arc<dyn Blob>, "k".into()).expect("open");
    let upper = KeyGroupRange::new(16, 31);
    let got = MemoryView::collect(&reader, upper).expect("upper half reads");
    let want = MemoryView::collect(&view, upper).expect("view");
    assert_eq!(got.entries(), want.entries());
    assert!(MemoryView::collect(&reader, KeyGroupRange::new(0, 15)).is_err());
}
