//! The key-group scheme travels with the data (issue 41, point 2), on the real Apache Flink
//! 1.20.5 savepoints (`fixtures/flink/flink-1.20.5/*/savepoint`): Flink put the String key
//! "a" of the word count (operator id fdae8dad403fd2441defe2c3680362f5, state `count`) in key
//! group 81 of 128 — statekit's own rule would say 50. A SQL point lookup finds it there
//! (`EXPLAIN` reads that one key group); `convert` keeps Flink's key groups, so `diff` of a
//! savepoint and its conversion reports nothing, and the converted `_metadata` records the
//! scheme and keeps the operator ids; `dump --key a` finds the entry in both; a `rewrite` to
//! another max parallelism places the key by Flink's rule (key group 209 of 256), where a
//! query then finds it. The same on Flink's checkpoints (changelog and incremental RocksDB).

mod common;

use common::run;
use statekit_checkpoint::SnapshotReader;
use statekit_core::KeyGroupScheme;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

/// The word count operator (Flink 1.x stores ids only: it is named by its id).
const WORD_COUNT: &str = "fdae8dad403fd2441defe2c3680362f5";
/// Key group of the String key "a" of 128 under Flink's `murmurHash("a".hashCode()) % 128`
/// (statekit's own rule gives 50).
const A_KEY_GROUP: u32 = 81;
/// ... and of 256 (209 mod 128 = 81: the split of key group 81).
const A_KEY_GROUP_OF_256: u32 = 209;

/// The savepoint fixtures: both backends, canonical and native format.
const SAVEPOINTS: [&str; 5] = [
    "savepoint-hashmap-canonical",
    "savepoint-hashmap-canonical-inline",
    "savepoint-hashmap-native",
    "savepoint-rocksdb-canonical",
    "savepoint-rocksdb-native",
];

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/flink/flink-1.20.5")
        .join(rel)
}

fn savepoint(name: &str) -> PathBuf {
    fixture(name).join("savepoint")
}

/// The count of "a" in the fixture's `expected.json`.
fn expected_count_of_a(name: &str) -> i64 {
    let text = std::fs::read_to_string(fixture(name).join("expected.json")).expect("expected.json");
    let want: serde_json::Value = serde_json::from_str(&text).expect("json");
    want["keyed_state"]["word-count"]["count"]["values"]["a"]
        .as_i64()
        .expect("a's count")
}

fn ok(args: &[&str]) -> Output {
    let out = run(Path::new("."), args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(args: &[&str]) -> String {
    String::from_utf8(ok(args).stdout).expect("utf-8")
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// `statekit query` of a's row of `count`: the table it prints, and its `EXPLAIN`.
fn query_a(snapshot: &Path) -> (String, String) {
    let sql = format!(r#"SELECT key, value, key_group FROM "{WORD_COUNT}"."count" WHERE key = 'a'"#);
    let rows = stdout(&["query", path_str(snapshot), &sql]);
    let plan = stdout(&["query", path_str(snapshot), &format!("EXPLAIN {sql}")]);
    (rows, plan)
}

/// The rows of a query's table (`| a | 2 | 81 |` → `["a", "2", "81"]`), header left out.
fn table_rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| l.starts_with('|'))
        .skip(1)
        .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect())
        .collect()
}

fn assert_finds_a(what: &str, snapshot: &Path, count: i64, max_p: u32, key_group: u32) {
    let (rows, plan) = query_a(snapshot);
    assert_eq!(
        table_rows(&rows),
        vec![vec!["a".to_string(), count.to_string(), key_group.to_string()]],
        "{what}: a's row, in Flink's key group {key_group}:\n{rows}"
    );
    assert!(
        plan.contains(&format!("key_groups=1 of {max_p} [{key_group}]")),
        "{what}: the lookup reads Flink's key group {key_group} of {max_p} only:\n{plan}"
    );
}

/// `dump --key a` of the word count's `count`: the one entry, in `key_group`.
fn assert_dump_finds_a(what: &str, snapshot: &Path, count: i64, key_group: u32) {
    let args = [
        "dump",
        path_str(snapshot),
        "--uid",
        WORD_COUNT,
        "--state",
        "count",
        "--key",
        "a",
    ];
    let text = stdout(&args);
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        vec![format!("kg={key_group} key=\"a\" ns=() value={count}")],
        "{what}: dump --key a"
    );
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout(&json_args)).expect("one JSON document");
    assert_eq!(
        rows,
        vec![serde_json::json!({"key": "a", "key_group": key_group, "namespace": null, "value": count})],
        "{what}: dump --key a --json"
    );
}

/// The operator ids `show --json` lists.
fn shown_operator_ids(snapshot: &Path) -> BTreeSet<String> {
    let doc: serde_json::Value =
        serde_json::from_str(&stdout(&["show", "--json", path_str(snapshot)])).expect("one JSON document");
    doc["operators"]
        .as_array()
        .expect("operators")
        .iter()
        .map(|o| o["operator_id"].as_str().expect("operator_id").to_string())
        .collect()
}

#[test]
fn query_of_a_reads_flinks_key_group() {
    for name in SAVEPOINTS {
        let count = expected_count_of_a(name);
        assert_finds_a(name, &savepoint(name), count, 128, A_KEY_GROUP);
    }
}

#[test]
fn convert_keeps_flinks_key_groups_so_diff_reports_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in SAVEPOINTS {
        let sp = savepoint(name);
        let c = dir.path().join(name);
        ok(&["convert", path_str(&sp), path_str(&c)]);

        let out = ok(&["diff", path_str(&sp), path_str(&c)]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("no differences"), "{name}: diff SP C: {text}");
        assert!(!text.contains("kg="), "{name}: diff SP C names no entry: {text}");
        let json: serde_json::Value =
            serde_json::from_str(&stdout(&["diff", "--json", path_str(&sp), path_str(&c)])).expect("diff --json");
        assert_eq!(
            json["differences"],
            serde_json::json!([]),
            "{name}: diff --json: {json}"
        );
        assert_eq!(json["summary"]["identical"], true, "{name}: diff --json: {json}");
        assert_eq!(json["summary"]["keys"], 0, "{name}: diff --json: {json}");

        // The conversion keeps the operator ids and records Flink's scheme.
        assert_eq!(shown_operator_ids(&c), shown_operator_ids(&sp), "{name}: show --json C");
        let meta = SnapshotReader::open(&c).expect("open C");
        let wc = meta.operator(WORD_COUNT).expect("the word count, by its id");
        assert_eq!(wc.operator_id.to_string(), WORD_COUNT, "{name}");
        assert_eq!(wc.key_group_scheme, KeyGroupScheme::Flink, "{name}: C's _metadata");
        for op in &meta.metadata().operators {
            if !op.keyed_states.is_empty() {
                assert_eq!(
                    op.key_group_scheme,
                    KeyGroupScheme::Flink,
                    "{name}: keyed operator {} of C",
                    op.uid
                );
            }
        }
        let schema = stdout(&["schema", "--json", path_str(&c)]);
        assert!(
            schema.contains(r#""key_group_scheme": "flink""#),
            "{name}: schema --json C names the scheme:\n{schema}"
        );

        // The lookups on C find a where Flink put it.
        let count = expected_count_of_a(name);
        assert_dump_finds_a(&format!("{name} converted"), &c, count, A_KEY_GROUP);
        assert_finds_a(&format!("{name} converted"), &c, count, 128, A_KEY_GROUP);
    }
}

#[test]
fn dump_key_finds_a_in_the_flink_savepoint() {
    for name in SAVEPOINTS {
        assert_dump_finds_a(name, &savepoint(name), expected_count_of_a(name), A_KEY_GROUP);
    }
}

#[test]
fn rewrite_to_another_max_parallelism_places_keys_by_flinks_rule() {
    let dir = tempfile::tempdir().expect("tempdir");
    let name = "savepoint-rocksdb-native";
    let count = expected_count_of_a(name);
    let sp = savepoint(name);
    let c = dir.path().join("converted");
    ok(&["convert", path_str(&sp), path_str(&c)]);
    let max_p = format!("{WORD_COUNT}=256");
    // From the conversion, and straight from Flink's savepoint.
    for input in [&c, &sp] {
        let r = dir.path().join(format!(
            "rewritten-{}",
            input.file_name().expect("name").to_string_lossy()
        ));
        ok(&["rewrite", path_str(input), path_str(&r), "--max-parallelism", &max_p]);
        let what = format!("rewrite {} --max-parallelism {max_p}", input.display());
        assert_finds_a(&what, &r, count, 256, A_KEY_GROUP_OF_256);
        assert_dump_finds_a(&what, &r, count, A_KEY_GROUP_OF_256);
        let meta = SnapshotReader::open(&r).expect("open");
        let wc = meta.operator(WORD_COUNT).expect("word count");
        assert_eq!(wc.max_parallelism, 256);
        assert_eq!(wc.key_group_scheme, KeyGroupScheme::Flink, "{what}: _metadata");
    }
}

/// Export of the converted savepoint, its schema (`schema --json`, which names Flink's
/// scheme) and import give back a savepoint `diff` finds identical, with a in key group 81.
/// (Until 589104f `import` refused Flink-keyed state, exit 2: `error: operator "…": its keys
/// are in flink key groups, but a subtask's are in statekit key groups` — `UniqueView`, through
/// which each subtask is written, did not forward `KeyedStateView::key_group_scheme`.)
#[test]
fn export_and_import_keep_flinks_key_groups() {
    let dir = tempfile::tempdir().expect("tempdir");
    let name = "savepoint-hashmap-canonical";
    let count = expected_count_of_a(name);
    let c = dir.path().join("converted");
    ok(&["convert", path_str(&savepoint(name)), path_str(&c)]);
    let tables = dir.path().join("tables");
    ok(&["export", path_str(&c), path_str(&tables)]);
    let schema = dir.path().join("schema.json");
    std::fs::write(&schema, stdout(&["schema", "--json", path_str(&c)])).expect("write schema");
    let imported = dir.path().join("imported");
    ok(&[
        "import",
        path_str(&tables),
        path_str(&imported),
        "--schema",
        path_str(&schema),
    ]);
    let meta = SnapshotReader::open(&imported).expect("open");
    assert_eq!(
        meta.operator(WORD_COUNT).expect("word count").key_group_scheme,
        KeyGroupScheme::Flink
    );
    assert_finds_a("imported", &imported, count, 128, A_KEY_GROUP);
    assert_dump_finds_a("imported", &imported, count, A_KEY_GROUP);
    let out = ok(&["diff", path_str(&c), path_str(&imported)]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("kg="), "diff C imported names no entry: {text}");
}

/// The same on Flink's checkpoints (changelog, materialized changelog, incremental RocksDB):
/// the query reads a in key group 81, a conversion `diff` finds identical, and a rewrite to
/// 256 key groups puts a in 209.
#[test]
fn flink_checkpoints_keep_flinks_key_groups() {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in [
        "checkpoint-changelog-hashmap",
        "checkpoint-changelog-hashmap-materialized",
        "checkpoint-rocksdb-incremental",
    ] {
        let text = std::fs::read_to_string(fixture(name).join("expected-chk-2.json")).expect("expected");
        let want: serde_json::Value = serde_json::from_str(&text).expect("json");
        let count = want["keyed_state"]["word-count"]["count"]["values"]["a"]
            .as_i64()
            .expect("a's count");
        let metadata = fixture(name).join(want["metadata_file"].as_str().expect("metadata_file"));
        let cp = metadata.parent().expect("checkpoint directory");
        assert_finds_a(name, cp, count, 128, A_KEY_GROUP);
        assert_dump_finds_a(name, cp, count, A_KEY_GROUP);
        let c = dir.path().join(name);
        ok(&["convert", path_str(cp), path_str(&c)]);
        let out = ok(&["diff", path_str(cp), path_str(&c)]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("no differences"), "{name}: diff CP C: {text}");
        assert_finds_a(&format!("{name} converted"), &c, count, 128, A_KEY_GROUP);
        let r = dir.path().join(format!("{name}-256"));
        ok(&[
            "rewrite",
            path_str(cp),
            path_str(&r),
            "--max-parallelism",
            &format!("{WORD_COUNT}=256"),
        ]);
        assert_finds_a(&format!("{name} rewritten"), &r, count, 256, A_KEY_GROUP_OF_256);
    }
}

/// The issue's own example: the word count's state addressed by its uid, on a Flink 1.x
/// savepoint that stores operator ids only — without `--flink-uid` (the uid whose hash is the
/// id names it, as in every command) and with it (the operator is then named by it).
#[test]
fn query_by_uid_names_the_operator_stored_by_id() {
    for name in SAVEPOINTS {
        let sp = savepoint(name);
        let want = expected_count_of_a(name).to_string();
        let sql = r#"SELECT value FROM "word-count"."count" WHERE key = 'a'"#;
        for extra in [&[][..], &["--flink-uid", "word-count"][..]] {
            let mut args = vec!["query", "--format", "csv"];
            args.extend_from_slice(extra);
            args.extend([path_str(&sp), sql]);
            let out = stdout(&args);
            assert_eq!(
                out.lines().collect::<Vec<_>>(),
                ["value", want.as_str()],
                "{name} {extra:?}: {out}"
            );
        }
        let explain = stdout(&[
            "query",
            path_str(&sp),
            r#"EXPLAIN SELECT value FROM "word-count"."count" WHERE key = 'a'"#,
        ]);
        assert!(
            explain.contains(&format!("key_groups=1 of 128 [{A_KEY_GROUP}]")),
            "{name}: {explain}"
        );
        // The operator by id still answers, as before.
        let by_id = stdout(&[
            "query",
            "--format",
            "csv",
            path_str(&sp),
            &format!(r#"SELECT value FROM "{WORD_COUNT}"."count" WHERE key = 'a'"#),
        ]);
        assert_eq!(by_id.lines().nth(1), Some(want.as_str()), "{name}: {by_id}");
    }
}

/// `show` says which operators' keys are in Flink's key groups in a statekit savepoint
/// converted from Flink (text and `--json`); a statekit job's savepoint and Flink's own
/// savepoint print as before (no such line, no such field).
#[test]
fn show_names_the_key_group_scheme_of_a_conversion() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sp = savepoint("savepoint-hashmap-canonical");
    let c = dir.path().join("c");
    ok(&["convert", path_str(&sp), path_str(&c)]);
    let text = stdout(&["show", path_str(&c)]);
    let line = "key-group scheme flink: keys in the groups Flink's murmurHash(key.hashCode())";
    assert!(text.contains(line), "{text}");
    let json: serde_json::Value = serde_json::from_str(&stdout(&["show", "--json", path_str(&c)])).expect("json");
    let ops = json["operators"].as_array().expect("operators");
    let word_count = ops.iter().find(|o| o["operator_id"] == WORD_COUNT).expect("word count");
    assert_eq!(word_count["key_group_scheme"], "flink");
    // Operators without keyed state have no key-group scheme to name.
    assert!(ops
        .iter()
        .filter(|o| o["keyed_states"].as_array().is_some_and(|k| k.is_empty()))
        .all(|o| o.get("key_group_scheme").is_none()));
    let flink_own = stdout(&["show", "--json", path_str(&sp)]);
    assert!(!flink_own.contains("key_group_scheme"), "{flink_own}");
    assert!(!stdout(&["show", path_str(&sp)]).contains(line));
}
