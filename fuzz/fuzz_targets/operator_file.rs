//! Operator data files: decoding never panics; every list element and broadcast entry
//! decodes by its schema as `statekit dump` renders it (value codec checks of
//! `statekit_fuzz::typed::check_value`); what decodes writes and reads back equal. Run as is
//! and with every CRC repaired.
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_core::operator_state::OperatorStateData;
use statekit_core::storage::MemoryStorage;
use statekit_format::{decode_operator_file, read_operator_file, write_operator_file, WriteOptions};
use statekit_fuzz::{fixup, typed::check_value};

fn check(data: &[u8]) {
    let blob = data.to_vec();
    let Ok(snapshot) = decode_operator_file(&blob, "fuzz.operator", None) else {
        return;
    };
    for (desc, state) in &snapshot.states {
        match state {
            OperatorStateData::List(items) => {
                for e in items {
                    check_value(&desc.value_schema, e);
                }
            }
            OperatorStateData::Broadcast(entries) => {
                for (k, v) in entries {
                    if let Some(ks) = &desc.key_schema {
                        check_value(ks, k);
                    }
                    check_value(&desc.value_schema, v);
                }
            }
        }
    }
    let storage = MemoryStorage::new();
    write_operator_file(&snapshot, &storage, "again", &WriteOptions::default()).expect("rewrite");
    assert_eq!(read_operator_file(&storage, "again", None).expect("reread"), snapshot);
}

fuzz_target!(|data: &[u8]| {
    statekit_fuzz::begin(data);
    fixup::both(data, fixup::container, check);
});
