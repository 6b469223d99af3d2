//! The written form of edits and of a migration's options, as `statekit rewrite` takes them
//! on its command line: `--rename-uid OLD=NEW`, `--parallelism UID=N`, `--memory 256MiB`,
//! `--shard 0/4`, ….
//!
//! Each edit kind has a flag ([`EditSyntax::flag`]) and a value shape
//! ([`EditSyntax::shape`]); [`EditSyntax::parse`] turns a flag's value into an [`Edit`], and
//! `"--rename-uid a=b".parse::<Edit>()` a whole written edit (flag and value, separated by a
//! space or `=`). What does not parse is an [`EditParseError`] naming the flag, the value and
//! the shape expected — a caller mistake ([`ErrorKind::Caller`]).
//!
//! Key filters ([`Edit::KeepKeys`], [`Edit::DropKeys`]) have no written form here: their keys
//! are read from files by each operator's key type, which takes the snapshot.

use crate::Edit;
use statekit_core::ErrorKind;
use std::num::ParseIntError;
use std::str::FromStr;

/// The written kinds of [`Edit`]: one command-line flag each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EditSyntax {
    /// `--set-uid OPERATOR_ID=UID`: [`Edit::SetUid`].
    SetUid,
    /// `--rename-uid OLD=NEW`: [`Edit::RenameUid`].
    RenameUid,
    /// `--drop-operator UID`: [`Edit::DropOperator`].
    DropOperator,
    /// `--drop-state UID/STATE`: [`Edit::DropState`].
    DropState,
    /// `--rename-state UID/OLD=NEW`: [`Edit::RenameState`].
    RenameState,
    /// `--parallelism UID=N`: [`Edit::Parallelism`].
    Parallelism,
    /// `--max-parallelism UID=N`: [`Edit::MaxParallelism`].
    MaxParallelism,
    /// `--purge-expired` (no value): [`Edit::PurgeExpired`].
    PurgeExpired,
}

impl EditSyntax {
    /// Every written kind, in the order `statekit rewrite` applies its flags (uids are set
    /// and renamed first; the other edits name operators by their new uid).
    pub const ALL: [EditSyntax; 8] = [
        EditSyntax::SetUid,
        EditSyntax::RenameUid,
        EditSyntax::DropOperator,
        EditSyntax::DropState,
        EditSyntax::RenameState,
        EditSyntax::Parallelism,
        EditSyntax::MaxParallelism,
        EditSyntax::PurgeExpired,
    ];

    /// The command-line flag: `--rename-uid`.
    pub fn flag(self) -> &'static str {
        match self {
            EditSyntax::SetUid => "--set-uid",
            EditSyntax::RenameUid => "--rename-uid",
            EditSyntax::DropOperator => "--drop-operator",
            EditSyntax::DropState => "--drop-state",
            EditSyntax::RenameState => "--rename-state",
            EditSyntax::Parallelism => "--parallelism",
            EditSyntax::MaxParallelism => "--max-parallelism",
            EditSyntax::PurgeExpired => "--purge-expired",
        }
    }

    /// The shape of the flag's value (`OLD=NEW`), `None` for a flag without one.
    pub fn shape(self) -> Option<&'static str> {
        Some(match self {
            EditSyntax::SetUid => "OPERATOR_ID=UID",
            EditSyntax::RenameUid => "OLD=NEW",
            EditSyntax::DropOperator => "UID",
            EditSyntax::DropState => "UID/STATE",
            EditSyntax::RenameState => "UID/OLD=NEW",
            EditSyntax::Parallelism | EditSyntax::MaxParallelism => "UID=N",
            EditSyntax::PurgeExpired => return None,
        })
    }

    /// The kind whose flag is `flag` (`--rename-uid`).
    pub fn of_flag(flag: &str) -> Option<EditSyntax> {
        EditSyntax::ALL.into_iter().find(|s| s.flag() == flag)
    }

    /// The edit the flag's `value` spells. A uid may hold `=` where it is the last part
    /// (`UID=N` splits at the last `=`); elsewhere the first separator splits.
    pub fn parse(self, value: &str) -> Result<Edit, EditParseError> {
        let flag = self.flag();
        let shape = self.shape().unwrap_or_default();
        Ok(match self {
            EditSyntax::SetUid => {
                let (id, uid) = split(flag, value, '=', shape)?;
                Edit::SetUid {
                    operator_id: id.into(),
                    uid: uid.into(),
                }
            }
            EditSyntax::RenameUid => {
                let (from, to) = split(flag, value, '=', shape)?;
                Edit::RenameUid {
                    from: from.into(),
                    to: to.into(),
                }
            }
            EditSyntax::DropOperator => Edit::DropOperator { uid: value.into() },
            EditSyntax::DropState => {
                let (uid, state) = split(flag, value, '/', shape)?;
                Edit::DropState {
                    uid: uid.into(),
                    state: state.into(),
                }
            }
            EditSyntax::RenameState => {
                let (uid, names) = split(flag, value, '/', shape)?;
                let (from, to) = split(flag, names, '=', shape)?;
                Edit::RenameState {
                    uid: uid.into(),
                    from: from.into(),
                    to: to.into(),
                }
            }
            EditSyntax::Parallelism => {
                let (uid, parallelism) = uid_number(flag, value)?;
                Edit::Parallelism { uid, parallelism }
            }
            EditSyntax::MaxParallelism => {
                let (uid, max_parallelism) = uid_number(flag, value)?;
                Edit::MaxParallelism { uid, max_parallelism }
            }
            EditSyntax::PurgeExpired => {
                return Err(EditParseError::UnexpectedValue {
                    flag,
                    value: value.into(),
                })
            }
        })
    }
}

/// A written edit: its flag, then (for a flag with a value) a space or `=` and the value —
/// `--rename-uid a=b`, `--parallelism=counter=4`, `--purge-expired`.
impl FromStr for Edit {
    type Err = EditParseError;

    fn from_str(s: &str) -> Result<Edit, EditParseError> {
        let s = s.trim();
        let flag_end = s.find([' ', '=']).unwrap_or(s.len());
        let (flag, rest) = s.split_at(flag_end);
        let syntax = EditSyntax::of_flag(flag).ok_or_else(|| EditParseError::UnknownEdit { text: s.into() })?;
        // The separator: one `=` or a run of spaces.
        let value = rest.strip_prefix('=').unwrap_or_else(|| rest.trim_start());
        match (syntax, rest.is_empty()) {
            (EditSyntax::PurgeExpired, true) => Ok(Edit::PurgeExpired),
            (EditSyntax::PurgeExpired, false) => syntax.parse(value),
            (_, true) => Err(EditParseError::MissingValue {
                flag: syntax.flag(),
                shape: syntax.shape().unwrap_or_default(),
            }),
            (_, false) => syntax.parse(value),
        }
    }
}

/// Why a written edit, size or shard does not parse: always a caller mistake. The text names
/// the flag, the value as given and what was expected (`statekit` prints it as it is).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EditParseError {
    /// The value does not have the flag's shape (a separator or a side is missing).
    #[error("{flag} {value:?}: expected {shape}")]
    Shape {
        /// The flag (`--rename-uid`).
        flag: &'static str,
        /// The part of the value that lacks the shape.
        value: String,
        /// The shape expected (`OLD=NEW`).
        shape: &'static str,
    },
    /// The `N` of `UID=N` is not a whole number that fits.
    #[error("{flag} {value:?}: {number:?} is not a whole number")]
    NotANumber {
        /// The flag (`--parallelism`).
        flag: &'static str,
        /// The value as given.
        value: String,
        /// Its number part.
        number: String,
        /// Why it does not parse.
        #[source]
        source: ParseIntError,
    },
    /// A written edit whose flag has a value was given without one.
    #[error("{flag}: expected a value {shape}")]
    MissingValue {
        /// The flag.
        flag: &'static str,
        /// The shape expected.
        shape: &'static str,
    },
    /// A value given to a flag that takes none (`--purge-expired`).
    #[error("{flag} takes no value (got {value:?})")]
    UnexpectedValue {
        /// The flag.
        flag: &'static str,
        /// The value given.
        value: String,
    },
    /// The text does not start with an edit's flag.
    #[error("{text:?}: not an edit (one of --set-uid, --rename-uid, --drop-operator, --drop-state, --rename-state, --parallelism, --max-parallelism, --purge-expired)")]
    UnknownEdit {
        /// The text given.
        text: String,
    },
    /// A size without its number (`MiB`, `x`).
    #[error("{value:?}: expected a size such as 256MiB")]
    Size {
        /// The size as given.
        value: String,
    },
    /// A size with a unit other than B, KiB, MiB, GiB (and their short spellings).
    #[error("{value:?}: unknown unit {unit:?} (KiB, MiB, GiB)")]
    SizeUnit {
        /// The size as given.
        value: String,
        /// The unit, lower-cased.
        unit: String,
    },
    /// A size of zero bytes, or more than this machine's `usize`.
    #[error("{value:?}: out of range")]
    SizeOutOfRange {
        /// The size as given.
        value: String,
    },
    /// A shard that is not `I/N` with `0 <= I < N`.
    #[error("{value:?}: expected I/N with 0 <= I < N, e.g. 0/4")]
    Shard {
        /// The shard as given.
        value: String,
    },
}

impl EditParseError {
    /// What kind of failure this is: always [`ErrorKind::Caller`] (fix the flag).
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::Caller
    }
}

/// Splits `value` at the first `sep`, both sides non-empty.
fn split<'s>(
    flag: &'static str,
    value: &'s str,
    sep: char,
    shape: &'static str,
) -> Result<(&'s str, &'s str), EditParseError> {
    match value.split_once(sep) {
        Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a, b)),
        _ => Err(EditParseError::Shape {
            flag,
            value: value.into(),
            shape,
        }),
    }
}

/// `UID=N` (split at the last `=`, so a uid may hold one).
fn uid_number(flag: &'static str, value: &str) -> Result<(String, u32), EditParseError> {
    let (uid, n) = value
        .rsplit_once('=')
        .filter(|(u, n)| !u.is_empty() && !n.is_empty())
        .ok_or_else(|| EditParseError::Shape {
            flag,
            value: value.into(),
            shape: "UID=N",
        })?;
    let n = n.parse().map_err(|source| EditParseError::NotANumber {
        flag,
        value: value.into(),
        number: n.into(),
        source,
    })?;
    Ok((uid.to_string(), n))
}

/// A size in bytes: a number, optionally with a unit — B, KiB/KB/K, MiB/MB/M, GiB/GB/G (any
/// case; all powers of 1024). Zero is out of range. `--memory 256MiB`.
pub fn parse_size(s: &str) -> Result<usize, EditParseError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num.parse().map_err(|_| EditParseError::Size { value: s.into() })?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        other => {
            return Err(EditParseError::SizeUnit {
                value: s.into(),
                unit: other.into(),
            })
        }
    };
    n.checked_mul(1usize << shift)
        .filter(|&b| b > 0)
        .ok_or_else(|| EditParseError::SizeOutOfRange { value: s.into() })
}

/// A shard `I/N` (`0 <= I < N`): `(I, N)`, as [`crate::MigrateOptions::shard`] takes it.
pub fn parse_shard(s: &str) -> Result<(u32, u32), EditParseError> {
    let bad = || EditParseError::Shard { value: s.into() };
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (u32, u32) = (i.parse().map_err(|_| bad())?, n.parse().map_err(|_| bad())?);
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole text an error prints, its sources included (as `statekit` prints it).
    fn chain(e: &EditParseError) -> String {
        let mut s = e.to_string();
        let mut cause = std::error::Error::source(e);
        while let Some(c) = cause {
            s.push_str(&format!(": {c}"));
            cause = c.source();
        }
        s
    }

    fn parse(syntax: EditSyntax, value: &str) -> Edit {
        match syntax.parse(value) {
            Ok(e) => e,
            Err(e) => panic!("{} {value:?}: {e}", syntax.flag()),
        }
    }

    fn refused(syntax: EditSyntax, value: &str) -> String {
        match syntax.parse(value) {
            Ok(e) => panic!("{} {value:?} parsed as {e:?}", syntax.flag()),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Caller);
                chain(&e)
            }
        }
    }

    #[test]
    fn set_uid() {
        assert_eq!(
            parse(EditSyntax::SetUid, "0123abcd=sink=2"),
            Edit::SetUid {
                operator_id: "0123abcd".into(),
                uid: "sink=2".into()
            }
        );
        assert_eq!(
            refused(EditSyntax::SetUid, "x"),
            r#"--set-uid "x": expected OPERATOR_ID=UID"#
        );
        assert_eq!(
            refused(EditSyntax::SetUid, "=x"),
            r#"--set-uid "=x": expected OPERATOR_ID=UID"#
        );
    }

    #[test]
    fn rename_uid() {
        assert_eq!(
            parse(EditSyntax::RenameUid, "word-counter=enricher"),
            Edit::RenameUid {
                from: "word-counter".into(),
                to: "enricher".into()
            }
        );
        assert_eq!(
            refused(EditSyntax::RenameUid, "a="),
            r#"--rename-uid "a=": expected OLD=NEW"#
        );
    }

    #[test]
    fn drop_operator() {
        assert_eq!(
            parse(EditSyntax::DropOperator, "a/b=c"),
            Edit::DropOperator { uid: "a/b=c".into() }
        );
    }

    #[test]
    fn drop_state() {
        assert_eq!(
            parse(EditSyntax::DropState, "op/st/x"),
            Edit::DropState {
                uid: "op".into(),
                state: "st/x".into()
            }
        );
        assert_eq!(
            refused(EditSyntax::DropState, "x/"),
            r#"--drop-state "x/": expected UID/STATE"#
        );
    }

    #[test]
    fn rename_state() {
        assert_eq!(
            parse(EditSyntax::RenameState, "op/a=b"),
            Edit::RenameState {
                uid: "op".into(),
                from: "a".into(),
                to: "b".into()
            }
        );
        assert_eq!(
            refused(EditSyntax::RenameState, "op"),
            r#"--rename-state "op": expected UID/OLD=NEW"#
        );
        // The names' part is what lacks the shape.
        assert_eq!(
            refused(EditSyntax::RenameState, "word-counter/count"),
            r#"--rename-state "count": expected UID/OLD=NEW"#
        );
    }

    #[test]
    fn parallelism_and_max_parallelism() {
        assert_eq!(
            parse(EditSyntax::Parallelism, "a=b=3"),
            Edit::Parallelism {
                uid: "a=b".into(),
                parallelism: 3
            }
        );
        assert_eq!(
            parse(EditSyntax::MaxParallelism, "op=256"),
            Edit::MaxParallelism {
                uid: "op".into(),
                max_parallelism: 256
            }
        );
        assert_eq!(
            refused(EditSyntax::Parallelism, "=3"),
            r#"--parallelism "=3": expected UID=N"#
        );
        assert_eq!(
            refused(EditSyntax::Parallelism, "word-counter=x"),
            r#"--parallelism "word-counter=x": "x" is not a whole number: invalid digit found in string"#
        );
        assert_eq!(
            refused(EditSyntax::MaxParallelism, "a=99999999999"),
            r#"--max-parallelism "a=99999999999": "99999999999" is not a whole number: number too large to fit in target type"#
        );
        assert_eq!(
            refused(EditSyntax::MaxParallelism, "a=-1"),
            r#"--max-parallelism "a=-1": "-1" is not a whole number: invalid digit found in string"#
        );
    }

    #[test]
    fn purge_expired() {
        assert_eq!("--purge-expired".parse::<Edit>(), Ok(Edit::PurgeExpired));
        assert_eq!(
            refused(EditSyntax::PurgeExpired, "x"),
            r#"--purge-expired takes no value (got "x")"#
        );
    }

    #[test]
    fn whole_edits_parse_with_a_space_or_an_equals_sign() {
        assert_eq!(
            "--rename-uid a=b".parse::<Edit>(),
            Ok(Edit::RenameUid {
                from: "a".into(),
                to: "b".into()
            })
        );
        assert_eq!(
            "--parallelism=counter=4".parse::<Edit>(),
            Ok(Edit::Parallelism {
                uid: "counter".into(),
                parallelism: 4
            })
        );
        assert_eq!(
            "  --drop-operator   x ".parse::<Edit>(),
            Ok(Edit::DropOperator { uid: "x".into() })
        );
        for s in EditSyntax::ALL {
            assert_eq!(EditSyntax::of_flag(s.flag()), Some(s));
        }
    }

    #[test]
    fn whole_edit_errors() {
        let e = "--rename".parse::<Edit>().expect_err("not an edit");
        assert_eq!(e.kind(), ErrorKind::Caller);
        assert!(
            e.to_string()
                .starts_with(r#""--rename": not an edit (one of --set-uid"#),
            "{e}"
        );
        assert_eq!(
            "--rename-uid".parse::<Edit>().expect_err("no value").to_string(),
            "--rename-uid: expected a value OLD=NEW"
        );
        assert_eq!(
            "--purge-expired=now".parse::<Edit>().expect_err("a value").to_string(),
            r#"--purge-expired takes no value (got "now")"#
        );
        assert_eq!(
            "--drop-state=a".parse::<Edit>().expect_err("no state").to_string(),
            r#"--drop-state "a": expected UID/STATE"#
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size(" 4 k "), Ok(4096));
        assert_eq!(parse_size("3GB"), Ok(3 << 30));
        assert_eq!(parse_size("17"), Ok(17));
        assert_eq!(parse_size("17b"), Ok(17));
        let refused = |s: &str| {
            let e = parse_size(s).expect_err(s);
            assert_eq!(e.kind(), ErrorKind::Caller);
            e.to_string()
        };
        assert_eq!(refused("MiB"), r#""MiB": expected a size such as 256MiB"#);
        assert_eq!(refused("12XB"), r#""12XB": unknown unit "xb" (KiB, MiB, GiB)"#);
        assert_eq!(refused("0"), r#""0": out of range"#);
        assert_eq!(
            refused("99999999999999999999GiB"),
            r#""99999999999999999999GiB": expected a size such as 256MiB"#
        );
        #[cfg(target_pointer_width = "64")]
        assert_eq!(refused("17179869184GiB"), r#""17179869184GiB": out of range"#);
    }

    #[test]
    fn shards() {
        assert_eq!(parse_shard("0/4"), Ok((0, 4)));
        assert_eq!(parse_shard("3/4"), Ok((3, 4)));
        for bad in ["3/3", "0/0", "1", "a/2", "1/b", "-1/2", ""] {
            let e = parse_shard(bad).expect_err(bad);
            assert_eq!(e.kind(), ErrorKind::Caller);
            assert_eq!(
                e.to_string(),
                format!("{bad:?}: expected I/N with 0 <= I < N, e.g. 0/4")
            );
        }
    }
}
