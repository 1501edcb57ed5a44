//! AWS credentials and region from the shared files (`~/.aws/credentials`, `~/.aws/config`),
//! for machines where they are not in the environment. `object_store` reads the environment
//! (and instance metadata) itself but not these files.

use std::path::{Path, PathBuf};

use ini::Ini;
use object_store::aws::AmazonS3Builder;

use crate::{RemoteError, Result};

/// Fills in what the environment left out from the profile `AWS_PROFILE` (or `default`).
pub fn from_files(mut builder: AmazonS3Builder) -> Result<AmazonS3Builder> {
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".to_string());
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let file = |var: &str, name: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws").join(name)))
    };
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none()
        && let Some(path) = file("AWS_SHARED_CREDENTIALS_FILE", "credentials")
        && let Some(section) = read_section(&path, &profile)?
    {
        let get = |k: &str| section.iter().find(|(key, _)| key == k).map(|(_, v)| v);
        match (get("aws_access_key_id"), get("aws_secret_access_key")) {
            (Some(id), Some(secret)) => {
                builder = builder
                    .with_access_key_id(id)
                    .with_secret_access_key(secret);
                if let Some(token) = get("aws_session_token") {
                    builder = builder.with_token(token);
                }
            }
            _ => {
                return Err(RemoteError::CredentialsFile {
                    path,
                    why: format!(
                        "profile [{profile}] needs aws_access_key_id and aws_secret_access_key"
                    ),
                });
            }
        }
    }
    let region_set = ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .iter()
        .any(|k| std::env::var_os(k).is_some());
    if !region_set && let Some(path) = file("AWS_CONFIG_FILE", "config") {
        // The config file names profiles `[profile NAME]`, except `[default]`.
        let section = if profile == "default" {
            profile.clone()
        } else {
            format!("profile {profile}")
        };
        if let Some(entries) = read_section(&path, &section)?
            && let Some((_, region)) = entries.iter().find(|(k, _)| k == "region")
        {
            builder = builder.with_region(region);
        }
    }
    Ok(builder)
}

/// The `key = value` pairs of `[section]`; `None` when the file or the section is absent.
fn read_section(path: &Path, section: &str) -> Result<Option<Vec<(String, String)>>> {
    if !path.exists() {
        return Ok(None);
    }
    let ini = Ini::load_from_file(path).map_err(|e| RemoteError::CredentialsFile {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    Ok(ini.section(Some(section)).map(|props| {
        props
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_profile_section() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("credentials");
        std::fs::write(
            &path,
            "[default]\naws_access_key_id = A\naws_secret_access_key = B\n[lab]\nregion = eu-west-1\n",
        )
        .unwrap();
        let s = read_section(&path, "default").unwrap().unwrap();
        assert!(s.contains(&("aws_access_key_id".into(), "A".into())));
        assert_eq!(
            read_section(&path, "lab").unwrap().unwrap()[0].1,
            "eu-west-1"
        );
        assert!(read_section(&path, "none").unwrap().is_none());
        assert!(read_section(&dir.path().join("x"), "a").unwrap().is_none());
    }
}
