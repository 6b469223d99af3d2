//! Locations by URL: `s3://`, `gs://`, `az://`, `file://` and plain paths.

use crate::store::ObjectStorage;
use object_store::{BackoffConfig, ObjectStore, RetryConfig};
use statekit_core::location::Location;
use statekit_core::storage::{Storage, StorageError};
use statekit_core::ErrorKind;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// A location that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocationError {
    /// A URL whose scheme statekit does not support (`hdfs://`, `http://`, …).
    #[error(
        "{url}: the scheme {scheme}:// is not supported (supported: s3://, gs://, az://, file:// and local paths)"
    )]
    UnsupportedScheme {
        /// The location as given.
        url: String,
        /// Its scheme.
        scheme: String,
    },
    /// Not a valid URL, or one without a bucket.
    #[error("{url}: {reason}")]
    Invalid {
        /// The location as given.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The store's client could not be configured (missing region, bad option, …).
    #[error("{url}: cannot configure the object store client: {message}")]
    Client {
        /// The location as given.
        url: String,
        /// The client's message.
        message: String,
    },
}

impl LocationError {
    /// What kind of failure this is: always the caller's location.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::Caller
    }
}

impl statekit_core::HasErrorKind for LocationError {
    fn kind(&self) -> statekit_core::ErrorKind {
        LocationError::kind(self)
    }
}

/// True when `s` looks like a URL (`scheme://…`) rather than a local path.
pub fn is_url(s: &str) -> bool {
    match s.split_once("://") {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-' || c == '.')
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        }
        None => false,
    }
}

/// Stores by `scheme://bucket`, shared by every location in that bucket (one connection
/// pool, one set of counters).
fn stores() -> &'static Mutex<HashMap<String, Arc<ObjectStorage>>> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<ObjectStorage>>>> = OnceLock::new();
    STORES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Retries: transient failures (connection errors, timeouts, 5xx, 429) are retried with
/// exponential backoff from 100 ms up to 2 s, at most 5 times and for at most 30 s
/// (`STATEKIT_OBJECT_STORE_RETRIES` and `STATEKIT_OBJECT_STORE_RETRY_TIMEOUT_SECS` override);
/// then the error is reported. A user waits at a terminal: minutes of silent retrying would be
/// worse than a clear error.
fn retry_config() -> RetryConfig {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: env("STATEKIT_OBJECT_STORE_RETRIES").map_or(5, |n| n as usize),
        retry_timeout: Duration::from_secs(env("STATEKIT_OBJECT_STORE_RETRY_TIMEOUT_SECS").unwrap_or(30)),
    }
}

/// The bucket's store, and its page-by-page listing where it is known to honour a listing
/// offset (S3's `start-after`), which stepping over invalid keys needs.
type Built = (
    Arc<dyn ObjectStore>,
    Option<Arc<dyn object_store::list::PaginatedListStore>>,
);

fn build(url: &str, scheme: &str, bucket_url: &str) -> Result<Built, LocationError> {
    let client = |e: object_store::Error| LocationError::Client {
        url: url.to_string(),
        message: e.to_string(),
    };
    let store: Arc<dyn ObjectStore> = match scheme {
        "s3" | "s3a" => {
            let mut b = object_store::aws::AmazonS3Builder::new();
            // Files first, then the environment (which wins), as the AWS tools do.
            for (k, v) in crate::aws_files::profile_options() {
                if let Ok(key) = k.parse() {
                    b = b.with_config(key, v);
                }
            }
            for (k, v) in std::env::vars() {
                if k.starts_with("AWS_") {
                    if let Ok(key) = k.to_ascii_lowercase().parse() {
                        b = b.with_config(key, v);
                    }
                }
            }
            if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none() {
                b = b.with_region("us-east-1");
            }
            let s3 = Arc::new(
                b.with_url(bucket_url)
                    .with_retry(retry_config())
                    .build()
                    .map_err(client)?,
            );
            return Ok((s3.clone(), Some(s3)));
        }
        "gs" => Arc::new(
            object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_url(bucket_url)
                .with_retry(retry_config())
                .build()
                .map_err(client)?,
        ),
        "az" | "azure" | "abfs" | "abfss" => Arc::new(
            object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_url(bucket_url)
                .with_retry(retry_config())
                .build()
                .map_err(client)?,
        ),
        other => {
            return Err(LocationError::UnsupportedScheme {
                url: url.to_string(),
                scheme: other.to_string(),
            })
        }
    };
    Ok((store, None))
}

/// The location `s` names: a plain path or `file://` URL is local; `s3://bucket/key`,
/// `gs://bucket/key` and `az://container/key` are on their object store (configured from the
/// environment, see the crate docs); any other scheme is refused, never taken for a local
/// directory.
pub fn parse_location(s: &str) -> Result<Location, LocationError> {
    install();
    if !is_url(s) {
        return Ok(Location::Local(PathBuf::from(s)));
    }
    let invalid = |reason: &str| LocationError::Invalid {
        url: s.to_string(),
        reason: reason.to_string(),
    };
    // `.` and `..` are refused as typed (a URL parser would resolve them away).
    let after_scheme = s.split_once("://").map_or(s, |(_, rest)| rest);
    if after_scheme.split('/').skip(1).any(|c| c == "." || c == "..") {
        return Err(invalid("the key has '.' or '..' components"));
    }
    let u = url::Url::parse(s).map_err(|e| invalid(&format!("not a valid URL: {e}")))?;
    let scheme = u.scheme().to_ascii_lowercase();
    if scheme == "file" {
        if u.host_str().is_some_and(|h| !h.is_empty() && h != "localhost") {
            return Err(invalid("a file:// URL must name a local path (file:///path)"));
        }
        return u
            .to_file_path()
            .map(Location::Local)
            .map_err(|()| invalid("not a local path"));
    }
    if !matches!(scheme.as_str(), "s3" | "s3a" | "gs" | "az" | "azure" | "abfs" | "abfss") {
        return Err(LocationError::UnsupportedScheme {
            url: s.to_string(),
            scheme,
        });
    }
    let bucket = u
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| invalid("no bucket"))?;
    let key: String = u
        .path_segments()
        .map(|segs| segs.filter(|p| !p.is_empty()).collect::<Vec<_>>().join("/"))
        .unwrap_or_default();
    let key = percent_decode(&key);
    statekit_core::storage::check_path(&key).map_err(|_| invalid("the key has '.' or '..' components"))?;
    let bucket_url = format!("{scheme}://{bucket}");
    let storage = {
        let mut map = stores().lock().unwrap_or_else(|p| p.into_inner());
        match map.get(&bucket_url) {
            Some(s) => s.clone(),
            None => {
                let (store, paged) = build(s, &scheme, &bucket_url)?;
                let mut st = ObjectStorage::new(store, bucket_url.clone());
                if let Some(paged) = paged {
                    st = st.with_paged_listing(paged);
                }
                let st = Arc::new(st);
                map.insert(bucket_url.clone(), st.clone());
                st
            }
        }
    };
    let url = if key.is_empty() {
        bucket_url
    } else {
        format!("{bucket_url}/{key}")
    };
    Ok(Location::Stored {
        storage: storage as Arc<dyn Storage>,
        path: key,
        url,
    })
}

/// The [`UrlResolver`](statekit_core::location::UrlResolver) of this crate: an object-store
/// URL becomes a location as [`parse_location`] makes it; a local path or `file://` URL is
/// refused (a file referenced by URL is an object).
struct Resolver;

impl statekit_core::location::UrlResolver for Resolver {
    fn resolve(&self, url: &str) -> Result<Location, StorageError> {
        let refused = |message: String| StorageError::Remote {
            path: url.to_string(),
            status: None,
            transient: false,
            message,
        };
        match parse_location(url) {
            Ok(l @ Location::Stored { .. }) => Ok(l),
            Ok(Location::Local(_)) => Err(refused("not an object-store URL".into())),
            Err(e) => Err(refused(e.to_string())),
        }
    }
}

/// Installs this crate's URL resolver ([`statekit_core::location::set_url_resolver`]), so
/// readers anywhere in the process resolve files a snapshot references by URL (`s3://…`).
/// [`parse_location`] calls it; an engine that opens snapshots only through the lower crates
/// calls it once at start. Idempotent.
pub fn install() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| statekit_core::location::set_url_resolver(Arc::new(Resolver)));
}

/// `%XX` escapes decoded (a key as the store names it).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b.get(i),
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (Some(b'%'), Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (Some(&c), _, _) => {
                out.push(c);
                i += 1;
            }
            (None, _, _) => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every store opened so far (for [`crate::StatsSnapshot`] totals).
pub(crate) fn opened() -> Vec<Arc<ObjectStorage>> {
    stores()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn urls_and_paths() {
        assert!(is_url("s3://b/k"));
        assert!(is_url("file:///tmp"));
        assert!(!is_url("/tmp/s3"));
        assert!(!is_url("dir/with://inside"));
        assert!(matches!(parse_location("/tmp/x"), Ok(Location::Local(p)) if p == Path::new("/tmp/x")));
        assert!(matches!(parse_location("file:///tmp/x"), Ok(Location::Local(p)) if p == Path::new("/tmp/x")));
        let e = parse_location("hdfs:///flink/savepoints").expect_err("hdfs");
        assert!(e.to_string().contains("hdfs:// is not supported"), "{e}");
        assert!(matches!(
            parse_location("s3:///key"),
            Err(LocationError::Invalid { .. })
        ));
        assert!(matches!(
            parse_location("s3://b/a/../c"),
            Err(LocationError::Invalid { .. })
        ));
        assert_eq!(percent_decode("a%20b"), "a b");
    }
}
