//! Change records: `decode_record` never panics and its errors render; a decoded record
//! re-encodes to bytes that decode equal, and those bytes are the input except where an
//! overlong LEB128 varint was written canonically (shorter).
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_changelog::record::{decode_record, encode_change, encode_metadata};
use statekit_changelog::Record;

fuzz_target!(|data: &[u8]| {
    statekit_fuzz::begin(data);
    let rec = match decode_record(data) {
        Ok(rec) => rec,
        Err(e) => {
            std::hint::black_box(e.to_string());
            return;
        }
    };
    let mut again = Vec::new();
    match &rec {
        Record::Change(c) => encode_change(&mut again, c),
        Record::Metadata { state, descriptor } => encode_metadata(&mut again, *state, descriptor),
    }
    assert!(
        again == data || again.len() < data.len(),
        "re-encoding changed the record: {} bytes in, {} out",
        data.len(),
        again.len()
    );
    let back = decode_record(&again).expect("re-encoded record decodes");
    assert_eq!(back, rec);
});
