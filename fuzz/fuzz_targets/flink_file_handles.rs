//! Flink file-handle confinement (`statekit_flink::scope`, issue 40): any bytes as a handle's
//! path and a root. Never a panic; and whatever the rule admits is inside the allowed root by
//! an independent check:
//!
//! * mode 0 — [`Place`] parsing: a parsed place prints and parses back to itself; one the
//!   rule calls within a root starts with the root's text at a component boundary and has no
//!   `.` or `..` component; a relative handle joined to a root is within it (and is refused
//!   exactly when [`relative_components`] refuses it).
//! * mode 1 — local files: a real directory tree (a savepoint, a checkpoint's job directory
//!   with `shared/`, a changelog `dstl/` beside it, a file outside, symlinks from inside to
//!   outside); the bytes, unchecked, are joined to the snapshot's directory (`..`, absolute
//!   paths and all) and [`Scope::check_local`] judges them. A path admitted as inside
//!   canonicalizes below the allowed root (the savepoint's directory; the job directory or
//!   the job's changelog directory for a checkpoint).
//! * mode 2 — object-store keys: [`Scope::stored`] of a fuzzed directory and URL; a key it
//!   admits passes `check_path` and lies below the allowed prefix (or is the job's changelog
//!   file `<job id>/dstl/<name>` below an ancestor); a URL it admits is within the bucket and
//!   prefix, or is such a changelog file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_flink::scope::{relative_components, Place, Scope, Verdict};
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

const JOB: &str = "0123456789abcdef0123456789abcdef";

/// The directory tree of mode 1, made once per process.
struct Tree {
    root: PathBuf,
    savepoint: PathBuf,
    checkpoint: PathBuf,
}

fn tree() -> &'static Tree {
    static TREE: OnceLock<Tree> = OnceLock::new();
    TREE.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("statekit-fuzz-handles-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        // Deep enough that the 4 directories above `chk-1` (where a changelog directory of
        // the job may be) are all this process's own.
        let base = root.join("a").join("b");
        let savepoint = root.join("sp");
        let job = base.join("ck").join(JOB);
        let checkpoint = job.join("chk-1");
        for d in [
            savepoint.join("sub"),
            checkpoint.clone(),
            job.join("shared"),
            base.join("dstl").join(JOB).join("dstl"),
            root.join("outside"),
        ] {
            std::fs::create_dir_all(&d).expect("mkdir");
        }
        for f in [
            savepoint.join("a"),
            savepoint.join("sub/b"),
            checkpoint.join("c"),
            job.join("shared/s"),
            base.join("dstl").join(JOB).join("dstl/log"),
            root.join("outside/x"),
            root.join("outside/dstl-lookalike"),
        ] {
            std::fs::write(&f, b"x").expect("write");
        }
        let link = |to: PathBuf, at: PathBuf| {
            let _ = std::os::unix::fs::symlink(to, at);
        };
        link(root.join("outside/x"), savepoint.join("link"));
        link(root.join("outside"), savepoint.join("dirlink"));
        link(root.join("outside/x"), checkpoint.join("esc"));
        link(root.join("outside"), job.join("shared/out"));
        link(root.join("sp/a"), savepoint.join("inner"));
        Tree {
            root,
            savepoint,
            checkpoint,
        }
    })
}

fn no_dot_components(parts: &[String]) {
    assert!(
        parts.iter().all(|c| !c.is_empty() && c != "." && c != ".."),
        "{parts:?}"
    );
}

/// `shown` is `root` or below it, by text.
fn below_by_text(shown: &str, root: &str) {
    let rest = shown
        .strip_prefix(root)
        .unwrap_or_else(|| panic!("{shown} not below {root}"));
    assert!(
        rest.is_empty() || rest.starts_with('/') || root.ends_with('/'),
        "{shown} / {root}"
    );
}

fn mode_places(text: &str) {
    let (root, handle) = text.split_once('\n').unwrap_or(("/snapshots/sp", text));
    let Ok(root) = Place::parse(root) else { return };
    no_dot_components(root.parts());
    if let Ok(p) = Place::parse(handle) {
        no_dot_components(p.parts());
        let shown = p.to_string();
        assert_eq!(Place::parse(&shown).as_ref(), Ok(&p), "{shown}");
        if p.is_within(&root) {
            below_by_text(&shown, &root.to_string());
            if let Place::Local(_) = p {
                assert!(Path::new(&shown).starts_with(root.to_string()));
            }
        }
    }
    match root.join(handle) {
        Ok(j) => {
            assert!(relative_components(handle).is_ok());
            assert!(j.is_within(&root));
            no_dot_components(j.parts());
            below_by_text(&j.to_string(), &root.to_string());
        }
        Err(_) => assert!(relative_components(handle).is_err()),
    }
}

fn mode_local(text: &str, checkpoint: bool) {
    let t = tree();
    let dir = if checkpoint { &t.checkpoint } else { &t.savepoint };
    let scope = Scope::local(dir, &[]);
    assert_eq!(scope.is_checkpoint(), checkpoint);
    if text.contains('\0') {
        return;
    }
    let candidate = dir.join(text);
    let verdict = scope.check_local(&candidate);
    if verdict != Verdict::Inside {
        return;
    }
    let canonical = std::fs::canonicalize(&candidate).expect("an admitted file exists");
    let allowed = if checkpoint {
        let job = std::fs::canonicalize(dir.parent().expect("job")).expect("job");
        let dstl = std::fs::canonicalize(t.checkpoint.join("../../../dstl").join(JOB).join("dstl")).expect("dstl");
        canonical.starts_with(&job) || canonical.parent() == Some(dstl.as_path())
    } else {
        canonical.starts_with(std::fs::canonicalize(dir).expect("savepoint"))
    };
    assert!(
        allowed,
        "{} admitted, leads to {}",
        candidate.display(),
        canonical.display()
    );
    assert!(!canonical.starts_with(std::fs::canonicalize(t.root.join("outside")).expect("outside")));
    assert!(canonical
        .components()
        .all(|c| !matches!(c, Component::ParentDir | Component::CurDir)));
}

fn mode_stored(text: &str) {
    let mut it = text.splitn(3, '\n');
    let (Some(dir), Some(handle)) = (it.next(), it.next()) else {
        return;
    };
    let url_tail = it.next();
    let dir = dir.trim_matches('/');
    let url = match url_tail {
        Some(u) => u.to_string(),
        None => format!("s3://bk/{dir}"),
    };
    let scope = Scope::stored(dir, &url, &[]);
    let dir_parts: Vec<&str> = dir.split('/').filter(|c| !c.is_empty()).collect();
    let mut prefix = dir_parts.clone();
    if scope.is_checkpoint() {
        prefix.pop();
    }
    let key = if dir.is_empty() {
        handle.to_string()
    } else {
        format!("{dir}/{handle}")
    };
    for k in [key.as_str(), handle] {
        if scope.admits_key(k) {
            assert!(statekit_core::storage::check_path(k).is_ok(), "{k}");
            let parts: Vec<&str> = k.split('/').collect();
            let changelog = scope.is_checkpoint()
                && parts.len() >= 3
                && parts[parts.len() - 2] == "dstl"
                && prefix.last() == Some(&parts[parts.len() - 3]);
            assert!(
                (parts.len() > prefix.len() && parts.starts_with(&prefix)) || changelog,
                "{k} admitted below {prefix:?}"
            );
        }
    }
    if let Ok(p) = Place::parse(handle) {
        if scope.admits_url(&p) {
            let own = Place::parse(url.trim_end_matches('/')).expect("an admitted URL needs a parsable root");
            assert!(
                matches!((&p, &own), (Place::Url { .. }, Place::Url { .. })),
                "{p}: not an object"
            );
            let root = if scope.is_checkpoint() {
                own.parent().expect("parent")
            } else {
                own.clone()
            };
            // The job's changelog file: `<job id>/dstl/<name>`, the job id the checkpoint's
            // (from its directory), below one of the 4 places above the snapshot's own.
            let n = p.parts().len();
            let mut ancestors = Vec::new();
            let mut a = own.parent();
            while let Some(up) = a {
                if ancestors.len() == 4 {
                    break;
                }
                a = up.parent();
                ancestors.push(up);
            }
            let changelog = scope.is_checkpoint()
                && n >= 3
                && p.parts()[n - 2] == "dstl"
                && prefix.last().map(|j| j.to_string()).as_ref() == Some(&p.parts()[n - 3])
                && ancestors.iter().any(|r| p.is_within(r));
            assert!(p.is_within(&root) || changelog, "{p} admitted, root {root}");
            if let (
                Place::Url { scheme, bucket, .. },
                Place::Url {
                    scheme: rs, bucket: rb, ..
                },
            ) = (&p, &own)
            {
                assert_eq!((scheme, bucket), (rs, rb), "{p}: another bucket");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    statekit_fuzz::begin(data);
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match mode % 4 {
        0 => mode_places(&text),
        1 => mode_local(&text, false),
        2 => mode_local(&text, true),
        _ => mode_stored(&text),
    }
});
