//! Changelog log files: open + verify + reading every change set's records never panic; a
//! file that verifies decodes every record of every change set.
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_changelog::LogFileReader;
use statekit_core::storage::Blob;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let blob: Arc<dyn Blob> = Arc::new(data.to_vec());
    let Ok(reader) = LogFileReader::from_blob(blob, "fuzz.skcl", None) else {
        return;
    };
    let verified = reader.verify().is_ok();
    for e in reader.index() {
        let Ok(cs) = reader.read(e) else {
            assert!(!verified, "a verified file reads every change set");
            continue;
        };
        let r = cs.for_each_record(None, &mut |kg, rec| {
            std::hint::black_box((kg, rec));
            Ok(())
        });
        assert!(r.is_ok() || !verified, "a verified file decodes every record");
    }
});
