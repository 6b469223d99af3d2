//! Operator data files: decoding never panics; what decodes writes and reads back equal.
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_core::storage::MemoryStorage;
use statekit_format::{decode_operator_file, read_operator_file, write_operator_file, WriteOptions};

fuzz_target!(|data: &[u8]| {
    let blob = data.to_vec();
    let Ok(snapshot) = decode_operator_file(&blob, "fuzz.operator", None) else {
        return;
    };
    let storage = MemoryStorage::new();
    write_operator_file(&snapshot, &storage, "again", &WriteOptions::default()).expect("rewrite");
    assert_eq!(read_operator_file(&storage, "again", None).expect("reread"), snapshot);
});
