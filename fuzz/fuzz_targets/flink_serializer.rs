//! Flink serializer snapshots and the state stream heads built from them
//! (`statekit_flink::decode_serializer_snapshot`, `decode_keyed_proxy`,
//! `decode_operator_proxy`): never panic, hang or allocate past the cap; every error names
//! the input and an offset; a head that decodes says how many bytes it took, no more than
//! the input has, and decodes the same from exactly those bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_flink::{decode_keyed_proxy, decode_operator_proxy, decode_serializer_snapshot};

fn check_err(e: statekit_flink::FlinkError) {
    let msg = e.to_string();
    assert!(msg.starts_with("in: offset "), "{msg}");
}

fuzz_target!(|data: &[u8]| {
    statekit_fuzz::begin(data);
    match decode_serializer_snapshot(data, "in") {
        Ok(t) => {
            std::hint::black_box((t.name(), t.schema()));
        }
        Err(e) => check_err(e),
    }
    match decode_keyed_proxy(data, "in") {
        Ok(p) => {
            assert!(p.len <= data.len());
            assert_eq!(decode_keyed_proxy(&data[..p.len], "in").ok(), Some(p));
        }
        Err(e) => check_err(e),
    }
    match decode_operator_proxy(data, "in") {
        Ok(p) => {
            assert!(p.len <= data.len());
            assert_eq!(decode_operator_proxy(&data[..p.len], "in").ok(), Some(p));
        }
        Err(e) => check_err(e),
    }
});
