//! Every input the fuzzer once crashed on (`fuzz/regressions/<target>/`), replayed through the
//! same checks as its fuzz target on every `cargo test`: decoding never panics, and what
//! decodes round-trips. The fuzz targets themselves run with `scripts/fuzz.sh`.

use statekit_core::storage::{Blob, MemoryStorage};
use statekit_core::{KeyGroupRange, KeyedStateView, MemoryView};
use statekit_format::{
    decode_metadata, decode_operator_file, encode_metadata, read_operator_file, write_keyed_file, write_operator_file,
    KeyedFileReader, WriteOptions,
};
use std::sync::Arc;

#[path = "common/regressions.rs"]
mod regressions;
use regressions::regression_inputs;

#[test]
fn keyed_file_regressions() {
    for (name, data) in regression_inputs("keyed_file") {
        let blob: Arc<dyn Blob> = Arc::new(data);
        let Ok(reader) = KeyedFileReader::from_blob(blob, name.clone()) else {
            continue;
        };
        let verified = reader.verify().is_ok();
        let all = KeyGroupRange::all(reader.max_parallelism());
        for kg in all {
            let _ = reader.visit_key_group(kg, &mut |_| Ok(std::ops::ControlFlow::Continue(())));
        }
        if verified {
            let view = MemoryView::collect(&reader, all).expect("a verified file visits cleanly");
            let storage = MemoryStorage::new();
            write_keyed_file(&view, all, &storage, "again", &WriteOptions::default()).expect("rewrite");
            let again = KeyedFileReader::open(&storage, "again", None).expect("reopen");
            assert_eq!(
                MemoryView::collect(&again, all).expect("collect").entries(),
                view.entries(),
                "{name}"
            );
        }
    }
}

#[test]
fn decode_metadata_regressions() {
    for (name, data) in regression_inputs("decode_metadata") {
        if let Ok(meta) = decode_metadata(&data, "_metadata") {
            let back = decode_metadata(&encode_metadata(&meta), "_metadata").expect("re-encoded metadata decodes");
            assert_eq!(back, meta, "{name}");
        }
    }
}

#[test]
fn operator_file_regressions() {
    for (name, data) in regression_inputs("operator_file") {
        if let Ok(snapshot) = decode_operator_file(&data, "fuzz.operator", None) {
            let storage = MemoryStorage::new();
            write_operator_file(&snapshot, &storage, "again", &WriteOptions::default()).expect("rewrite");
            assert_eq!(
                read_operator_file(&storage, "again", None).expect("reread"),
                snapshot,
                "{name}"
            );
        }
    }
}
