//! Helpers shared by the Flink fixture tests.

use serde_json::Value;
use std::collections::BTreeMap;

/// Operator id (hex) → label, as an `expected*.json` of a fixture lists its operators.
pub fn operator_labels(expected: &Value) -> BTreeMap<String, String> {
    expected["operators"]
        .as_array()
        .expect("operators")
        .iter()
        .map(|o| {
            (
                o["operator_id"].as_str().expect("id").to_string(),
                o["label"].as_str().expect("label").to_string(),
            )
        })
        .collect()
}
