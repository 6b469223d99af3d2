//! # statekit-objstore
//!
//! Checkpoints and savepoints on object storage: a [`Storage`](statekit_core::storage::Storage)
//! backed by the [`object_store`] crate (the one DataFusion, Delta and slatedb use), chosen by
//! URL — `s3://bucket/prefix` (S3 and S3-compatible servers), `gs://bucket/prefix`,
//! `az://container/prefix`, `file:///path` and plain paths ([`parse_location`]).
//!
//! Object-store semantics, not a file system emulated:
//! * **No rename.** An object appears only when its upload completes (one `PUT`, or the
//!   completion of a multipart upload), so a [`StorageWriter`](statekit_core::storage::StorageWriter)
//!   needs no temporary name; a writer dropped before `commit` aborts its multipart upload.
//!   A snapshot is complete when its `_metadata` exists, and statekit writes it last.
//! * **Range reads.** [`Storage::open`](statekit_core::storage::Storage::open) is one `GET` of
//!   the whole object (`_metadata`: `show` makes exactly one request);
//!   [`Storage::open_ranged`](statekit_core::storage::Storage::open_ranged) fetches only what the
//!   reader asks for — a keyed data file's header, index and the key groups it visits — so
//!   `dump --key K` reads K's key group, not the savepoint.
//! * **Retries** with exponential backoff on transient failures (connection errors, timeouts,
//!   5xx, 429: `object_store`'s retry, bounded in count and time), and a clear error naming
//!   the object and the status on permanent ones ([`StorageError::Remote`](statekit_core::storage::StorageError::Remote)).
//! * **Listing by prefix** (`list` is one delimited listing: "directories" are common prefixes).
//!
//! Credentials and endpoints come from the standard places: for S3 the `AWS_*` environment
//! variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
//! `AWS_REGION`/`AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL` for S3-compatible servers,
//! `AWS_ALLOW_HTTP=true` for plain HTTP, `AWS_VIRTUAL_HOSTED_STYLE_REQUEST`; path-style is the
//! default), then the shared files `~/.aws/credentials` and `~/.aws/config` (profile
//! `AWS_PROFILE`, default `default`); for GCS and Azure their builders' environment
//! variables (`GOOGLE_SERVICE_ACCOUNT`, `AZURE_STORAGE_ACCOUNT_NAME`, …).
//!
//! Every request is counted ([`ObjectStorage::stats`]); with `STATEKIT_OBJECT_STORE_STATS`
//! set to a file path the counts are appended to it as one JSON line per process when the
//! storage is dropped (how the tests count requests of a command).

mod aws_files;
mod blob;
mod error;
mod location;
mod runtime;
mod store;
mod writer;

pub use location::{install, is_url, parse_location, LocationError};
pub use store::{ObjectStorage, RequestStats, StatsSnapshot};
