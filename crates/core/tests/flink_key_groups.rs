//! `KeyGroupScheme::Flink` against real Apache Flink: every record of the golden files
//! `fixtures/flink/key-groups-<version>.json` holds a key of a Java boxed type, a max
//! parallelism and the key group Flink's own
//! `KeyGroupRangeAssignment.assignToKeyGroup(key, maxParallelism)` gave it (written by
//! `fixtures/flink/gen/keygroups/KeyGroupsFixture.java` with Flink's jars). The key is encoded
//! in statekit's value encoding (String/Character → UTF-8 as `Utf8`; Integer/Short/Byte → 4-byte
//! big-endian `I32`, sign-extended; Long → 8-byte BE `I64`; Boolean → one byte 0/1 `Bool`;
//! Float/Double → 4/8-byte BE IEEE `F32`/`F64` from the recorded bit pattern) and statekit must
//! put it in the same key group.

use serde_json::Value;
use statekit_core::keygroup::{flink_key_group_for_hash_code, KeyGroupScheme};
use statekit_core::TypeSchema;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The Java types the generator covers.
const JAVA_TYPES: [&str; 9] = [
    "String",
    "Character",
    "Integer",
    "Short",
    "Byte",
    "Long",
    "Boolean",
    "Float",
    "Double",
];

fn golden_path(version: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../fixtures/flink/key-groups-{version}.json"))
}

/// The parsed golden file of `version`, checked for its own consistency (version, counts).
fn golden(version: &str) -> Value {
    let path = golden_path(version);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(doc["flink_version"], version, "{}: flink_version", path.display());
    assert_eq!(
        doc["flink_jar"],
        format!("flink-dist-{version}.jar"),
        "{}: flink_jar",
        path.display()
    );
    let n = records(&doc).len();
    assert_eq!(
        doc["record_count"].as_u64(),
        Some(n as u64),
        "{}: record_count",
        path.display()
    );
    doc
}

fn records(doc: &Value) -> &[Value] {
    doc["records"].as_array().map(Vec::as_slice).expect("records: an array")
}

/// One record as the failure messages name it.
fn describe(rec: &Value) -> String {
    let mut s = format!(
        "{} {} (max parallelism {}",
        rec["java_type"].as_str().unwrap_or("?"),
        rec["key"],
        rec["max_parallelism"]
    );
    if let Some(bits) = rec["bits"].as_str() {
        s.push_str(&format!(", bits {bits}"));
    }
    s.push(')');
    s
}

fn int_key(rec: &Value, min: i64, max: i64) -> Result<i64, String> {
    let v = rec["key"].as_i64().ok_or("key is not an integer")?;
    if v < min || v > max {
        return Err(format!("key {v} is out of range {min}..={max}"));
    }
    Ok(v)
}

fn hex_bits(rec: &Value) -> Result<u64, String> {
    let bits = rec["bits"].as_str().ok_or("no bits")?;
    let hex = bits.strip_prefix("0x").ok_or("bits without 0x")?;
    u64::from_str_radix(hex, 16).map_err(|e| format!("bits {bits}: {e}"))
}

/// Checks that the recorded `key` (a JSON number, or Java's "NaN"/"Infinity"/"-Infinity") is
/// the value of the recorded `bits`, so the file is self-consistent; `value` is the float the
/// bits decode to, widened to `f64`.
fn check_float_key(rec: &Value, value: f64, same: impl Fn(f64) -> bool) -> Result<(), String> {
    let ok = match &rec["key"] {
        Value::String(s) => match s.as_str() {
            "NaN" => value.is_nan(),
            "Infinity" => value == f64::INFINITY,
            "-Infinity" => value == f64::NEG_INFINITY,
            _ => false,
        },
        Value::Number(n) => n.as_f64().is_some_and(same),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("key {} is not the value of its bits ({value:e})", rec["key"]))
    }
}

/// The key of `rec` in statekit's value encoding, with the schema it is encoded as.
fn encode(rec: &Value) -> Result<(Vec<u8>, TypeSchema), String> {
    let java_type = rec["java_type"].as_str().ok_or("no java_type")?;
    Ok(match java_type {
        "String" => {
            let s = rec["key"].as_str().ok_or("key is not a string")?;
            (s.as_bytes().to_vec(), TypeSchema::Utf8)
        }
        "Character" => {
            let s = rec["key"].as_str().ok_or("key is not a string")?;
            let mut chars = s.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) if u32::from(c) <= 0xffff => {}
                _ => return Err(format!("key {s:?} is not one UTF-16 code unit")),
            }
            (s.as_bytes().to_vec(), TypeSchema::Utf8)
        }
        "Integer" => {
            let v = int_key(rec, i64::from(i32::MIN), i64::from(i32::MAX))? as i32;
            (v.to_be_bytes().to_vec(), TypeSchema::I32)
        }
        "Short" => {
            let v = int_key(rec, i64::from(i16::MIN), i64::from(i16::MAX))? as i32;
            (v.to_be_bytes().to_vec(), TypeSchema::I32)
        }
        "Byte" => {
            let v = int_key(rec, i64::from(i8::MIN), i64::from(i8::MAX))? as i32;
            (v.to_be_bytes().to_vec(), TypeSchema::I32)
        }
        "Long" => {
            let v = rec["key"].as_i64().ok_or("key is not a 64-bit integer")?;
            (v.to_be_bytes().to_vec(), TypeSchema::I64)
        }
        "Boolean" => {
            let v = rec["key"].as_bool().ok_or("key is not a boolean")?;
            (vec![u8::from(v)], TypeSchema::Bool)
        }
        "Float" => {
            let bits = u32::try_from(hex_bits(rec)?).map_err(|_| "bits wider than 32")?;
            let f = f32::from_bits(bits);
            check_float_key(rec, f64::from(f), |n| (n as f32).to_bits() == bits)?;
            (bits.to_be_bytes().to_vec(), TypeSchema::F32)
        }
        "Double" => {
            let bits = hex_bits(rec)?;
            let d = f64::from_bits(bits);
            // serde_json (without its `float_roundtrip` feature) may parse a decimal one ULP
            // off; the bits are what the key is encoded from, the decimal only a cross-check.
            check_float_key(rec, d, |n| n.to_bits().abs_diff(bits) <= 1)?;
            (bits.to_be_bytes().to_vec(), TypeSchema::F64)
        }
        other => return Err(format!("unknown java_type {other}")),
    })
}

/// Every record of `version`'s golden file against `KeyGroupScheme::Flink`; all disagreements
/// are listed in the failure message.
fn check_version(version: &str) -> usize {
    let doc = golden(version);
    let mut failures = Vec::new();
    for (i, rec) in records(&doc).iter().enumerate() {
        let name = format!("record {i}: {}", describe(rec));
        let (Some(max_p), Some(expected)) = (rec["max_parallelism"].as_u64(), rec["key_group"].as_u64()) else {
            failures.push(format!("{name}: no max_parallelism/key_group"));
            continue;
        };
        let max_p = u32::try_from(max_p).expect("max parallelism fits u32");
        let (bytes, schema) = match encode(rec) {
            Ok(k) => k,
            Err(e) => {
                failures.push(format!("{name}: bad record: {e}"));
                continue;
            }
        };
        let got = KeyGroupScheme::Flink.key_group(&bytes, &schema, max_p);
        if got != Ok(expected as u32) {
            // Which half is wrong: Java's hashCode or Flink's murmur + mod on it?
            let via_hash = rec["hash_code"]
                .as_i64()
                .and_then(|h| i32::try_from(h).ok())
                .map(|h| flink_key_group_for_hash_code(h, max_p));
            failures.push(format!(
                "{name}: Flink {version} says key group {expected}, statekit {got:?} (key bytes {bytes:02x?} as \
                 {schema}; Java hashCode {}, whose murmur gives {via_hash:?})",
                rec["hash_code"]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} records of {} disagree:\n{}",
        failures.len(),
        records(&doc).len(),
        golden_path(version).display(),
        failures.join("\n")
    );
    records(&doc).len()
}

#[test]
fn flink_1_20_5_key_groups_match() {
    assert_eq!(check_version("1.20.5"), 955);
}

#[test]
fn flink_2_3_0_key_groups_match() {
    assert_eq!(check_version("2.3.0"), 955);
}

/// The golden files cover every type at every max parallelism, with the edge cases the
/// encoding must get right (non-BMP strings, negative zero, non-canonical NaNs, extreme values).
#[test]
fn golden_files_cover_every_type_and_edge_case() {
    let doc = golden("1.20.5");
    let recs = records(&doc);
    let max_ps: BTreeSet<u64> = recs.iter().filter_map(|r| r["max_parallelism"].as_u64()).collect();
    assert_eq!(max_ps, BTreeSet::from([1, 7, 128, 4096, 32768]));
    for t in JAVA_TYPES {
        for m in &max_ps {
            assert!(
                recs.iter().any(|r| r["java_type"] == t && r["max_parallelism"] == *m),
                "no {t} key at max parallelism {m}"
            );
        }
    }
    let has = |t: &str, pred: &dyn Fn(&Value) -> bool| recs.iter().any(|r| r["java_type"] == t && pred(r));
    assert!(has("String", &|r| r["key"] == ""));
    assert!(has("String", &|r| r["key"] == "émoji-😀"));
    assert!(has("String", &|r| r["key"] == "日本"));
    assert!(has("String", &|r| r["key"].as_str().is_some_and(|s| s.len() >= 1000)));
    assert!(has("Character", &|r| r["key"].as_str().is_some_and(|s| !s.is_ascii())));
    assert!(has("Integer", &|r| r["key"] == i32::MIN && r["max_parallelism"] == 128));
    assert!(has("Long", &|r| r["key"] == i64::MIN));
    assert!(has("Long", &|r| r["key"] == 0x1234_5678_9abc_def0_i64));
    assert!(has("Float", &|r| r["bits"] == "0x80000000"));
    assert!(has("Float", &|r| r["bits"] == "0x7fc12345"));
    assert!(has("Double", &|r| r["bits"] == "0x8000000000000000"));
    assert!(has("Double", &|r| r["bits"] == "0x7ff0000000000001"));
}

/// Flink 1.20.5 and 2.3.0 place every key in the same key group: one rule for both.
#[test]
fn flink_1_20_and_2_3_agree() {
    let old = golden("1.20.5");
    let new = golden("2.3.0");
    assert_eq!(records(&old), records(&new));
}
