//! `statekit dump`: decoded entries of one state.

use crate::render::{self, KeyFormat};
use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;
use statekit_checkpoint::SnapshotReader;
use statekit_core::{key_group_for_key, KeyGroupRange, KeyedStateKind, OperatorStateData, StateError};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `statekit dump`.
#[derive(Args, Debug)]
pub struct DumpArgs {
    /// A snapshot directory or its `_metadata` file.
    pub path: PathBuf,
    /// Operator uid.
    #[arg(long)]
    pub uid: String,
    /// State name (keyed or operator state).
    #[arg(long)]
    pub state: String,
    /// Only this key (text for string keys, a number for integer keys, hex for bytes).
    #[arg(long)]
    pub key: Option<String>,
    /// How to read --key.
    #[arg(long, value_enum, default_value_t = KeyFormat::Auto)]
    pub key_format: KeyFormat,
    /// Only this key group.
    #[arg(long)]
    pub key_group: Option<u32>,
    /// At most this many entries.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Print a JSON array.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("limit reached")]
struct LimitReached;

struct Out {
    json: bool,
    printed: u64,
    limit: u64,
    out: std::io::BufWriter<std::io::StdoutLock<'static>>,
}

impl Out {
    fn emit(&mut self, text: String, json: serde_json::Value) -> Result<(), StateError> {
        if self.printed >= self.limit {
            return Err(StateError::Other(Box::new(LimitReached)));
        }
        let r = if self.json {
            let sep = if self.printed == 0 { "" } else { ",\n" };
            write!(self.out, "{sep}  {json}")
        } else {
            writeln!(self.out, "{text}")
        };
        r.map_err(|e| StateError::io("standard output", e))?;
        self.printed += 1;
        Ok(())
    }
}

/// `statekit dump`.
pub fn dump(args: DumpArgs) -> Result<ExitCode> {
    let reader = SnapshotReader::open(&args.path)?;
    let op = reader.operator(&args.uid)?.clone();
    let mut out = Out {
        json: args.json,
        printed: 0,
        limit: args.limit.unwrap_or(u64::MAX),
        out: std::io::BufWriter::new(std::io::stdout().lock()),
    };
    if out.json {
        writeln!(out.out, "[")?;
    }
    let result = if let Some(desc) = op.keyed_states.iter().find(|d| d.name == args.state) {
        let desc = desc.clone();
        let key = match &args.key {
            Some(k) => Some(render::parse_key(k, &desc.key_schema, args.key_format)?),
            None => None,
        };
        let mut range = KeyGroupRange::all(op.max_parallelism);
        if let Some(kg) = args.key_group {
            if kg >= op.max_parallelism {
                bail!(
                    "key group {kg} does not exist: operator {:?} has {} key groups",
                    op.uid,
                    op.max_parallelism
                );
            }
            range = KeyGroupRange::new(kg, kg);
        }
        if let Some(k) = &key {
            let kg = key_group_for_key(k, op.max_parallelism);
            range = range.intersection(&KeyGroupRange::new(kg, kg));
        }
        let mut result = Ok(());
        'files: for file in super::views::keyed_views(&reader, &args.uid, range)? {
            let Some(idx) = file.states().iter().position(|d| d.name == desc.name) else {
                continue;
            };
            let idx = idx as u32;
            for kg in file.key_group_range().intersection(&range) {
                let mut element = 0u64;
                let mut last_key: Vec<u8> = Vec::new();
                let mut last_ns: Vec<u8> = Vec::new();
                let r = file.visit_key_group(kg, &mut |e| {
                    if e.state != idx || key.as_deref().is_some_and(|k| k != e.key) {
                        return Ok(());
                    }
                    if e.key != last_key.as_slice() || e.namespace != last_ns.as_slice() {
                        element = 0;
                        last_key = e.key.to_vec();
                        last_ns = e.namespace.to_vec();
                    }
                    let k = render::text(&desc.key_schema, e.key);
                    let ns = render::text(&desc.namespace_schema, e.namespace);
                    let v = render::text(&desc.value_schema, e.value);
                    let ttl = e.timestamp.map(|t| format!(" ttl_ts={t}")).unwrap_or_default();
                    let mut j = json!({
                        "key_group": kg,
                        "key": render::json_of(&desc.key_schema, e.key),
                        "namespace": render::json_of(&desc.namespace_schema, e.namespace),
                        "value": render::json_of(&desc.value_schema, e.value),
                    });
                    if let Some(t) = e.timestamp {
                        j["ttl_timestamp_ms"] = json!(t);
                    }
                    let text = match (desc.kind, e.user_key) {
                        (KeyedStateKind::Map, Some(uk)) => {
                            let uks = desc.user_key_schema.clone().unwrap_or(statekit_core::TypeSchema::Bytes);
                            j["user_key"] = render::json_of(&uks, uk);
                            format!(
                                "kg={kg} key={k} ns={ns} user_key={} value={v}{ttl}",
                                render::text(&uks, uk)
                            )
                        }
                        (KeyedStateKind::List, _) => {
                            j["index"] = json!(element);
                            let t = format!("kg={kg} key={k} ns={ns} element[{element}]={v}{ttl}");
                            element += 1;
                            t
                        }
                        _ => format!("kg={kg} key={k} ns={ns} value={v}{ttl}"),
                    };
                    out.emit(text, j)
                });
                if let Err(e) = r {
                    result = Err(e);
                    break 'files;
                }
            }
        }
        result
    } else if let Some(desc) = op.operator_states.iter().find(|d| d.name == args.state) {
        let desc = desc.clone();
        if args.key.is_some() || args.key_group.is_some() {
            bail!(
                "{:?} is operator state: --key and --key-group apply to keyed state only",
                desc.name
            );
        }
        let mut result = Ok(());
        for i in 0..op.parallelism {
            // Redistribution at the same parallelism keeps list elements where they were;
            // read each subtask's own state.
            let snap = reader.operator_state(&args.uid, op.parallelism, i)?;
            for (d, data) in &snap.states {
                if d.name != desc.name {
                    continue;
                }
                let r = match data {
                    OperatorStateData::List(items) => items.iter().enumerate().try_for_each(|(j, e)| {
                        out.emit(
                            format!("subtask={i} element[{j}]={}", render::text(&desc.value_schema, e)),
                            json!({"subtask": i, "index": j, "value": render::json_of(&desc.value_schema, e)}),
                        )
                    }),
                    OperatorStateData::Broadcast(m) => {
                        let ks = desc.key_schema.clone().unwrap_or(statekit_core::TypeSchema::Bytes);
                        m.iter().try_for_each(|(k, v)| {
                            out.emit(
                                format!(
                                    "subtask={i} key={} value={}",
                                    render::text(&ks, k),
                                    render::text(&desc.value_schema, v)
                                ),
                                json!({"subtask": i, "key": render::json_of(&ks, k),
                                       "value": render::json_of(&desc.value_schema, v)}),
                            )
                        })
                    }
                };
                if let Err(e) = r {
                    result = Err(e);
                }
            }
            if result.is_err() {
                break;
            }
        }
        result
    } else {
        let keyed: Vec<&str> = op.keyed_states.iter().map(|d| d.name.as_str()).collect();
        let opst: Vec<&str> = op.operator_states.iter().map(|d| d.name.as_str()).collect();
        bail!(
            "operator {:?} has no state {:?} (keyed states: {keyed:?}; operator states: {opst:?})",
            op.uid,
            args.state
        );
    };
    match result {
        Err(StateError::Other(e)) if e.is::<LimitReached>() => {}
        Err(e) => return Err(e.into()),
        Ok(()) => {}
    }
    if out.json {
        writeln!(out.out, "\n]")?;
    }
    out.out.flush()?;
    if !out.json {
        eprintln!("{} entries", out.printed);
    }
    Ok(ExitCode::SUCCESS)
}
