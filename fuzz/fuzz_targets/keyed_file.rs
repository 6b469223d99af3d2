//! Keyed data files: open + verify + visiting every key group never panic, and every entry's
//! key, namespace, user key and value decode by their schemas as `statekit dump` renders
//! them (value codec checks of `statekit_fuzz::typed::check_value`); a file that verifies
//! reads back the same entries after being written again. Run as is and with every CRC
//! repaired.
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_core::storage::{Blob, MemoryStorage};
use statekit_core::{KeyGroupRange, KeyedStateView, MemoryView};
use statekit_format::{write_keyed_file, KeyedFileReader, WriteOptions};
use statekit_fuzz::{fixup, typed::check_value};
use std::ops::ControlFlow;
use std::sync::Arc;

fn check(data: &[u8]) {
    let blob: Arc<dyn Blob> = Arc::new(data.to_vec());
    let Ok(reader) = KeyedFileReader::from_blob(blob, "fuzz.keyed".into()) else {
        return;
    };
    let verified = reader.verify().is_ok();
    let all = KeyGroupRange::all(reader.max_parallelism());
    let states = reader.states();
    for kg in all {
        let r = reader.visit_key_group(kg, &mut |e| {
            let d = &states[e.state as usize];
            check_value(&d.key_schema, e.key);
            check_value(&d.namespace_schema, e.namespace);
            check_value(&d.value_schema, e.value);
            if let (Some(s), Some(uk)) = (&d.user_key_schema, e.user_key) {
                check_value(s, uk);
            }
            Ok(ControlFlow::Continue(()))
        });
        assert!(r.is_ok() || !verified, "a verified file visits cleanly: {r:?}");
    }
    if verified {
        let view = MemoryView::collect(&reader, all).expect("a verified file visits cleanly");
        let storage = MemoryStorage::new();
        write_keyed_file(&view, all, &storage, "again", &WriteOptions::default()).expect("rewrite");
        let again = KeyedFileReader::open(&storage, "again", None).expect("reopen");
        again.verify().expect("rewritten file verifies");
        let back = MemoryView::collect(&again, all).expect("collect");
        assert_eq!(back.entries(), view.entries());
        assert_eq!(again.states(), reader.states());
    }
}

fuzz_target!(|data: &[u8]| {
    statekit_fuzz::begin(data);
    fixup::both(data, fixup::container, check);
});
