//! Changelog log files: open + verify + reading every change set's records never panic; a
//! file that verifies reads and decodes every record of every change set; the parts of every
//! data record decode by the schemas its state's metadata record declared, as
//! `statekit dump --changes` renders them (value codec checks of
//! `statekit_fuzz::typed::check_value`). Run as is and with every CRC repaired.
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_changelog::{LogFileReader, Op, Record};
use statekit_core::storage::Blob;
use statekit_core::StateDescriptor;
use statekit_fuzz::{fixup, typed::check_value};
use std::collections::HashMap;
use std::sync::Arc;

fn typed(states: &HashMap<u32, StateDescriptor>, rec: &Record<'_>) {
    let Record::Change(c) = rec else { return };
    let Some(d) = states.get(&c.state) else { return };
    check_value(&d.key_schema, c.key);
    check_value(&d.namespace_schema, c.namespace);
    let uk = |b: &[u8]| {
        if let Some(s) = &d.user_key_schema {
            check_value(s, b);
        }
    };
    match &c.op {
        Op::Put(v) | Op::AddElement(v) => {
            check_value(&d.value_schema, v);
        }
        Op::SetList(items) => {
            for v in items {
                check_value(&d.value_schema, v);
            }
        }
        Op::MapPut { user_key, value } => {
            uk(user_key);
            check_value(&d.value_schema, value);
        }
        Op::MapRemove(k) => uk(k),
        Op::MergeList(namespaces) => {
            for ns in namespaces {
                check_value(&d.namespace_schema, ns);
            }
        }
        Op::Clear | Op::Read { .. } => {}
    }
}

fn check(data: &[u8]) {
    let blob: Arc<dyn Blob> = Arc::new(data.to_vec());
    let Ok(reader) = LogFileReader::from_blob(blob, "fuzz.skcl", None) else {
        return;
    };
    let verified = reader.verify().is_ok();
    let mut states: HashMap<u32, StateDescriptor> = HashMap::new();
    for e in reader.index() {
        let Ok(cs) = reader.read(e) else {
            assert!(!verified, "a verified file reads every change set");
            continue;
        };
        let r = cs.for_each_record(None, &mut |kg, rec| {
            if let Record::Metadata { state, descriptor } = &rec {
                states.insert(*state, descriptor.clone());
            }
            typed(&states, &rec);
            std::hint::black_box((kg, rec));
            Ok(())
        });
        assert!(r.is_ok() || !verified, "a verified file decodes every record");
    }
}

fuzz_target!(|data: &[u8]| {
    statekit_fuzz::begin(data);
    fixup::both(data, fixup::changelog, check);
});
