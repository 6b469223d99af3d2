//! A verification as a report: what `statekit verify` prints, serialised by serde (its
//! `--json` document). Built from a [`Verification`] of a snapshot, or from the checks of one
//! changelog log file.
//!
//! The keys are in name order, as the tool has always printed them (its JSON was built as
//! sorted maps): the fields are declared in that order.

use super::Verification;
use serde::Serialize;
use statekit_changelog::verify::LogCheck;
use statekit_format::Problem;

/// The `format` of a report of one changelog log file.
pub const LOG_FILE_FORMAT: &str = "changelog-log-v1";

/// What a verification found: counts, the changelog's counts, every problem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Bytes read: the data files and `_metadata` (a log file: its bytes).
    pub bytes: u64,
    /// What the changelog checks read, when the snapshot holds changelog state (always for a
    /// log file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changelog: Option<LogCheckReport>,
    /// Keyed entries, operator-state elements and broadcast entries read (a snapshot's
    /// report only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entries: Option<u64>,
    /// Data files read in full (a log file: 1).
    pub files: u64,
    /// The snapshot's format (`canonical-v1`, `native-rocksdb`, …), or [`LOG_FILE_FORMAT`].
    pub format: String,
    /// No problem found.
    pub ok: bool,
    /// The path as the user gave it.
    pub path: String,
    /// A log file prepared by a running job and not yet written (all zero bytes): nothing
    /// to check.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub prepared_unwritten: bool,
    /// Every problem, in the order found.
    pub problems: Vec<ProblemReport>,
}

impl VerifyReport {
    /// The report of a snapshot at `path` of `format` ([`Verification`] of it).
    pub fn of_snapshot(path: impl Into<String>, format: impl Into<String>, v: &Verification) -> Self {
        VerifyReport {
            bytes: v.bytes,
            changelog: v.changelog.as_ref().map(LogCheckReport::from),
            entries: Some(v.entries),
            files: v.files,
            format: format.into(),
            ok: v.problems.is_empty(),
            path: path.into(),
            prepared_unwritten: false,
            problems: v.problems.iter().map(ProblemReport::from).collect(),
        }
    }

    /// The report of one changelog log file at `path`: what its checks read, and `problems`.
    pub fn of_log_file(path: impl Into<String>, log: &LogCheck, problems: &[Problem]) -> Self {
        VerifyReport {
            bytes: log.bytes,
            changelog: Some(LogCheckReport::from(log)),
            entries: None,
            files: 1,
            format: LOG_FILE_FORMAT.to_string(),
            ok: problems.is_empty(),
            path: path.into(),
            prepared_unwritten: false,
            problems: problems.iter().map(ProblemReport::from).collect(),
        }
    }

    /// The report of a log file at `path` a running job prepared and has not written yet
    /// (`bytes` zero bytes): OK.
    pub fn of_prepared_log_file(path: impl Into<String>, bytes: u64) -> Self {
        VerifyReport {
            bytes,
            changelog: Some(LogCheckReport::default()),
            entries: None,
            files: 1,
            format: LOG_FILE_FORMAT.to_string(),
            ok: true,
            path: path.into(),
            prepared_unwritten: true,
            problems: Vec::new(),
        }
    }

    /// Whether this is the report of one changelog log file (not of a snapshot).
    pub fn is_log_file(&self) -> bool {
        self.format == LOG_FILE_FORMAT
    }
}

/// What the changelog checks read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LogCheckReport {
    /// Change records in the log files.
    pub change_records: u64,
    /// Change sets in the log files.
    pub change_sets: u64,
    /// Bytes of the log files.
    pub log_bytes: u64,
    /// Log files decoded in full.
    pub log_files: u64,
    /// Records a restore would replay, checked against their states.
    pub replayed_records: u64,
}

impl From<&LogCheck> for LogCheckReport {
    fn from(l: &LogCheck) -> Self {
        LogCheckReport {
            change_records: l.records,
            change_sets: l.change_sets,
            log_bytes: l.bytes,
            log_files: l.log_files,
            replayed_records: l.replayed,
        }
    }
}

/// A [`Problem`] as printed: its parts (what a script acts on) and its line (`text`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProblemReport {
    /// Where in the snapshot the file is referenced, when the file does not say.
    pub context: Option<String>,
    /// The field, when known.
    pub field: Option<String>,
    /// The file.
    pub file: String,
    /// `corrupt`, `unsupported`, `caller`, `notfound`, `transient` or `internal`.
    pub kind: String,
    /// Byte offset in the file, when known.
    pub offset: Option<u64>,
    /// What is wrong.
    pub reason: String,
    /// The line `statekit verify` prints (the problem's `Display`).
    pub text: String,
}

impl From<&Problem> for ProblemReport {
    fn from(p: &Problem) -> Self {
        ProblemReport {
            context: p.context.clone(),
            field: p.field.clone(),
            file: p.file.clone(),
            kind: format!("{:?}", p.kind).to_lowercase(),
            offset: p.offset,
            reason: p.reason.clone(),
            text: p.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use statekit_core::ErrorKind;

    #[test]
    fn snapshot_report_json() {
        let v = Verification {
            files: 7,
            bytes: 4366,
            entries: 81,
            changelog: None,
            metadata_sound: true,
            problems: vec![Problem::corrupt(
                "sp/op/0.keyed",
                117,
                "block.crc32",
                "checksum mismatch",
            )],
        };
        let r = VerifyReport::of_snapshot("sp", "canonical-v1", &v);
        assert!(!r.ok);
        assert!(!r.is_log_file());
        assert_eq!(
            serde_json::to_string_pretty(&r).expect("json"),
            r#"{
  "bytes": 4366,
  "entries": 81,
  "files": 7,
  "format": "canonical-v1",
  "ok": false,
  "path": "sp",
  "problems": [
    {
      "context": null,
      "field": "block.crc32",
      "file": "sp/op/0.keyed",
      "kind": "corrupt",
      "offset": 117,
      "reason": "checksum mismatch",
      "text": "sp/op/0.keyed: offset 117: block.crc32: checksum mismatch"
    }
  ]
}"#
        );
    }

    #[test]
    fn changelog_reports_json() {
        let log = LogCheck {
            log_files: 2,
            bytes: 900,
            change_sets: 3,
            records: 40,
            replayed: 12,
        };
        let v = Verification {
            files: 3,
            bytes: 1000,
            entries: 5,
            changelog: Some(log),
            metadata_sound: true,
            problems: Vec::new(),
        };
        assert_eq!(
            serde_json::to_string(&VerifyReport::of_snapshot("chk-3", "changelog", &v)).expect("json"),
            r#"{"bytes":1000,"changelog":{"change_records":40,"change_sets":3,"log_bytes":900,"log_files":2,"replayed_records":12},"entries":5,"files":3,"format":"changelog","ok":true,"path":"chk-3","problems":[]}"#
        );
        let missing = Problem::of_file("a.skcl", "gone", ErrorKind::NotFound);
        let r = VerifyReport::of_log_file("a.skcl", &log, &[missing]);
        assert!(r.is_log_file());
        assert_eq!(
            serde_json::to_string(&r).expect("json"),
            r#"{"bytes":900,"changelog":{"change_records":40,"change_sets":3,"log_bytes":900,"log_files":2,"replayed_records":12},"files":1,"format":"changelog-log-v1","ok":false,"path":"a.skcl","problems":[{"context":null,"field":null,"file":"a.skcl","kind":"notfound","offset":null,"reason":"gone","text":"a.skcl: gone"}]}"#
        );
        assert_eq!(
            serde_json::to_string(&VerifyReport::of_prepared_log_file("b.skcl", 4096)).expect("json"),
            r#"{"bytes":4096,"changelog":{"change_records":0,"change_sets":0,"log_bytes":0,"log_files":0,"replayed_records":0},"files":1,"format":"changelog-log-v1","ok":true,"path":"b.skcl","prepared_unwritten":true,"problems":[]}"#
        );
    }
}
