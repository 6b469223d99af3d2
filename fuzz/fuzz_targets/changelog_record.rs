//! Change records: `decode_record` never panics, and a decoded change re-encodes to bytes
//! that decode equal.
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_changelog::record::{decode_record, encode_change, encode_metadata};
use statekit_changelog::Record;

fuzz_target!(|data: &[u8]| {
    let Ok(rec) = decode_record(data) else {
        return;
    };
    let mut again = Vec::new();
    match &rec {
        Record::Change(c) => encode_change(&mut again, c),
        Record::Metadata { state, descriptor } => encode_metadata(&mut again, *state, descriptor),
    }
    let back = decode_record(&again).expect("re-encoded record decodes");
    assert_eq!(back, rec);
});
