//! `_metadata` decoding: never panics; every error names the file; whatever decodes
//! re-encodes to metadata that decodes equal. Run as is and with the CRC repaired.
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_format::{decode_metadata, encode_metadata};
use statekit_fuzz::fixup;

fn check(data: &[u8]) {
    match decode_metadata(data, "_metadata") {
        Ok(meta) => {
            let again = encode_metadata(&meta);
            let back = decode_metadata(&again, "_metadata").expect("re-encoded metadata decodes");
            assert_eq!(back, meta);
        }
        Err(e) => {
            // Every error renders and names the file.
            assert!(e.to_string().starts_with("_metadata"), "{e}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    statekit_fuzz::begin(data);
    fixup::both(data, fixup::metadata, check);
});
