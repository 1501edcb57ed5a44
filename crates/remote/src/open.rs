//! Which remote a command uses (`--remote`, then `PIPELINE_REMOTE`, then pipeline.yaml's
//! default) and how its URL becomes an object store.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::prefix::PrefixStore;
use pipeline_engine::error::suggestion;
use pipeline_engine::remote::{Remotes, credentials_in_url};

use crate::{Remote, RemoteError, Result};

/// The environment variable that overrides pipeline.yaml's default remote (a name or a URL;
/// `none` turns remotes off).
pub const ENV: &str = "PIPELINE_REMOTE";

/// A chosen remote, before it is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The name declared in pipeline.yaml, or the URL when one was given instead.
    pub name: String,
    /// The URL (`s3://BUCKET/PREFIX`, `file:///DIR`) or directory path, not yet checked.
    pub url: String,
}

/// The remote to use: `flag` (`--remote NAME|URL`), else `$PIPELINE_REMOTE`, else the file's
/// default. `Ok(None)`: none is configured (or `PIPELINE_REMOTE=none`).
pub fn resolve(remotes: &Remotes, flag: Option<&str>) -> Result<Option<Spec>> {
    let env = std::env::var(ENV).ok().filter(|v| !v.trim().is_empty());
    let chosen = match (flag, env.as_deref()) {
        (Some(f), _) => f.to_string(),
        (None, Some(e)) if e.trim() == "none" => return Ok(None),
        (None, Some(e)) => e.trim().to_string(),
        (None, None) => match &remotes.default {
            Some(d) => d.clone(),
            None => return Ok(None),
        },
    };
    if let Some(url) = remotes.get(&chosen) {
        return Ok(Some(Spec {
            name: chosen.clone(),
            url: url.to_string(),
        }));
    }
    let looks_like_location = chosen.contains("://") || chosen.contains('/') || chosen == ".";
    if !looks_like_location {
        return Err(RemoteError::UnknownName {
            help: format!(
                "{} (or give a URL or a directory path)",
                suggestion(&chosen, &remotes.names())
            ),
            name: chosen,
        });
    }
    Ok(Some(Spec {
        name: chosen.clone(),
        url: chosen,
    }))
}

impl Remote {
    /// Opens `spec`; a relative directory is taken from `root` (the workspace). A directory
    /// remote that does not exist is created when `create` (a push), an error otherwise.
    pub fn open(spec: &Spec, root: &Path, create: bool) -> Result<Remote> {
        if let Some(why) = credentials_in_url(&spec.url) {
            return Err(RemoteError::Credentials {
                url: spec.url.clone(),
                why,
            });
        }
        let (store, dir): (Arc<dyn ObjectStore>, _) = match spec.url.split_once("://") {
            Some(("s3" | "s3a", rest)) => (s3(&spec.url, rest)?, None),
            Some(("file", rest)) => directory(Path::new(rest), create)?,
            Some(_) => {
                return Err(RemoteError::Scheme {
                    url: spec.url.clone(),
                });
            }
            None => directory(&root.join(&spec.url), create)?,
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .map_err(|source| RemoteError::Io {
                path: PathBuf::from("(tokio runtime)"),
                source,
            })?;
        Ok(Remote {
            name: spec.name.clone(),
            url: spec.url.clone(),
            store,
            dir,
            rt,
        })
    }
}

/// A directory remote, and its canonical path.
fn directory(dir: &Path, create: bool) -> Result<(Arc<dyn ObjectStore>, Option<PathBuf>)> {
    let io = |source| RemoteError::Io {
        path: dir.to_path_buf(),
        source,
    };
    if create {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let dir = dir.canonicalize().map_err(io)?;
    let store = LocalFileSystem::new_with_prefix(&dir).map_err(|cause| RemoteError::Store {
        remote: dir.display().to_string(),
        cause,
    })?;
    Ok((Arc::new(store), Some(dir)))
}

/// `s3://bucket/prefix`: credentials, region and endpoint from the environment (`AWS_*`, as the
/// AWS CLI reads them), else from the shared credentials and config files.
fn s3(url: &str, rest: &str) -> Result<Arc<dyn ObjectStore>> {
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(RemoteError::Scheme {
            url: url.to_string(),
        });
    }
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
    builder = crate::creds::from_files(builder)?;
    let endpoint = ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"]
        .iter()
        .find_map(|k| std::env::var(k).ok());
    if endpoint.is_some_and(|e| e.starts_with("http://")) {
        // A local S3-compatible server (MinIO, moto) answers over plain HTTP.
        builder = builder.with_allow_http(true);
    }
    // A remote that does not answer should fail a command in seconds, not after object_store's
    // default of 10 retries over 3 minutes.
    builder = builder.with_retry(object_store::RetryConfig {
        max_retries: 3,
        retry_timeout: std::time::Duration::from_secs(30),
        ..Default::default()
    });
    let store = builder.build().map_err(|cause| RemoteError::Store {
        remote: url.to_string(),
        cause,
    })?;
    let prefix = prefix.trim_matches('/');
    Ok(if prefix.is_empty() {
        Arc::new(store)
    } else {
        Arc::new(PrefixStore::new(store, prefix))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remotes(text: &str) -> Remotes {
        let node = pipeline_engine::yaml::parse(text).unwrap().unwrap();
        pipeline_engine::remote::parse_remotes(Path::new("p.yaml"), text, &node).unwrap()
    }

    #[test]
    fn names_urls_and_typos() {
        let r = remotes("{lab: s3://b/p, nfs: /mnt/x, default: lab}");
        assert_eq!(resolve(&r, Some("nfs")).unwrap().unwrap().url, "/mnt/x");
        assert_eq!(
            resolve(&r, Some("/tmp/other")).unwrap().unwrap().url,
            "/tmp/other"
        );
        let e = resolve(&r, Some("nsf")).unwrap_err();
        assert!(e.help().unwrap().contains("`nfs`"), "{e}");
        assert!(e.is_user_error());
    }

    #[test]
    fn credentials_in_a_url_are_refused() {
        let spec = Spec {
            name: "x".into(),
            url: "s3://AKIA:secret@bucket/p".into(),
        };
        let e = Remote::open(&spec, Path::new("/"), false).unwrap_err();
        assert!(e.to_string().contains("credentials"), "{e}");
        assert!(e.is_user_error());
    }
}
