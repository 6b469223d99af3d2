//! Flink-style configuration for the word count: `key: value` entries from a YAML file (nested
//! maps or flat dotted keys, as Flink's `config.yaml` and the legacy `flink-conf.yaml` both
//! allow) and from `-D key=value` arguments, which win over the file.

use crate::{ConfigFileError as E, NotAScalar};
use std::path::Path;
use yaml_rust2::{Yaml, YamlLoader};

type Result<T> = std::result::Result<T, E>;

/// One `key = value` entry and where it came from (for error messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The dotted key.
    pub key: String,
    /// The value as text (YAML scalars keep their spelling: `10 min`, `true`, `5`).
    pub value: String,
    /// `-D` or the file's path.
    pub origin: String,
}

/// Reads `file` (if any), then the `-D` definitions, in that order (later entries win).
pub fn load(file: Option<&Path>, defines: &[String]) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|source| E::Read {
            path: path.to_path_buf(),
            source,
        })?;
        out.extend(parse_yaml(&text, &path.display().to_string())?);
    }
    for d in defines {
        let Some((k, v)) = d.split_once('=') else {
            return Err(E::DefineWithoutValue { define: d.clone() });
        };
        let k = k.trim();
        if k.is_empty() {
            return Err(E::DefineWithoutKey { define: d.clone() });
        }
        out.push(Entry {
            key: k.to_string(),
            value: v.trim().to_string(),
            origin: "-D".into(),
        });
    }
    Ok(out)
}

/// Flattens a YAML document into dotted keys.
pub fn parse_yaml(text: &str, origin: &str) -> Result<Vec<Entry>> {
    let docs = YamlLoader::load_from_str(text).map_err(|e| E::Yaml {
        origin: origin.to_string(),
        line: e.marker().line(),
        column: e.marker().col() + 1,
        problem: e.info().to_string(),
    })?;
    let mut out = Vec::new();
    match docs.as_slice() {
        [] => {}
        [doc] => match doc {
            Yaml::Hash(_) => flatten(doc, "", origin, &mut out)?,
            Yaml::Null => {}
            _ => {
                return Err(E::NotAMapAtTop {
                    origin: origin.to_string(),
                })
            }
        },
        _ => {
            return Err(E::Documents {
                origin: origin.to_string(),
                count: docs.len(),
            })
        }
    }
    Ok(out)
}

fn flatten(node: &Yaml, prefix: &str, origin: &str, out: &mut Vec<Entry>) -> Result<()> {
    let Yaml::Hash(map) = node else {
        return Err(E::NotAMap {
            origin: origin.to_string(),
            prefix: prefix.to_string(),
        });
    };
    for (k, v) in map {
        let name = scalar(k).map_err(|source| E::KeyNotScalar {
            origin: origin.to_string(),
            prefix: prefix.to_string(),
            source,
        })?;
        let key = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}.{name}")
        };
        match v {
            Yaml::Hash(_) => flatten(v, &key, origin, out)?,
            Yaml::Array(items) => {
                // Flink's list syntax in flat form: `a;b;c`.
                let items = items
                    .iter()
                    .map(scalar)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|source| E::ListOfMaps {
                        origin: origin.to_string(),
                        key: key.clone(),
                        source,
                    })?;
                out.push(Entry {
                    key,
                    value: items.join(";"),
                    origin: origin.to_string(),
                });
            }
            Yaml::Null => {
                return Err(E::NoValue {
                    origin: origin.to_string(),
                    key,
                })
            }
            _ => out.push(Entry {
                value: scalar(v).map_err(|source| E::ValueNotScalar {
                    origin: origin.to_string(),
                    key: key.clone(),
                    source,
                })?,
                key,
                origin: origin.to_string(),
            }),
        }
    }
    Ok(())
}

fn scalar(y: &Yaml) -> std::result::Result<String, NotAScalar> {
    Ok(match y {
        Yaml::String(s) | Yaml::Real(s) => s.clone(),
        Yaml::Integer(i) => i.to_string(),
        Yaml::Boolean(b) => b.to_string(),
        _ => return Err(NotAScalar),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_and_flat_keys_flatten_alike() {
        let nested = "state:\n  changelog:\n    enabled: true\n    periodic-materialize:\n      interval: 10 min\ndstl.dfs.upload.max-in-flight: 64mb\nlist: [a, b]\n";
        let e = parse_yaml(nested, "f.yaml").expect("yaml");
        let kv: Vec<(&str, &str)> = e.iter().map(|e| (e.key.as_str(), e.value.as_str())).collect();
        assert_eq!(
            kv,
            [
                ("state.changelog.enabled", "true"),
                ("state.changelog.periodic-materialize.interval", "10 min"),
                ("dstl.dfs.upload.max-in-flight", "64mb"),
                ("list", "a;b"),
            ]
        );
    }

    #[test]
    fn bad_yaml_names_the_position() {
        let e = parse_yaml("a: [1, 2\nb: 3\n", "f.yaml").expect_err("bad");
        assert!(e.to_string().starts_with("f.yaml: line "), "{e}");
        let e = parse_yaml("a:\n", "f.yaml").expect_err("null");
        assert_eq!(e.to_string(), "f.yaml: a: no value");
        let e = parse_yaml("- 1\n- 2\n", "f.yaml").expect_err("not a map");
        assert!(e.to_string().contains("expected a map"), "{e}");
    }

    #[test]
    fn defines_win_and_are_checked() {
        let e = load(None, &["a.b=1".into(), "c = x y".into()]).expect("ok");
        assert_eq!(e[1].key, "c");
        assert_eq!(e[1].value, "x y");
        assert!(load(None, &["novalue".into()]).is_err());
        assert!(load(None, &["=1".into()]).is_err());
    }
}
