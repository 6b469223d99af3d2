//! `statekit convert` and `statekit rewrite`: offline savepoint migration, the library's
//! (`statekit_migrate`) plan and run behind flags, a progress bar and a summary.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde_json::json;
use statekit_format::Compression;
/// `--shard I/N` and sizes (`--memory 256MiB`), as the library spells them.
pub(crate) use statekit_migrate::syntax::{parse_shard, parse_size};
use statekit_migrate::{
    migrate_to, Edit, EditParseError, EditSyntax, MigrateOptions, OutputFormat, Plan, PlanOptions, Progress,
};
use statekit_snapshot::Snapshot;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// The output's block codec.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum CompressionArg {
    /// Blocks stored as they are.
    None,
    /// LZ4 (the default: fast, about half the size on typical state).
    Lz4,
    /// Zstandard (smaller, slower to write), level 1 unless --compression-level says
    /// otherwise.
    Zstd,
}

/// The Zstandard level `--compression zstd` writes without `--compression-level` (the fast
/// end, as Parquet writers default to: on state it compresses within a few percent of
/// level 3 at about twice the speed).
const DEFAULT_ZSTD_LEVEL: i32 = 1;

impl CompressionArg {
    pub(crate) fn codec(self, level: Option<i32>) -> Result<Compression> {
        Ok(match (self, level) {
            (CompressionArg::None, None) => Compression::None,
            (CompressionArg::Lz4, None) => Compression::Lz4,
            (CompressionArg::Zstd, level) => Compression::Zstd {
                level: level.unwrap_or(DEFAULT_ZSTD_LEVEL),
            },
            (_, Some(_)) => bail!("--compression-level applies to --compression zstd only"),
        })
    }
}

/// The output's format.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum FormatArg {
    /// statekit's canonical format: restores into any backend, at any parallelism.
    Canonical,
    /// RocksDB's own files (SST files written and ingested, per subtask): the RocksDB
    /// backend restores them by linking the files in.
    Native,
}

impl FormatArg {
    fn format(self) -> OutputFormat {
        match self {
            FormatArg::Canonical => OutputFormat::Canonical,
            FormatArg::Native => OutputFormat::Native,
        }
    }
}

/// What `convert` and `rewrite` share: the output and how it is written.
#[derive(Args, Debug)]
pub struct OutputArgs {
    /// The snapshot to read: a savepoint or checkpoint directory of any kind (or its
    /// `_metadata` file), local or on object storage (`s3://bucket/key`). It is never modified.
    pub input: PathBuf,
    /// The savepoint directory to write, local or `s3://bucket/key` (it must not exist,
    /// unless --force; on object storage --force deletes the old savepoint before writing).
    pub output: PathBuf,
    /// Format of the output.
    #[arg(long, value_enum, default_value = "canonical")]
    pub format: FormatArg,
    /// Block compression of the output's data files (native output: of its SST files).
    #[arg(long, value_enum, default_value = "lz4")]
    pub compression: CompressionArg,
    /// Zstandard level of --compression zstd: 1 (the default) to 22, or -7 to -1 for its
    /// fastest modes. Canonical output only (native SST files use RocksDB's default level).
    #[arg(long, value_name = "LEVEL", allow_negative_numbers = true,
          value_parser = clap::value_parser!(i32).range(-7..=22))]
    pub compression_level: Option<i32>,
    /// An Apache Flink input: its job's uids (`--flink-uid`, so output operators get them)
    /// and re-rooted paths (`--flink-root`).
    #[command(flatten)]
    pub flink: super::inspect::FlinkArgs,
    /// Replace OUTPUT if it exists (only a snapshot directory or an empty one is replaced).
    #[arg(long)]
    pub force: bool,
    /// Print the plan (what changes, bytes to rewrite and to link) and exit 0 without writing.
    #[arg(long)]
    pub dry_run: bool,
    /// Hard-link the data files of operators whose state the edits leave as it is (renamed
    /// or kept, same parallelism, canonical input and output) instead of rewriting them; across file
    /// systems they are copied. Renaming a uid then takes milliseconds whatever the size.
    #[arg(long)]
    pub link: bool,
    /// Subtasks written at once, and threads sorting for --max-parallelism (default: two
    /// subtasks per core, so one encodes while another waits for the disk; a sort thread
    /// per core).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub threads: usize,
    /// Write only shard I of N (every Nth output subtask from the Ith) and its manifest, not
    /// `_metadata`: N independent tasks (any batch scheduler) each run with their own I on
    /// the same OUTPUT, then `statekit finish-shards OUTPUT --shards N` writes `_metadata`.
    #[arg(long, value_name = "I/N", value_parser = parse_shard)]
    pub shard: Option<(u32, u32)>,
    /// Print the summary as one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `statekit finish-shards`.
#[derive(Args, Debug)]
pub struct FinishShardsArgs {
    /// The output every shard wrote into (local or `s3://bucket/key`): a snapshot (of
    /// `convert`/`rewrite --shard`) gets its `_metadata`, tables (of `export --shard`) their
    /// `_tables.json`.
    pub output: PathBuf,
    /// How many shards wrote it (the N of their `--shard I/N`).
    #[arg(long, value_name = "N")]
    pub shards: u32,
    /// Print the result as one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// `statekit finish-shards`.
pub fn finish_shards(args: FinishShardsArgs) -> Result<ExitCode> {
    let output = super::location(&args.output)?;
    // Export shards leave `_shards/I-of-N.tables.json`, snapshot shards `_shards/I-of-N`.
    let (storage, prefix) = output.storage_and_path()?;
    let shards_dir = statekit_core::storage::join(&prefix, statekit_migrate::SHARDS_DIR);
    let is_export = storage
        .list(&shards_dir)?
        .iter()
        .any(|e| e.name.ends_with(statekit_table::EXPORT_MANIFEST_SUFFIX));
    // What was written: (file, counts as JSON fields, counts as words).
    let (file, counts, words) = if is_export {
        let doc = statekit_table::finish_export_shards(&output, args.shards)?;
        let tables = doc["tables"].as_array().map_or(0, Vec::len);
        (
            "_tables.json",
            json!({ "tables": tables }),
            crate::render::count(tables as u64, "table"),
        )
    } else {
        let meta = statekit_migrate::finish_shards(&output, args.shards)?;
        let subtasks: usize = meta.operators.iter().map(|o| o.subtasks.len()).sum();
        (
            "_metadata",
            json!({ "operators": meta.operators.len(), "subtasks": subtasks }),
            format!(
                "{}, {}",
                crate::render::count(meta.operators.len() as u64, "operator"),
                crate::render::count(subtasks as u64, "subtask")
            ),
        )
    };
    if args.json {
        let mut doc = json!({ "output": output.display(), "shards": args.shards });
        if let (Some(d), Some(c)) = (doc.as_object_mut(), counts.as_object()) {
            d.extend(c.clone());
        }
        outln!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        outln!("{output}: {file} written from {} shards ({words})", args.shards);
    }
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `statekit convert`.
#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// Input, output and how it is written.
    #[command(flatten)]
    pub out: OutputArgs,
    /// Split every operator's state for N subtasks (keyed state by key-group ranges, operator
    /// state by Flink's redistribution rules).
    #[arg(long, value_name = "N")]
    pub parallelism: Option<u32>,
}

/// Arguments of `statekit rewrite`. Edits compose: uids are set and renamed first
/// (`--set-uid`, `--rename-uid`); every other edit names operators by their new uid.
#[derive(Args, Debug)]
pub struct RewriteArgs {
    /// Input, output and how it is written.
    #[command(flatten)]
    pub out: OutputArgs,
    /// Give operator OLD the uid NEW (and the operator id it hashes to). Repeatable.
    #[arg(long, value_name = "OLD=NEW")]
    pub rename_uid: Vec<String>,
    /// Leave out an operator and all its state (a job that no longer has it restores without
    /// --allow-non-restored-state). Repeatable.
    #[arg(long, value_name = "UID")]
    pub drop_operator: Vec<String>,
    /// Leave out a keyed or operator state. Repeatable.
    #[arg(long, value_name = "UID/STATE")]
    pub drop_state: Vec<String>,
    /// Rename a keyed or operator state. Repeatable.
    #[arg(long, value_name = "UID/OLD=NEW")]
    pub rename_state: Vec<String>,
    /// Split an operator's state for N subtasks. Repeatable.
    #[arg(long, value_name = "UID=N")]
    pub parallelism: Vec<String>,
    /// Give an operator N key groups: every key moves to its key group under N (2 to 4 times
    /// the old number splits each key group in one streaming pass; any other N takes an
    /// external sort bounded by --memory, spilling to --spill-dir). Repeatable.
    #[arg(long, value_name = "UID=N")]
    pub max_parallelism: Vec<String>,
    /// Memory for re-bucketing (--max-parallelism) before sorted runs spill to disk: bytes,
    /// or with a unit (KiB, MiB, GiB).
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size)]
    pub memory: usize,
    /// Where --max-parallelism spills sorted runs (default: beside the output; removed when
    /// done).
    #[arg(long, value_name = "DIR")]
    pub spill_dir: Option<PathBuf>,
    /// Leave out values, list elements and map entries of TTL'd states that have expired.
    #[arg(long)]
    pub purge_expired: bool,
    /// With --purge-expired: judge expiry at this time (milliseconds since the epoch)
    /// instead of now.
    #[arg(long, value_name = "MILLIS", requires = "purge_expired")]
    pub now: Option<i64>,
    /// Give the operator with this id (32 hex digits, as `show` prints it) the uid UID: an
    /// operator whose uid was generated, named by the new job. Applied with --rename-uid.
    /// Repeatable.
    #[arg(long, value_name = "OPERATOR_ID=UID")]
    pub set_uid: Vec<String>,
    /// Keep only the keyed state of the keys in FILE (one per line, read as --key-format
    /// reads them, by each operator's key type); UID=FILE limits it to one operator.
    #[arg(long, value_name = "[UID=]FILE")]
    pub keep_keys: Vec<String>,
    /// Leave out the keyed state of the keys in FILE (as --keep-keys reads it).
    #[arg(long, value_name = "[UID=]FILE")]
    pub drop_keys: Vec<String>,
    /// How --keep-keys and --drop-keys files spell keys (as `dump --key-format`).
    #[arg(long, value_enum, default_value_t = crate::render::KeyFormat::Auto)]
    pub key_format: crate::render::KeyFormat,
}

impl RewriteArgs {
    /// The edits of the flags, in the order they apply (uids set and renamed first).
    fn edits(&self) -> Result<Vec<Edit>, EditParseError> {
        let mut edits = Vec::new();
        for syntax in EditSyntax::ALL {
            let values = match syntax {
                EditSyntax::SetUid => &self.set_uid,
                EditSyntax::RenameUid => &self.rename_uid,
                EditSyntax::DropOperator => &self.drop_operator,
                EditSyntax::DropState => &self.drop_state,
                EditSyntax::RenameState => &self.rename_state,
                EditSyntax::Parallelism => &self.parallelism,
                EditSyntax::MaxParallelism => &self.max_parallelism,
                _ => continue,
            };
            for v in values {
                edits.push(syntax.parse(v)?);
            }
        }
        if self.purge_expired {
            edits.push(Edit::PurgeExpired);
        }
        Ok(edits)
    }
}

/// `statekit convert`.
pub fn convert(args: ConvertArgs) -> Result<ExitCode> {
    let reader = super::open_snapshot(&args.out.input, &args.out.flink.with_schema())?;
    let edits: Vec<Edit> = match args.parallelism {
        Some(p) => reader
            .metadata()
            .operators
            .iter()
            .map(|o| Edit::Parallelism {
                uid: o.uid.clone(),
                parallelism: p,
            })
            .collect(),
        None => Vec::new(),
    };
    run(&args.out, reader, &edits, None)
}

/// `statekit rewrite`.
pub fn rewrite(args: RewriteArgs) -> Result<ExitCode> {
    let mut edits = args.edits()?;
    if edits.is_empty() && args.keep_keys.is_empty() && args.drop_keys.is_empty() {
        bail!("no edit given (see `statekit rewrite --help`); `statekit convert` copies a snapshot as it is");
    }
    let reader = super::open_snapshot(&args.out.input, &args.out.flink.with_schema())?;
    let memory = (args.memory, args.spill_dir.clone());
    // Key files are read by the key type of the operators they apply to (after the other
    // edits: by their new uids).
    let plan = Plan::new(&reader, &edits, PlanOptions::default())?;
    for (keep, list) in [(true, &args.keep_keys), (false, &args.drop_keys)] {
        for spec in list {
            let flag = if keep { "--keep-keys" } else { "--drop-keys" };
            let (only, file) = match spec.split_once('=') {
                Some((uid, file)) if plan.operators.iter().any(|o| o.uid == uid) => (Some(uid), file),
                _ => (None, spec.as_str()),
            };
            // A named operator gets the edit whatever it holds (the plan refuses it where it
            // has no keyed state, naming what it has); otherwise every operator with keyed state.
            let targets: Vec<_> = plan
                .operators
                .iter()
                .filter(|o| only.map_or(!o.keyed_states.is_empty(), |u| u == o.uid))
                .collect();
            if targets.is_empty() {
                bail!("{flag} {spec}: no operator with keyed state to apply it to");
            }
            let text = std::fs::read_to_string(file).with_context(|| format!("{flag}: reading {file}"))?;
            for op in targets {
                let keys = match op.keyed_states.first() {
                    Some(s) => parse_keys(&text, file, &op.uid, &s.target.key_schema, args.key_format)?,
                    None => std::collections::BTreeSet::new(),
                };
                let keys = std::sync::Arc::new(keys);
                let uid = op.uid.clone();
                edits.push(if keep {
                    Edit::KeepKeys { uid, keys }
                } else {
                    Edit::DropKeys { uid, keys }
                });
            }
        }
    }
    run_with(&args.out, reader, &edits, args.now, memory)
}

/// The keys of a `--keep-keys`/`--drop-keys` file (`text`, read from `file`), one per line,
/// as keys of type `schema` of operator `uid`; blank lines are skipped.
fn parse_keys(
    text: &str,
    file: &str,
    uid: &str,
    schema: &statekit_core::TypeSchema,
    format: crate::render::KeyFormat,
) -> Result<std::collections::BTreeSet<Vec<u8>>> {
    let mut keys = std::collections::BTreeSet::new();
    for (n, line) in text.lines().enumerate() {
        if line.is_empty() {
            continue;
        }
        let key = crate::render::parse_key(line, schema, format).map_err(|e| {
            anyhow::anyhow!(
                "{file}: line {}: {line:?} is not a key of operator {uid:?} (type {schema}): {e}",
                n + 1
            )
        })?;
        keys.insert(key);
    }
    Ok(keys)
}

fn run(args: &OutputArgs, reader: Snapshot, edits: &[Edit], now: Option<i64>) -> Result<ExitCode> {
    run_with(args, reader, edits, now, (PlanOptions::default().memory, None))
}

fn run_with(
    args: &OutputArgs,
    reader: Snapshot,
    edits: &[Edit],
    now: Option<i64>,
    (memory, spill_dir): (usize, Option<PathBuf>),
) -> Result<ExitCode> {
    if args.compression_level.is_some() && matches!(args.format, FormatArg::Native) {
        bail!("--compression-level applies to canonical output only (native SST files use RocksDB's default level)");
    }
    let mut options = PlanOptions {
        format: args.format.format(),
        compression: args.compression.codec(args.compression_level)?,
        link: args.link,
        memory,
        spill_dir,
        ..PlanOptions::default()
    };
    if let Some(t) = now {
        options.now_ms = t;
    }
    let plan = Plan::new(&reader, edits, options)?;
    let changes = plan.changes();
    // Linked files are copied where a link cannot be made (another file system).
    let (to_link, to_copy) = if same_file_system(&args.input, &args.output) {
        (plan.linked_bytes(), 0)
    } else {
        (0, plan.linked_bytes())
    };
    if args.dry_run {
        if args.json {
            outln!(
                "{}",
                serde_json::to_string_pretty(&json!({
                    "input": args.input.display().to_string(),
                    "output": args.output.display().to_string(),
                    "format": args.format.format().name(),
                    "dry_run": true,
                    "changes": changes,
                    "operators": operators_json(&plan),
                    "bytes_to_rewrite": plan.input_bytes(),
                    "bytes_to_link": to_link,
                    "bytes_to_copy": to_copy,
                }))?
            );
        } else {
            for c in &changes {
                outln!("{c}");
            }
            if changes.is_empty() {
                outln!("no changes: a copy in the {} format", args.format.format().name());
            }
            outln!(
                "would rewrite {} bytes, link {to_link} bytes and copy {to_copy} bytes of {} operators into a {} savepoint at {} (dry run: nothing written)",
                plan.input_bytes(),
                plan.operators.len(),
                args.format.format().name(),
                args.output.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let bar = progress_bar(&plan);
    let started = Instant::now();
    let tick = |p: &Progress| {
        if let Some(b) = &bar {
            b.set_length(p.subtasks_total);
            b.set_position(p.subtasks_done);
            b.set_message(format!("{:.1} MB, {} entries", p.bytes_written as f64 / 1e6, p.entries));
        }
    };
    let options = MigrateOptions {
        force: args.force,
        threads: args.threads,
        shard: args.shard,
    };
    let output = super::location(&args.output)?;
    let summary = migrate_to(&reader, &args.input, &plan, &output, &options, &tick);
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let summary = summary?;
    let seconds = started.elapsed().as_secs_f64();
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "input": args.input.display().to_string(),
                "output": summary.output.display().to_string(),
                "format": args.format.format().name(),
                "dry_run": false,
                "changes": changes,
                "operators": operators_json(&plan),
                "subtasks": summary.subtasks,
                "files": summary.files,
                "bytes": summary.bytes,
                "bytes_linked": to_link,
                "bytes_copied": to_copy,
                "entries": summary.entries,
                "spilled_runs": summary.spilled_runs,
                "seconds": seconds,
            }))?
        );
    } else {
        for c in &changes {
            outln!("{c}");
        }
        outln!(
            "{}: {} operators, {} subtasks, {} files, {} bytes, {} entries written in {seconds:.2} s",
            summary.output.display(),
            summary.operators,
            summary.subtasks,
            summary.files,
            summary.bytes,
            summary.entries
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether `input` and the directory `output` will be created in are on one file system
/// (so `--link` links rather than copies). Unknown (not Unix): assumed so.
fn same_file_system(input: &std::path::Path, output: &std::path::Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let parent = output
            .ancestors()
            .skip(1)
            .find(|a| a.as_os_str().is_empty() || a.exists())
            .map(|a| {
                if a.as_os_str().is_empty() {
                    std::path::Path::new(".")
                } else {
                    a
                }
            });
        match (std::fs::metadata(input), parent.map(std::fs::metadata)) {
            (Ok(a), Some(Ok(b))) => a.dev() == b.dev(),
            _ => true,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (input, output);
        true
    }
}

fn operators_json(plan: &Plan) -> serde_json::Value {
    plan.operators
        .iter()
        .map(|o| {
            json!({
                "uid": o.uid,
                "from_uid": o.source_uid,
                "parallelism": o.parallelism,
                "max_parallelism": o.max_parallelism,
                "keyed_states": o.keyed_states.iter().map(|s| &s.target.name).collect::<Vec<_>>(),
                "operator_states": o.operator_states.iter().map(|s| &s.target.name).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// A bar of subtasks written, on standard error when it is a terminal.
fn progress_bar(plan: &Plan) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let total: u64 = plan.operators.iter().map(|o| u64::from(o.parallelism)).sum();
    let bar = indicatif::ProgressBar::new(total);
    let style = indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} subtasks, {msg} ({elapsed}, ETA {eta})")
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    Some(bar)
}

/// Arguments of `statekit schema`.
#[derive(Args, Debug)]
pub struct SchemaArgs {
    /// A snapshot directory (or its `_metadata` file).
    pub path: PathBuf,
    /// Print the schema as JSON (the file `statekit check --against` reads; edit it to
    /// describe the job you are about to deploy).
    #[arg(long)]
    pub json: bool,
    /// For Apache Flink snapshots.
    #[command(flatten)]
    pub flink: super::inspect::FlinkArgs,
}

/// Opens a snapshot with its state schema (an Apache Flink snapshot's states are in the heads
/// of its state streams, not in `_metadata`).
fn open_with_schema(path: &std::path::Path, options: &statekit_snapshot::OpenOptions) -> Result<Snapshot> {
    super::open_snapshot(
        path,
        &statekit_snapshot::OpenOptions {
            state_schema: true,
            ..options.clone()
        },
    )
}

/// `statekit schema`.
pub fn schema(args: SchemaArgs) -> Result<ExitCode> {
    let reader = open_with_schema(&args.path, &args.flink.options())?;
    let schema = statekit_migrate::JobSchema::of_snapshot(&reader)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&schema)?);
        return Ok(ExitCode::SUCCESS);
    }
    for o in &schema.operators {
        outln!(
            "operator {:?}  id {}  max parallelism {}{}",
            o.uid,
            o.operator_id.as_deref().unwrap_or("-"),
            o.max_parallelism,
            o.parallelism.map(|p| format!("  parallelism {p}")).unwrap_or_default()
        );
        for k in &o.keyed_states {
            outln!(
                "  keyed {:<20} {:<12} key {} ns {}{} value {}{}",
                k.name,
                k.kind,
                k.key,
                k.namespace,
                k.user_key
                    .as_ref()
                    .map(|t| format!(" user-key {t}"))
                    .unwrap_or_default(),
                k.value,
                crate::render::ttl_text(k.ttl_ms)
            );
            for b in &k.opaque {
                outln!("  {:<26} kept as bytes: {b}", "");
            }
        }
        for s in &o.operator_states {
            outln!(
                "  operator-state {:<11} {:<12} {}value {}",
                s.name,
                s.mode,
                s.key.as_ref().map(|t| format!("key {t} ")).unwrap_or_default(),
                s.value
            );
            for b in &s.opaque {
                outln!("  {:<26} kept as bytes: {b}", "");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `statekit check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The snapshot to restore.
    pub path: PathBuf,
    /// What the job declares: a schema file (`statekit schema --json`, edited) or another
    /// snapshot (of the new job).
    #[arg(long, value_name = "SCHEMA.json|SNAPSHOT")]
    pub against: PathBuf,
    /// Print the report as one JSON document.
    #[arg(long)]
    pub json: bool,
    /// For Apache Flink snapshots.
    #[command(flatten)]
    pub flink: super::inspect::FlinkArgs,
}

/// `statekit check`: exit 0 compatible, 1 incompatible (each reason on a line), 2 error.
pub fn check(args: CheckArgs) -> Result<ExitCode> {
    let reader = open_with_schema(&args.path, &args.flink.options())?;
    let snapshot = statekit_migrate::JobSchema::of(reader.metadata());
    let parse_schema = |text: &str| {
        serde_json::from_str::<statekit_migrate::JobSchema>(text).map_err(|e| {
            anyhow::anyhow!(
                "{}: line {}, column {}: not a schema (as `statekit schema --json` writes): {e}",
                args.against.display(),
                e.line(),
                e.column()
            )
        })
    };
    let job = match super::location(&args.against)? {
        statekit_core::location::Location::Local(against) => {
            let is_snapshot_file = against
                .file_name()
                .is_some_and(|n| n == statekit_format::METADATA_FILE_NAME);
            if against.is_file() && !is_snapshot_file {
                let text = std::fs::read_to_string(&against)
                    .with_context(|| format!("{}: reading the schema", against.display()))?;
                parse_schema(&text)?
            } else {
                statekit_migrate::JobSchema::of(open_with_schema(&args.against, &args.flink.options())?.metadata())
            }
        }
        // On an object store a `.json` object is a schema file, anything else a snapshot.
        stored if stored.file_name().is_some_and(|n| n.ends_with(".json")) => {
            let bytes = super::read_whole(stored, &args.against)?;
            let text = std::str::from_utf8(&bytes)
                .with_context(|| format!("{}: the schema is not UTF-8", args.against.display()))?;
            parse_schema(text)?
        }
        _ => statekit_migrate::JobSchema::of(open_with_schema(&args.against, &args.flink.options())?.metadata()),
    };
    let report = statekit_migrate::check(&snapshot, &job);
    let ok = report.is_compatible();
    if args.json {
        let findings: Vec<serde_json::Value> = report
            .findings
            .iter()
            .map(|f| {
                json!({
                    "incompatible": f.is_incompatible(),
                    "finding": f,
                    "text": f.to_string(),
                    "fix": f.fix(),
                })
            })
            .collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "snapshot": args.path.display().to_string(),
                "against": args.against.display().to_string(),
                "compatible": ok,
                "findings": findings,
            }))?
        );
    } else {
        for f in &report.findings {
            let tag = if f.is_incompatible() { "incompatible" } else { "note" };
            match f.fix() {
                Some(fix) if f.is_incompatible() => outln!("{tag}: {f}\n  fix: {fix}"),
                _ => outln!("{tag}: {f}"),
            }
        }
        let bad = report.findings.iter().filter(|f| f.is_incompatible()).count();
        outln!(
            "{}: {}",
            args.path.display(),
            if ok {
                "compatible".to_string()
            } else {
                format!("{bad} incompatibilities")
            }
        );
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
