//! The AWS shared configuration files (`~/.aws/credentials`, `~/.aws/config`), which
//! `object_store` does not read: the keys of one profile, as builder options. Environment
//! variables win over the files (they are applied after).

use std::collections::BTreeMap;
use std::path::PathBuf;

/// `section -> key -> value` of an INI file (`#` and `;` comments, `key = value`).
fn parse_ini(text: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut section = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().to_string();
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            out.entry(section.clone())
                .or_default()
                .insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    out
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

/// The options of the active profile (`AWS_PROFILE`, else `default`) from the shared files
/// (`AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE` or their defaults under `~/.aws`), as
/// `object_store` S3 configuration keys.
pub(crate) fn profile_options() -> Vec<(String, String)> {
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".to_string());
    let credentials = std::env::var_os("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".aws/credentials")));
    let config = std::env::var_os("AWS_CONFIG_FILE")
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".aws/config")));
    let mut out = Vec::new();
    let wanted = [
        ("aws_access_key_id", "aws_access_key_id"),
        ("aws_secret_access_key", "aws_secret_access_key"),
        ("aws_session_token", "aws_session_token"),
        ("region", "aws_region"),
        ("endpoint_url", "aws_endpoint"),
    ];
    let mut take = |ini: &BTreeMap<String, BTreeMap<String, String>>, section: &str| {
        if let Some(s) = ini.get(section) {
            for (file_key, option) in wanted {
                if let Some(v) = s.get(file_key) {
                    if !out.iter().any(|(k, _)| k == option) {
                        out.push((option.to_string(), v.clone()));
                    }
                }
            }
        }
    };
    if let Some(text) = credentials.and_then(|p| std::fs::read_to_string(p).ok()) {
        take(&parse_ini(&text), &profile);
    }
    if let Some(text) = config.and_then(|p| std::fs::read_to_string(p).ok()) {
        let ini = parse_ini(&text);
        let section = if profile == "default" {
            "default".to_string()
        } else {
            format!("profile {profile}")
        };
        take(&ini, &section);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ini_sections_and_keys() {
        let ini = parse_ini(
            "# c\n[default]\naws_access_key_id = AK\n[profile dev]\nregion=eu-west-1\n; x\nendpoint_url = http://127.0.0.1:9000\n",
        );
        assert_eq!(ini["default"]["aws_access_key_id"], "AK");
        assert_eq!(ini["profile dev"]["region"], "eu-west-1");
        assert_eq!(ini["profile dev"]["endpoint_url"], "http://127.0.0.1:9000");
    }
}
