//! Keyed state descriptors (`statekit_format::decode_state_descriptor`, the schema decoder
//! shared by `_metadata`, data files and changelog metadata records): decoding never panics
//! and errors render; a decoded descriptor re-encodes (`encode_state_descriptor`) to bytes
//! that decode equal and are the input's (or shorter, where a varint was overlong). The
//! bytes after the descriptor are then decoded as a key, namespace, value and user key by
//! the descriptor's own schemas (`statekit_fuzz::typed::check_value`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_format::{decode_state_descriptor, encode_state_descriptor};
use statekit_fuzz::typed::check_value;

fuzz_target!(|data: &[u8]| {
    statekit_fuzz::begin(data);
    let (d, used) = match decode_state_descriptor(data, 7, "fuzz", "descriptor") {
        Ok(x) => x,
        Err(e) => {
            let s = e.to_string();
            assert!(s.starts_with("fuzz"), "{s}");
            return;
        }
    };
    assert!(used <= data.len());
    let mut again = Vec::new();
    encode_state_descriptor(&mut again, &d);
    assert!(
        again == data[..used] || again.len() < used,
        "re-encoding changed the descriptor: {used} bytes in, {} out",
        again.len()
    );
    let (back, used_again) = decode_state_descriptor(&again, 0, "again", "descriptor").expect("re-encoded decodes");
    assert_eq!(back, d);
    assert_eq!(used_again, again.len());
    let rest = &data[used..];
    check_value(&d.key_schema, rest);
    check_value(&d.namespace_schema, rest);
    check_value(&d.value_schema, rest);
    if let Some(s) = &d.user_key_schema {
        check_value(s, rest);
    }
});
