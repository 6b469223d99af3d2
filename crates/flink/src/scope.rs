//! Where a Flink snapshot's file handles may lead: one rule, applied wherever
//! [`crate::FlinkSnapshot`] resolves a handle (so every command that reads state obeys it).
//!
//! - A **savepoint**'s handles resolve only inside its own directory: a relative handle is a
//!   path below it (no `..` or `.` component, no leading `/`, no scheme), and an absolute one
//!   is read only where it (or its re-rooted form) lies inside that directory.
//! - A **checkpoint**'s (a `chk-N` directory) handles resolve only below its job directory
//!   (the parent of `chk-N`, which holds `shared/` and `taskowned/`), below a changelog
//!   directory of the same job near it (`…/<job id>/dstl/<file>` under one of the 4
//!   directories above `chk-N`, `<job id>` being the job directory's 32-hex-digit name), or
//!   below a place the user named with `--flink-root OLD=NEW` (its `NEW`).
//! - On an object store the same holds per bucket and key prefix: a handle into another
//!   bucket or outside the prefix is refused before any request is made.
//! - A symlink counts where it leads: local files are canonicalized before they are admitted.
//!
//! A handle outside is [`crate::FlinkError::Outside`], naming the `_metadata` file, the
//! handle and the rule; the file it names is never opened.
//!
//! [`Place`] is the pure, I/O-free part (parsing a handle's path and the "is it below this
//! root" test), public for the fuzz target and for callers that check paths themselves.

use std::fmt;
use std::path::{Path, PathBuf};

/// A place a file handle names, its path split into checked components (never `.`, `..` or
/// empty; no NUL; no backslash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// An absolute local path: its components below `/`.
    Local(Vec<String>),
    /// An object on an object store.
    Url {
        /// The scheme, lower case; Flink's `s3a`, `s3p` and `s3n` are `s3`.
        scheme: String,
        /// The bucket (container).
        bucket: String,
        /// The key's components.
        key: Vec<String>,
    },
}

/// Checks one `/`-separated path's components: empty ones (`a//b`) are skipped, `.` and `..`
/// are refused, as are NUL and backslashes (Flink writes none of them).
fn components(path: &str) -> Result<Vec<String>, &'static str> {
    if path.contains('\0') {
        return Err("it contains a NUL character");
    }
    if path.contains('\\') {
        return Err("it contains a backslash");
    }
    let mut out = Vec::new();
    for c in path.split('/') {
        match c {
            "" => {}
            "." | ".." => return Err("it has a '.' or '..' component"),
            c => out.push(c.to_string()),
        }
    }
    Ok(out)
}

/// The scheme statekit compares a URL's by (`s3a`, `s3p`, `s3n` are `s3`), for the schemes
/// whose objects statekit fetches; `None` for any other.
pub fn fetchable_scheme(scheme: &str) -> Option<&'static str> {
    match scheme.to_ascii_lowercase().as_str() {
        "s3" | "s3a" | "s3p" | "s3n" => Some("s3"),
        "gs" => Some("gs"),
        "az" => Some("az"),
        "abfs" => Some("abfs"),
        "abfss" => Some("abfss"),
        _ => None,
    }
}

impl Place {
    /// Parses an absolute handle path: `/x`, `file:/x`, `file:///x`, or `scheme://bucket/key`
    /// for a scheme statekit fetches ([`fetchable_scheme`]). Refused: `.` and `..`
    /// components, NUL, backslashes; in URLs also `%`, `?`, `#` (whose decoding could change
    /// the key) and a bucket with anything but letters, digits, `-`, `_` and `.`.
    pub fn parse(s: &str) -> Result<Place, &'static str> {
        if let Some(rest) = s.strip_prefix("file://").or_else(|| s.strip_prefix("file:")) {
            return Ok(Place::Local(components(rest)?));
        }
        if s.starts_with('/') {
            return Ok(Place::Local(components(s)?));
        }
        let Some((scheme, rest)) = s.split_once("://") else {
            return Err("it is neither an absolute path nor a URL");
        };
        let scheme = fetchable_scheme(scheme).ok_or("its scheme is not one statekit reads")?;
        if rest.contains(['%', '?', '#']) {
            return Err("a URL handle must not contain '%', '?' or '#'");
        }
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = !bucket.is_empty()
            && bucket
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && bucket != "."
            && bucket != "..";
        if !bucket_ok {
            return Err("its bucket is empty or not a plain bucket name");
        }
        Ok(Place::Url {
            scheme: scheme.to_string(),
            bucket: bucket.to_string(),
            key: components(key)?,
        })
    }

    /// The place `relative` (a relative handle's path) names below `self`. Refused: an empty
    /// path, a leading `/`, a scheme (`x:` before the first `/`), and what [`Place::parse`]
    /// refuses in a path.
    pub fn join(&self, relative: &str) -> Result<Place, &'static str> {
        let parts = relative_components(relative)?;
        let mut out = self.clone();
        match &mut out {
            Place::Local(c) | Place::Url { key: c, .. } => c.extend(parts),
        }
        Ok(out)
    }

    /// Whether `self` is `root` or below it (whole components: `/a/bc` is not below `/a/b`).
    pub fn is_within(&self, root: &Place) -> bool {
        match (self, root) {
            (Place::Local(p), Place::Local(r)) => p.starts_with(r),
            (
                Place::Url { scheme, bucket, key },
                Place::Url {
                    scheme: rs,
                    bucket: rb,
                    key: rk,
                },
            ) => scheme == rs && bucket == rb && key.starts_with(rk),
            _ => false,
        }
    }

    /// The place one level up; `None` at `/` or a bucket's root.
    pub fn parent(&self) -> Option<Place> {
        let mut out = self.clone();
        match &mut out {
            Place::Local(c) | Place::Url { key: c, .. } => c.pop()?,
        };
        Some(out)
    }

    /// The components of the path (or key).
    pub fn parts(&self) -> &[String] {
        match self {
            Place::Local(c) | Place::Url { key: c, .. } => c,
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Local(c) => write!(f, "/{}", c.join("/")),
            Place::Url { scheme, bucket, key } if key.is_empty() => write!(f, "{scheme}://{bucket}"),
            Place::Url { scheme, bucket, key } => write!(f, "{scheme}://{bucket}/{}", key.join("/")),
        }
    }
}

/// The components of a relative handle's path, checked: not empty, no leading `/`, no
/// scheme (`x:` before the first `/`), no `.` or `..` component, no NUL or backslash.
pub fn relative_components(path: &str) -> Result<Vec<String>, &'static str> {
    if path.starts_with('/') {
        return Err("a relative handle must not start with '/'");
    }
    let first = path.split('/').next().unwrap_or("");
    if first.contains(':') {
        return Err("a relative handle must not name a scheme or drive");
    }
    let parts = components(path)?;
    if parts.is_empty() {
        return Err("a relative handle must name a file");
    }
    Ok(parts)
}

/// Whether the components `parts` end in `<job id>/dstl/<file>`: a file of Flink's changelog
/// storage of job `job_id`.
fn changelog_shaped<S: AsRef<str>>(parts: &[S], job_id: &str) -> bool {
    let n = parts.len();
    n >= 3
        && parts.get(n - 2).is_some_and(|p| p.as_ref() == "dstl")
        && parts.get(n - 3).is_some_and(|p| p.as_ref() == job_id)
}

/// Whether a local path ends in `<job id>/dstl/<file>`.
fn changelog_shaped_path(p: &Path, job_id: &str) -> bool {
    let parts: Vec<String> = p
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    changelog_shaped(&parts, job_id)
}

/// A local directory files may be read below: as given (made absolute, symlinks kept) and
/// canonical (symlinks resolved, when it exists).
#[derive(Clone, Debug)]
struct LocalRoot {
    given: PathBuf,
    canonical: Option<PathBuf>,
}

impl LocalRoot {
    fn new(p: &Path) -> LocalRoot {
        let given = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let canonical = std::fs::canonicalize(&given).ok();
        LocalRoot { given, canonical }
    }

    /// Whether `abs` lies below this root by its path alone: it starts with the root (as
    /// given or canonical) and has no `..` after it.
    fn holds_lexically(&self, abs: &Path) -> bool {
        let below = |root: &Path| {
            abs.strip_prefix(root)
                .is_ok_and(|rest| rest.components().all(|c| matches!(c, std::path::Component::Normal(_))))
        };
        below(&self.given) || self.canonical.as_deref().is_some_and(below)
    }

    fn holds_canonical(&self, canonical: &Path) -> bool {
        self.canonical.as_ref().is_some_and(|c| canonical.starts_with(c))
    }
}

/// What [`Scope::check_local`] found of a local candidate path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Inside the scope, a file: read it.
    Inside,
    /// Inside the scope by its path, but no file is there.
    Absent,
    /// Outside the scope by its path: not even looked at.
    Outside,
    /// Inside by its path, but leads outside (through a symlink).
    Escapes,
}

/// The changelog directories a checkpoint may read from: `<job id>/dstl/<file>` below one of
/// the 4 directories above `chk-N`.
#[derive(Clone, Debug)]
struct Changelog {
    job_id: String,
    local: Vec<LocalRoot>,
    keys: Vec<Vec<String>>,
    urls: Vec<Place>,
}

/// The roots one snapshot's handles may resolve below, and the checks of candidates.
#[derive(Clone, Debug)]
pub struct Scope {
    checkpoint: bool,
    /// The savepoint directory or the checkpoint's job directory, for messages.
    shown: String,
    local: Vec<LocalRoot>,
    /// On a store: the key prefix (components) files may be read below.
    keys: Option<Vec<String>>,
    urls: Vec<Place>,
    changelog: Option<Changelog>,
}

/// Whether `name` is a Flink job id (32 hex digits).
fn is_job_id(name: &str) -> bool {
    name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `name` is a checkpoint directory's (`chk-N`).
fn is_checkpoint_dir(name: &str) -> bool {
    name.starts_with("chk-")
}

/// The user's `--flink-root` targets (`NEW`) as roots: local directories or URLs.
fn user_roots(roots: &[(String, String)]) -> (Vec<LocalRoot>, Vec<Place>) {
    let mut local = Vec::new();
    let mut urls = Vec::new();
    for (_, new) in roots {
        match Place::parse(new) {
            Ok(p @ Place::Url { .. }) => urls.push(p),
            _ if new.contains("://") => {}
            _ => local.push(LocalRoot::new(Path::new(new))),
        }
    }
    (local, urls)
}

impl Scope {
    /// The scope of the local snapshot in directory `dir`, with the user's `--flink-root`
    /// pairs `roots` (their targets count for checkpoints only).
    pub fn local(dir: &Path, roots: &[(String, String)]) -> Scope {
        let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        let checkpoint = abs.file_name().and_then(|n| n.to_str()).is_some_and(is_checkpoint_dir);
        let root = if checkpoint {
            abs.parent().map_or_else(|| abs.clone(), Path::to_path_buf)
        } else {
            abs.clone()
        };
        let mut local = vec![LocalRoot::new(&root)];
        let mut urls = Vec::new();
        let mut changelog = None;
        if checkpoint {
            let (l, u) = user_roots(roots);
            local.extend(l);
            urls.extend(u);
            let job = root.file_name().and_then(|n| n.to_str()).filter(|n| is_job_id(n));
            if let Some(job) = job {
                changelog = Some(Changelog {
                    job_id: job.to_string(),
                    local: abs.ancestors().skip(1).take(4).map(LocalRoot::new).collect(),
                    keys: Vec::new(),
                    urls: Vec::new(),
                });
            }
        }
        Scope {
            checkpoint,
            shown: root.display().to_string(),
            local,
            keys: None,
            urls,
            changelog,
        }
    }

    /// The scope of a snapshot in directory `dir` (a key) of a store, known by `url`, with
    /// the user's `--flink-root` pairs `roots`.
    pub fn stored(dir: &str, url: &str, roots: &[(String, String)]) -> Scope {
        let dir_parts: Vec<String> = dir.split('/').filter(|c| !c.is_empty()).map(str::to_string).collect();
        let checkpoint = dir_parts.last().is_some_and(|n| is_checkpoint_dir(n));
        let mut keys = dir_parts.clone();
        // Only an object store's URL roots URLs (a local path or `memory:/…` roots none).
        let place = Place::parse(url.trim_end_matches('/'))
            .ok()
            .filter(|p| matches!(p, Place::Url { .. }));
        let mut root_url = place.clone();
        if checkpoint {
            keys.pop();
            root_url = root_url.and_then(|p| p.parent());
        }
        let mut urls: Vec<Place> = root_url.iter().cloned().collect();
        let mut local = Vec::new();
        let mut changelog = None;
        if checkpoint {
            let (l, u) = user_roots(roots);
            local.extend(l);
            urls.extend(u);
            if let Some(job) = keys.last().filter(|n| is_job_id(n)) {
                let mut ancestors = Vec::new();
                let mut a = dir_parts.clone();
                while a.pop().is_some() && ancestors.len() < 4 {
                    ancestors.push(a.clone());
                }
                let mut url_ancestors = Vec::new();
                let mut p = place.clone();
                while let Some(up) = p.and_then(|p| p.parent()) {
                    if url_ancestors.len() == 4 {
                        break;
                    }
                    url_ancestors.push(up.clone());
                    p = Some(up);
                }
                changelog = Some(Changelog {
                    job_id: job.clone(),
                    local: Vec::new(),
                    keys: ancestors,
                    urls: url_ancestors,
                });
            }
        }
        let shown = match &root_url {
            Some(p) => p.to_string(),
            None => keys.join("/"),
        };
        Scope {
            checkpoint,
            shown,
            local,
            keys: Some(keys),
            urls,
            changelog,
        }
    }

    /// Whether the snapshot is a checkpoint (its directory is `chk-N`): rooted at its job
    /// directory; else a savepoint, rooted at its own directory.
    pub fn is_checkpoint(&self) -> bool {
        self.checkpoint
    }

    /// The rule, in words, for messages.
    pub fn rule(&self) -> String {
        if self.checkpoint {
            format!(
                "a checkpoint's files are read only below its job directory {}, a changelog \
                 directory <job id>/dstl/ of the same job near it, or a place named with \
                 --flink-root OLD=NEW",
                self.shown
            )
        } else {
            format!("a savepoint's files are read only inside its directory {}", self.shown)
        }
    }

    /// Whether the local path `p` lies below one of the scope's directories by its text alone
    /// (the savepoint's directory, the job directory, a `--flink-root`; not the changelog
    /// rule), no file looked at.
    pub fn holds_lexically(&self, p: &Path) -> bool {
        let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        self.local.iter().any(|r| r.holds_lexically(&abs))
    }

    /// Whether the local file `p` may be read: checked by its path first (a path outside is
    /// never looked at), then, when a file is there, by where it leads (symlinks resolved).
    pub fn check_local(&self, p: &Path) -> Verdict {
        let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let cl = self.changelog.as_ref();
        let lexical = self.local.iter().any(|r| r.holds_lexically(&abs))
            || cl.is_some_and(|c| {
                changelog_shaped_path(&abs, &c.job_id) && c.local.iter().any(|r| r.holds_lexically(&abs))
            });
        if !lexical {
            return Verdict::Outside;
        }
        if !p.is_file() {
            return Verdict::Absent;
        }
        let Ok(canonical) = std::fs::canonicalize(p) else {
            return Verdict::Absent;
        };
        let inside = self.local.iter().any(|r| r.holds_canonical(&canonical))
            || cl.is_some_and(|c| {
                changelog_shaped_path(&canonical, &c.job_id) && c.local.iter().any(|r| r.holds_canonical(&canonical))
            });
        if inside {
            Verdict::Inside
        } else {
            Verdict::Escapes
        }
    }

    /// Whether the key `key` of the snapshot's store may be read.
    pub fn admits_key(&self, key: &str) -> bool {
        if statekit_core::storage::check_path(key).is_err() {
            return false;
        }
        let parts: Vec<&str> = key.split('/').filter(|c| !c.is_empty()).collect();
        let below = |prefix: &Vec<String>| parts.len() > prefix.len() && prefix.iter().zip(&parts).all(|(a, b)| a == b);
        self.keys.as_ref().is_some_and(below)
            || self
                .changelog
                .as_ref()
                .is_some_and(|c| changelog_shaped(&parts, &c.job_id) && c.keys.iter().any(below))
    }

    /// Whether the object `place` may be fetched.
    pub fn admits_url(&self, place: &Place) -> bool {
        if !matches!(place, Place::Url { .. }) {
            return false;
        }
        self.urls.iter().any(|r| place.is_within(r))
            || self.changelog.as_ref().is_some_and(|c| {
                changelog_shaped(place.parts(), &c.job_id) && c.urls.iter().any(|r| place.is_within(r))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_parse_and_nest() {
        let p = |s: &str| Place::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(p("file:///a/b"), p("/a/b"));
        assert_eq!(p("file:/a//b"), p("/a/b"));
        assert_eq!(p("s3a://bk/x/y"), p("s3://bk/x/y"));
        assert!(p("/a/b/c").is_within(&p("/a/b")));
        assert!(!p("/a/bc").is_within(&p("/a/b")));
        assert!(!p("s3://b/sp/x").is_within(&p("s3://a/sp")));
        assert!(!p("s3://a/spx/y").is_within(&p("s3://a/sp")));
        assert!(p("s3://a/sp/y").is_within(&p("s3://a/sp")));
        assert!(!p("/a/sp/y").is_within(&p("s3://a/sp")));
        for bad in [
            "/a/../b",
            "file:/a/./b",
            "s3://a/../b",
            "s3://a@b/x",
            "s3://a/x%2f..",
            "s3://a/x?y",
            "hdfs://nn/x",
            "relative/x",
            "/a\\b",
            "/a\0b",
            "s3:///x",
        ] {
            assert!(Place::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(p("/a/b").to_string(), "/a/b");
        assert_eq!(p("s3n://bk/k").to_string(), "s3://bk/k");
        assert_eq!(p("/a/b").parent(), Some(p("/a")));
        assert_eq!(p("s3://bk").parent(), None);
    }

    #[test]
    fn relative_handles_stay_below() {
        let root = Place::parse("/sp").expect("root");
        assert_eq!(root.join("x/y"), Place::parse("/sp/x/y"));
        for bad in [
            "../outside/x",
            "/abs/x",
            "file:/abs/x",
            "a/../../x",
            "",
            ".",
            "c:x",
            "s3://b/x",
        ] {
            assert!(root.join(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn local_scope_of_a_savepoint_and_a_checkpoint() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let job = "0123456789abcdef0123456789abcdef";
        let sp = tmp.path().join("sp");
        let chk = tmp.path().join("ck").join(job).join("chk-1");
        let outside = tmp.path().join("outside");
        let dstl = tmp.path().join("dstl").join(job).join("dstl");
        for d in [&sp, &chk, &outside, &dstl, &chk.parent().expect("job").join("shared")] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        for f in [
            sp.join("a"),
            outside.join("x"),
            chk.join("a"),
            chk.parent().expect("job").join("shared/s"),
            dstl.join("log"),
        ] {
            std::fs::write(&f, b"x").expect("write");
        }
        std::os::unix::fs::symlink(outside.join("x"), sp.join("link")).expect("symlink");
        let s = Scope::local(&sp, &[]);
        assert_eq!(s.check_local(&sp.join("a")), Verdict::Inside);
        assert_eq!(s.check_local(&sp.join("missing")), Verdict::Absent);
        assert_eq!(s.check_local(&sp.join("link")), Verdict::Escapes);
        assert_eq!(s.check_local(&outside.join("x")), Verdict::Outside);
        assert_eq!(s.check_local(&sp.join("../outside/x")), Verdict::Outside);
        let c = Scope::local(&chk, &[]);
        assert_eq!(c.check_local(&chk.join("a")), Verdict::Inside);
        let job_dir = chk.parent().expect("job");
        assert_eq!(c.check_local(&job_dir.join("shared/s")), Verdict::Inside);
        // A `..` after the root is outside by its text, whatever it leads to.
        assert_eq!(c.check_local(&chk.join("../shared/s")), Verdict::Outside);
        assert_eq!(c.check_local(&dstl.join("log")), Verdict::Inside);
        assert_eq!(c.check_local(&outside.join("x")), Verdict::Outside);
        let named = Scope::local(&chk, &[("/old".into(), outside.display().to_string())]);
        assert_eq!(named.check_local(&outside.join("x")), Verdict::Inside);
        // A savepoint does not widen by --flink-root.
        let sp_named = Scope::local(&sp, &[("/old".into(), outside.display().to_string())]);
        assert_eq!(sp_named.check_local(&outside.join("x")), Verdict::Outside);
    }

    #[test]
    fn stored_scope_by_bucket_and_prefix() {
        let job = "0123456789abcdef0123456789abcdef";
        let s = Scope::stored("sp", "s3://a/sp", &[]);
        assert!(s.admits_key("sp/x"));
        assert!(!s.admits_key("spx/y"));
        assert!(!s.admits_key("sp/../x"));
        assert!(!s.admits_key("other/x"));
        let p = |s: &str| Place::parse(s).expect("place");
        assert!(s.admits_url(&p("s3a://a/sp/x")));
        assert!(!s.admits_url(&p("s3://b/sp/x")));
        assert!(!s.admits_url(&p("s3://a/other/x")));
        let dir = format!("base/ck/{job}/chk-3");
        let c = Scope::stored(&dir, &format!("s3://a/{dir}"), &[]);
        assert!(c.admits_key(&format!("base/ck/{job}/shared/x")));
        assert!(!c.admits_key("base/ck/other/x"));
        assert!(c.admits_key(&format!("base/dstl/{job}/dstl/f")));
        assert!(!c.admits_key(&format!("base/dstl/{job}/other/f")));
        assert!(c.admits_url(&p(&format!("s3://a/base/ck/{job}/shared/x"))));
        assert!(c.admits_url(&p(&format!("s3://a/dstl/{job}/dstl/f"))));
        assert!(!c.admits_url(&p(&format!("s3://b/base/ck/{job}/shared/x"))));
        // A local path is never an object: not even below a local "URL" of the store.
        let local = Scope::stored("sp", "/data/sp", &[]);
        assert!(!local.admits_url(&p("/data/sp/x")));
        assert!(!s.admits_url(&p("/sp/x")));
        let named = Scope::stored(
            &dir,
            &format!("s3://a/{dir}"),
            &[("s3://b/x".into(), "s3://b/x".into())],
        );
        assert!(named.admits_url(&p("s3://b/x/y")));
    }
}
