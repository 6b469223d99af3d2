//! Naming the part of a plan a read-only session refuses, in SQL's words
//! (`CREATE EXTERNAL TABLE`, `COPY … TO`, `INSERT INTO`, `SET`).

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::logical_expr::LogicalPlan;

/// The first DDL, DML, `COPY` or statement node of `plan` (subqueries and `EXPLAIN`ed plans
/// included), named as SQL spells it; `None` if it has none.
pub(crate) fn describe(plan: &LogicalPlan) -> Option<String> {
    let mut found = None;
    let _ = plan.apply_with_subqueries(|node| {
        found = match node {
            LogicalPlan::Ddl(ddl) => Some(words(ddl.name())),
            LogicalPlan::Dml(dml) => Some(dml.op.name().to_ascii_uppercase()),
            LogicalPlan::Copy(_) => Some("COPY … TO".to_string()),
            LogicalPlan::Statement(s) => Some(match s.name() {
                "SetVariable" => "SET".to_string(),
                "TransactionStart" => "BEGIN".to_string(),
                "TransactionEnd" => "COMMIT / ROLLBACK".to_string(),
                other => words(other),
            }),
            _ => None,
        };
        Ok(if found.is_some() {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}

/// `CreateExternalTable` → `CREATE EXTERNAL TABLE`.
fn words(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push(' ');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::words;

    #[test]
    fn camel_case_names_become_sql_words() {
        assert_eq!(words("CreateExternalTable"), "CREATE EXTERNAL TABLE");
        assert_eq!(words("DropView"), "DROP VIEW");
        assert_eq!(words("Prepare"), "PREPARE");
    }
}
