//! Values by schema (`statekit_core::schema::decode_value`), with arbitrary schemas: the
//! input is a schema in the compact form of `statekit_fuzz::typed::schema_from` (one byte per
//! node) followed by the value's bytes. Decoding never panics or blows up; what decodes
//! re-encodes (`encode_value`) to the input bytes (or, with an overlong varint, shorter
//! ones) that decode to a value encoding the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_fuzz::typed::{check_value, schema_from};

fuzz_target!(|data: &[u8]| {
    statekit_fuzz::begin(data);
    let mut pos = 0;
    let schema = schema_from(data, &mut pos, 1);
    let value = &data[pos..];
    check_value(&schema, value);
});
