//! Executors: where a ready stage instance runs. The run loop in [`crate::exec`] decides *what*
//! is ready (deps committed, fingerprint computed, not cached); an executor decides *where* it
//! runs and reports back when the instance's output is committed or has failed.
//!
//! - **local** (the default): a thread of the `pipeline run` process runs the stage in-process
//!   ([`crate::exec`]), within `--jobs` CPU slots and `--gpus` GPU tokens.
//! - **slurm** ([`slurm`]): each instance becomes one Slurm job. The job runs the same binary's
//!   hidden `run-instance` subcommand ([`instance`]) into a temporary directory on the store's
//!   filesystem; the controller (the `pipeline run` process) alone hashes the output, writes the
//!   manifest and renames it into the store, and only once the job's exit marker says it
//!   succeeded.
//!
//! Every executor keeps the same contract, which is what makes another engine (Kubernetes jobs,
//! Ray tasks; see docs/cluster.md) a matter of one more module: run [`instance::InstanceSpec`]
//! somewhere that sees the store, and say how it ended. The executor is not part of a
//! fingerprint: local and cluster runs share one cache.

pub mod config;
pub mod instance;
pub mod slurm;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::Pipeline;
use crate::error::{UserError, suggestion};
use crate::yaml::Located;
use config::ExecutorKind;

/// Everything a cluster job of one instance is submitted with, after merging the top-level
/// `executor:` block, the stage's own `executor:` block and its `resources`.
#[derive(Debug, Clone)]
pub struct JobSettings {
    /// Where the instance runs (only [`ExecutorKind::Slurm`] instances become jobs).
    pub kind: ExecutorKind,
    /// `sbatch --partition`; `None` leaves it to Slurm's default. Located so that an unknown
    /// partition is an error at its line.
    pub partition: Option<Located<String>>,
    /// `sbatch --account`; `None` leaves it to Slurm's default.
    pub account: Option<String>,
    /// The time limit in seconds (`resources: time` first, then the blocks); `None`: the
    /// partition's.
    pub time: Option<u64>,
    /// Memory in megabytes (`resources: mem` first, then the blocks); `None`: the
    /// partition's.
    pub mem: Option<u64>,
    /// `--cpus-per-task`, from the stage's `resources: cpu`.
    pub cpu: u32,
    /// GPUs (`--gres=gpu:N`, none when 0), from the stage's `resources: gpu`.
    pub gpu: u32,
    /// Further `sbatch` arguments, passed as written after the engine's own.
    pub extra: Vec<String>,
    /// `--requeue` (Slurm requeues the job itself after a node failure or preemption, under the
    /// same id) or `--no-requeue` (the controller resubmits, up to `retries` times).
    pub requeue: bool,
    /// Resubmissions after a node failure, boot failure or preemption (default 1).
    pub retries: u32,
    /// The longest wait between two polls of Slurm while nothing changes (default 30 s); the
    /// interval starts at 250 ms and grows by half each quiet poll.
    pub poll_max: Duration,
    /// How long a job may stay PENDING for a reason that cannot clear (default 10 min).
    pub pending_timeout: Duration,
    /// How long a job's state may stay unknown (no marker, not listed by Slurm; default
    /// 10 min).
    pub unknown_timeout: Duration,
    /// How long to wait for a finished job's output to appear on the shared filesystem
    /// (default 60 s).
    pub fs_wait: Duration,
}

/// The settings instance `i` runs with: for each key the stage's `executor:` block where it
/// sets it, else the top-level block, else the default; the stage's `resources` `time` and
/// `mem` win over both blocks. `flag` is `--executor`: `local` runs every instance here,
/// `slurm` applies to the stages whose own block names no kind.
pub fn settings_for(p: &Pipeline, i: usize, flag: Option<ExecutorKind>) -> JobSettings {
    let inst = &p.plan.instances[i];
    let top = &p.plan.file.executor;
    let stage = p
        .plan
        .file
        .stages
        .iter()
        .find(|s| s.name.value == inst.stage)
        .map(|s| &s.executor);
    // The stage's block where it sets the key, else the top-level one.
    let pick = |f: fn(&config::ExecutorDecl) -> bool| stage.filter(|s| f(s)).unwrap_or(top);
    let kind = match flag {
        // `--executor local` runs the whole file here, whatever it says.
        Some(ExecutorKind::Local) => ExecutorKind::Local,
        flag => stage
            .and_then(|s| s.kind.as_ref().map(|k| k.value))
            .or(flag)
            .or(top.kind.as_ref().map(|k| k.value))
            .unwrap_or(ExecutorKind::Local),
    };
    JobSettings {
        kind,
        partition: pick(|d| d.partition.is_some()).partition.clone(),
        account: pick(|d| d.account.is_some())
            .account
            .as_ref()
            .map(|a| a.value.clone()),
        time: inst
            .resources
            .time
            .or(pick(|d| d.time.is_some()).time.as_ref().map(|t| t.value)),
        mem: inst
            .resources
            .mem
            .or(pick(|d| d.mem.is_some()).mem.as_ref().map(|m| m.value)),
        cpu: inst.resources.cpu,
        gpu: inst.resources.gpu,
        extra: pick(|d| d.extra.is_some())
            .extra
            .iter()
            .flatten()
            .map(|e| e.value.clone())
            .collect(),
        requeue: pick(|d| d.requeue.is_some()).requeue.unwrap_or(false),
        retries: pick(|d| d.retries.is_some()).retries.unwrap_or(1),
        poll_max: pick(|d| d.poll_max.is_some())
            .poll_max
            .unwrap_or(Duration::from_secs(30)),
        pending_timeout: pick(|d| d.pending_timeout.is_some())
            .pending_timeout
            .unwrap_or(Duration::from_secs(600)),
        unknown_timeout: pick(|d| d.unknown_timeout.is_some())
            .unknown_timeout
            .unwrap_or(Duration::from_secs(600)),
        fs_wait: pick(|d| d.fs_wait.is_some())
            .fs_wait
            .unwrap_or(Duration::from_secs(60)),
    }
}

/// The instances of a run that go to a cluster, with their settings, checked before anything
/// runs: the Slurm tools are on PATH and every partition named exists. Mistakes are
/// [`UserError`]s (exit code 2).
pub fn prepare(
    p: &Pipeline,
    selected: &[usize],
    flag: Option<ExecutorKind>,
) -> Result<HashMap<usize, JobSettings>, UserError> {
    let mut remote = HashMap::new();
    for &i in selected {
        let s = settings_for(p, i, flag);
        if s.kind == ExecutorKind::Slurm {
            remote.insert(i, s);
        }
    }
    if remote.is_empty() {
        return Ok(remote);
    }
    let first = remote.keys().min().map(|&i| &p.plan.instances[i]);
    let who = first.map_or(String::new(), |inst| format!(" (stage `{}`)", inst.name));
    for tool in ["sbatch", "squeue", "scancel"] {
        if find_on_path(tool).is_none() {
            return Err(UserError::new(format!(
                "the executor is slurm{who} but `{tool}` is not on PATH"
            ))
            .with_help(
                "run on a machine with the Slurm client tools (a login node), or run here with `pipeline run --executor local`",
            ));
        }
    }
    let used: Vec<&Located<String>> = {
        let mut v: Vec<&Located<String>> = remote
            .values()
            .filter_map(|s| s.partition.as_ref())
            .collect();
        v.sort_by(|a, b| a.value.cmp(&b.value));
        v.dedup_by(|a, b| a.value == b.value);
        v
    };
    if !used.is_empty() {
        match slurm::commands::partitions() {
            Ok(known) => {
                for part in used {
                    if !known.contains(&part.value) {
                        let names: Vec<&str> = known.iter().map(String::as_str).collect();
                        return Err(p
                            .plan
                            .file
                            .error_at(
                                part.mark,
                                format!("unknown Slurm partition `{}`", part.value),
                            )
                            .with_help(format!(
                                "{} (sinfo lists: {})",
                                suggestion(&part.value, &names),
                                names.join(", ")
                            )));
                    }
                }
            }
            // The controller may be briefly unreachable; submission will say more.
            Err(e) => tracing::warn!("could not list Slurm partitions to check them: {e}"),
        }
    }
    Ok(remote)
}

/// The first executable file named `tool` in a directory of `$PATH`, as a shell would find
/// it; `None` when there is none (or `PATH` is unset).
pub fn find_on_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

static INTERRUPTED: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Makes SIGINT and SIGTERM set a flag instead of killing the controller, so that it can
/// cancel its cluster jobs first. Only runs with cluster jobs install it: a local run keeps
/// the default behaviour (the signal reaches the stage processes too and ends the run).
pub fn catch_interrupts() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let flag = INTERRUPTED.get_or_init(|| Arc::new(AtomicBool::new(false)));
        register(flag);
    });
}

fn register(flag: &Arc<AtomicBool>) {
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, flag.clone()) {
            tracing::warn!("cannot catch signal {sig}: {e}");
        }
    }
}

/// Whether SIGINT or SIGTERM arrived since [`catch_interrupts`].
pub fn interrupted() -> bool {
    INTERRUPTED.get().is_some_and(|f| f.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Registry;

    fn load(text: &str) -> (tempfile::TempDir, Pipeline) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pipeline.yaml");
        std::fs::write(&path, text).unwrap();
        let p = Pipeline::load(&path, &[], Registry::builtin()).unwrap();
        (dir, p)
    }

    #[test]
    fn stage_blocks_and_resources_override_the_top_level() {
        let (_dir, p) = load(
            "executor: {kind: slurm, partition: cpu, time: \"1:00:00\", mem: 1G, extra: [\"--qos=a\"]}\nstages:\n  a:\n    cmd: x\n    resources: {gpu: 2, cpu: 4, mem: 32G}\n    executor: {partition: gpu, retries: 3}\n  b:\n    cmd: y\n    executor: {kind: local}\n",
        );
        let a = settings_for(&p, 0, None);
        assert_eq!(a.kind, ExecutorKind::Slurm);
        assert_eq!(a.partition.unwrap().value, "gpu");
        assert_eq!(
            (a.cpu, a.gpu, a.mem, a.time),
            (4, 2, Some(32 * 1024), Some(3600))
        );
        assert_eq!(a.extra, ["--qos=a"]);
        assert_eq!((a.retries, a.requeue), (3, false));
        assert_eq!(settings_for(&p, 1, None).kind, ExecutorKind::Local);
        assert_eq!(
            settings_for(&p, 1, Some(ExecutorKind::Slurm)).kind,
            ExecutorKind::Local
        );
        assert_eq!(
            settings_for(&p, 0, Some(ExecutorKind::Local)).kind,
            ExecutorKind::Local
        );
        // Local runs need no Slurm at all.
        assert!(prepare(&p, &[1], None).unwrap().is_empty());
    }

    #[test]
    fn executor_mistakes_point_into_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pipeline.yaml");
        std::fs::write(
            &path,
            "stages:\n  a:\n    cmd: x\n    resources: {mem: lots}\n",
        )
        .unwrap();
        let e = Pipeline::load(&path, &[], Registry::builtin())
            .err()
            .unwrap();
        assert_eq!(e.location.as_ref().unwrap().1.line, 4);
        assert!(e.message.contains("amount of memory"), "{e}");
        std::fs::write(
            &path,
            "executor: {kind: slurm, timeout: 3}\nstages:\n  a:\n    cmd: x\n",
        )
        .unwrap();
        let e = Pipeline::load(&path, &[], Registry::builtin())
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .contains("unknown key `timeout` in `executor`"),
            "{e}"
        );
    }
}
