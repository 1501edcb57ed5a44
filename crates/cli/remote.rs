//! The remote store as the commands use it (crates/remote does the work): the flags that
//! name one, opening it, its errors as the CLI reports them, and the remote as `run`'s cache
//! and in `status`. `push`, `pull` and `gc --remote` are commands of their own.

use std::collections::{HashMap, HashSet};
use std::io::IsTerminal;
use std::sync::Arc;

use anyhow::Result;
use clap::Args;
use pipeline_engine::exec::Outcome;
use pipeline_engine::index::Index;
use pipeline_engine::remote::RemoteCache;
use pipeline_engine::{Pipeline, UserError};
use pipeline_remote::{Remote, RemoteError, RunCache};

use crate::global::Global;

/// `--remote` and `--no-remote` of `pipeline run`.
#[derive(Debug, Args)]
pub struct RunRemote {
    /// Look instances up in this remote (a name from pipeline.yaml's `remotes:`, a URL or a
    /// directory) before running them, and pull them instead. Default: $PIPELINE_REMOTE, else
    /// the file's default remote.
    #[arg(long, value_name = "NAME|URL")]
    pub remote: Option<String>,
    /// Use no remote.
    #[arg(long, conflicts_with = "remote")]
    pub no_remote: bool,
}

/// `--remote` and `--no-remote` of `pipeline status`.
#[derive(Debug, Args)]
pub struct StatusRemote {
    /// Say which stale instances this remote holds (a name from pipeline.yaml's `remotes:`, a
    /// URL or a directory). Default: $PIPELINE_REMOTE, else the file's default remote.
    #[arg(long, value_name = "NAME|URL")]
    pub remote: Option<String>,
    /// Ask no remote.
    #[arg(long, conflicts_with = "remote")]
    pub no_remote: bool,
}

#[derive(Debug, Args)]
pub struct TransferArgs {
    /// Stage or instance names and what they need. None: every stage.
    pub targets: Vec<String>,
    /// A name from pipeline.yaml's `remotes:`, a URL (s3://BUCKET/PREFIX) or a directory.
    /// Default: $PIPELINE_REMOTE, else the file's default remote.
    #[arg(long, value_name = "NAME|URL")]
    pub remote: Option<String>,
    #[arg(long)]
    pub json: bool,
}

/// A remote error as the CLI reports it: mistakes in the input exit with 2.
pub(crate) fn to_anyhow(e: RemoteError) -> anyhow::Error {
    if e.is_user_error() {
        let mut user = UserError::new(e.to_string());
        if let Some(help) = e.help() {
            user = user.with_help(help);
        }
        user.into()
    } else {
        e.into()
    }
}

/// The remote a command uses, if any is configured (`create`: a directory remote may be made).
fn open(p: &Pipeline, flag: Option<&str>, create: bool) -> Result<Option<Remote>, RemoteError> {
    let Some(spec) = pipeline_remote::resolve(&p.plan.file.remotes, flag)? else {
        return Ok(None);
    };
    Ok(Some(Remote::open(&spec, &p.plan.root, create)?))
}

/// The remote a command must have: a mistake in the input (exit 2) when none is configured.
pub(crate) fn required(p: &Pipeline, flag: Option<&str>, create: bool) -> Result<Remote> {
    open(p, flag, create)
        .map_err(to_anyhow)?
        .ok_or_else(|| to_anyhow(RemoteError::NoRemote))
}

/// Whether to draw transfer progress: on a terminal, unless `--quiet` or `--json`.
pub(crate) fn progress(global: &Global, json: bool) -> bool {
    !global.quiet && !json && std::io::stderr().is_terminal()
}

/// The run cache `pipeline run` hands the engine, unless `--no-remote` or none is configured.
/// A remote that cannot be opened (an unmounted directory) is a warning: the run goes on here.
pub fn run_cache(p: &Pipeline, flags: &RunRemote) -> Result<Option<Arc<dyn RemoteCache>>> {
    if flags.no_remote {
        return Ok(None);
    }
    match open(p, flags.remote.as_deref(), false) {
        Ok(r) => Ok(r.map(|r| Arc::new(RunCache::new(r)) as Arc<dyn RemoteCache>)),
        Err(e) if e.is_user_error() => Err(to_anyhow(e)),
        Err(e) => {
            tracing::warn!("{e}; running without the remote");
            Ok(None)
        }
    }
}

/// For `status`: the instances whose artifact at the current plan's fingerprint the remote has
/// (their fingerprints are filled in). A remote that cannot be reached is a warning; one that
/// is misnamed (`--remote nsf`) an error, as for `run`.
pub fn in_remote(
    p: &Pipeline,
    stages: &mut [Outcome],
    flags: &StatusRemote,
) -> Result<HashSet<String>> {
    if flags.no_remote {
        return Ok(HashSet::new());
    }
    let remote = match open(p, flags.remote.as_deref(), false) {
        Ok(r) => r,
        Err(e) if e.is_user_error() => return Err(to_anyhow(e)),
        Err(e) => {
            tracing::warn!("the remote could not be asked: {e}");
            None
        }
    };
    let found = (|| -> Result<HashMap<String, String>> {
        let Some(remote) = remote else {
            return Ok(HashMap::new());
        };
        let selected: Vec<usize> = stages
            .iter()
            .filter_map(|o| p.plan.instances.iter().position(|i| i.name == o.instance))
            .collect();
        let mut index = Index::open_read_only(&p.ws);
        let places = remote.locate(p, &mut index, &selected).map_err(to_anyhow)?;
        Ok(places
            .into_iter()
            .filter_map(|(i, place)| match place {
                pipeline_remote::Place::Remote(m) => {
                    Some((p.plan.instances[i].name.clone(), m.manifest.fingerprint))
                }
                _ => None,
            })
            .collect())
    })();
    let found = found.unwrap_or_else(|e| {
        let e = pipeline_engine::error::anyhow_text(&e);
        tracing::warn!("the remote could not be asked: {e}");
        HashMap::new()
    });
    for o in stages.iter_mut() {
        if let Some(fp) = found.get(&o.instance) {
            o.fingerprint = Some(fp.clone());
        }
    }
    Ok(found.into_keys().collect())
}
