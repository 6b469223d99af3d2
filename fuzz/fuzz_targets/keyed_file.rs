//! Keyed data files: open + verify + visit every key group never panic; a file that verifies
//! reads back the same entries after being written again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_core::storage::{Blob, MemoryStorage};
use statekit_core::{KeyGroupRange, KeyedStateView, MemoryView};
use statekit_format::{write_keyed_file, KeyedFileReader, WriteOptions};
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let blob: Arc<dyn Blob> = Arc::new(data.to_vec());
    let Ok(reader) = KeyedFileReader::from_blob(blob, "fuzz.keyed".into()) else {
        return;
    };
    let verified = reader.verify().is_ok();
    let all = KeyGroupRange::all(reader.max_parallelism());
    for kg in all {
        let _ = reader.visit_key_group(kg, &mut |e| {
            std::hint::black_box(e);
            Ok(())
        });
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
});
