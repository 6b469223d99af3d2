//! Which key groups a scan must read, from the predicates DataFusion pushes into it: a key
//! equality or `IN` list maps to the key groups of those keys (the key encoded by the
//! state's key type, hashed as the project assigns key groups), a comparison on
//! `key_group` to a range; a boolean key itself (`key`, `NOT key`: DataFusion's form of
//! `key = true` / `key = false`) to its key group; `AND` intersects, `OR` unites. Anything
//! else prunes nothing.

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};
use statekit_core::schema::{encode_value, Value};
use statekit_core::{KeyGroupAssigner, TypeSchema};
use std::collections::BTreeSet;

/// The key groups `expr` can be true in (`None`: any).
pub(crate) fn key_groups(expr: &Expr, key_schema: &TypeSchema, groups: &KeyGroupAssigner) -> Option<BTreeSet<u32>> {
    let all = || (0..groups.max_parallelism()).collect::<BTreeSet<u32>>();
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => match (
                key_groups(left, key_schema, groups),
                key_groups(right, key_schema, groups),
            ) {
                (Some(a), Some(b)) => Some(a.intersection(&b).copied().collect()),
                (a, b) => a.or(b),
            },
            Operator::Or => {
                let (a, b) = (
                    key_groups(left, key_schema, groups)?,
                    key_groups(right, key_schema, groups)?,
                );
                Some(a.union(&b).copied().collect())
            }
            _ => {
                let (column, literal, op) = match (column_name(left), literal(right), column_name(right), literal(left))
                {
                    (Some(c), Some(l), _, _) => (c, l, *op),
                    (_, _, Some(c), Some(l)) => (c, l, op.swap()?),
                    _ => return None,
                };
                match column {
                    "key" if op == Operator::Eq => {
                        Some(key_group_of(literal, key_schema, groups)?.into_iter().collect())
                    }
                    "key_group" => {
                        let v = key_group_literal(literal)?;
                        let keep = |kg: &u32| {
                            let kg = i64::from(*kg);
                            match op {
                                Operator::Eq => kg == v,
                                Operator::Lt => kg < v,
                                Operator::LtEq => kg <= v,
                                Operator::Gt => kg > v,
                                Operator::GtEq => kg >= v,
                                _ => true,
                            }
                        };
                        if !matches!(
                            op,
                            Operator::Eq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
                        ) {
                            return None;
                        }
                        Some(all().into_iter().filter(keep).collect())
                    }
                    _ => None,
                }
            }
        },
        Expr::InList(list) if !list.negated => {
            let column = column_name(&list.expr)?;
            let mut out = BTreeSet::new();
            for item in &list.list {
                let l = literal(item)?;
                match column {
                    "key" => out.extend(key_group_of(l, key_schema, groups)?),
                    "key_group" => {
                        if let Ok(kg) = u32::try_from(key_group_literal(l)?) {
                            out.insert(kg);
                        }
                    }
                    _ => return None,
                }
            }
            Some(out.into_iter().filter(|kg| *kg < groups.max_parallelism()).collect())
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) if column_name(expr) == Some("key_group") => {
            let (lo, hi) = (key_group_literal(literal(low)?)?, key_group_literal(literal(high)?)?);
            Some(
                all()
                    .into_iter()
                    .filter(|kg| (lo..=hi).contains(&i64::from(*kg)))
                    .collect(),
            )
        }
        // A boolean key: DataFusion simplifies `key = true` to `key` and `key = false` to
        // `NOT key` before pushing them down.
        Expr::Column(_) if column_name(expr) == Some("key") && *key_schema == TypeSchema::Bool => Some(
            key_group_of(&ScalarValue::Boolean(Some(true)), key_schema, groups)?
                .into_iter()
                .collect(),
        ),
        Expr::Not(inner) if column_name(inner) == Some("key") && *key_schema == TypeSchema::Bool => Some(
            key_group_of(&ScalarValue::Boolean(Some(false)), key_schema, groups)?
                .into_iter()
                .collect(),
        ),
        _ => None,
    }
}

/// Whether `expr` prunes key groups (the scan then reads fewer; DataFusion still applies it).
pub(crate) fn prunes(expr: &Expr, key_schema: &TypeSchema, groups: &KeyGroupAssigner) -> bool {
    key_groups(expr, key_schema, groups).is_some()
}

fn column_name(e: &Expr) -> Option<&str> {
    match e {
        Expr::Column(c) => Some(c.name.as_str()),
        Expr::Cast(c) => column_name(&c.expr),
        _ => None,
    }
}

fn literal(e: &Expr) -> Option<&ScalarValue> {
    match e {
        Expr::Literal(v, _) => Some(v),
        _ => None,
    }
}

fn key_group_literal(v: &ScalarValue) -> Option<i64> {
    match v {
        ScalarValue::Int8(Some(x)) => Some(i64::from(*x)),
        ScalarValue::Int16(Some(x)) => Some(i64::from(*x)),
        ScalarValue::Int32(Some(x)) => Some(i64::from(*x)),
        ScalarValue::Int64(Some(x)) => Some(*x),
        ScalarValue::UInt8(Some(x)) => Some(i64::from(*x)),
        ScalarValue::UInt16(Some(x)) => Some(i64::from(*x)),
        ScalarValue::UInt32(Some(x)) => Some(i64::from(*x)),
        ScalarValue::UInt64(Some(x)) => i64::try_from(*x).ok(),
        _ => None,
    }
}

/// The key group of a key given as a literal (`None`: the literal is not a key of this type,
/// so nothing can be pruned safely; a null key matches nothing: no key group).
fn key_group_of(v: &ScalarValue, key_schema: &TypeSchema, groups: &KeyGroupAssigner) -> Option<Option<u32>> {
    if v.is_null() {
        return Some(None);
    }
    let value = match (key_schema, v) {
        (
            TypeSchema::Utf8,
            ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)),
        ) => Value::Str(s.clone()),
        (
            TypeSchema::Bytes,
            ScalarValue::Binary(Some(b)) | ScalarValue::LargeBinary(Some(b)) | ScalarValue::BinaryView(Some(b)),
        ) => Value::Bytes(b.clone()),
        (TypeSchema::Bool, ScalarValue::Boolean(Some(b))) => Value::Bool(*b),
        (TypeSchema::I32, v) => Value::I32(i32::try_from(key_group_literal(v)?).ok()?),
        (TypeSchema::I64, v) => Value::I64(key_group_literal(v)?),
        (TypeSchema::U64, ScalarValue::UInt64(Some(x))) => Value::U64(*x),
        (TypeSchema::U64, v) => Value::U64(u64::try_from(key_group_literal(v)?).ok()?),
        _ => return None,
    };
    let bytes = encode_value(key_schema, &value).ok()?;
    Some(Some(groups.key_group(&bytes).ok()?))
}
