//! A job's temporary directory and what is submitted: the instance spec, the job script and
//! the sbatch flags.
//!
//! The directory lives under `.pipeline/jobs/` (beside the store, so committing the output is a
//! rename on one filesystem) and outlives the controller, so a later run can re-attach:
//!
//! ```text
//! .pipeline/jobs/<instance>/<fingerprint>-<n>/
//!   spec.json   the instance (what `pipeline run-instance` reads)
//!   job.sh      the script sbatch runs
//!   out/        the output, becomes the artifact
//!   log/        the stage's logs and the job's stdout/stderr (slurm-<id>.out/.err)
//!   starts      one line per start of the script: job id, node, epoch seconds
//!   exit        the exit marker: the stage's exit code, written last (the truth)
//! ```

use std::path::{Path, PathBuf};

use super::commands::quote;
use crate::error::JobError;
use crate::executor::JobSettings;
use crate::executor::config::format_time;
use crate::executor::instance::InstanceSpec;

/// One submission of an instance as a job: its directory under `.pipeline/jobs/` (laid out
/// as the module doc shows).
#[derive(Debug, Clone)]
pub struct Attempt {
    /// `.pipeline/jobs/<instance>/<fingerprint>-<n>`.
    pub dir: PathBuf,
}

impl Attempt {
    /// `out/`: the stage's output, which becomes the artifact.
    pub fn out(&self) -> PathBuf {
        self.dir.join("out")
    }
    /// `log/`: the stage's logs and the job's `slurm-<id>.out`/`.err`.
    pub fn log(&self) -> PathBuf {
        self.dir.join("log")
    }
    /// `spec.json`: the instance, as `pipeline run-instance` reads it.
    pub fn spec(&self) -> PathBuf {
        self.dir.join("spec.json")
    }
    /// `job.sh`: the script sbatch runs.
    pub fn script(&self) -> PathBuf {
        self.dir.join("job.sh")
    }
    /// `exit`: the stage's exit code, written last by rename.
    pub fn marker(&self) -> PathBuf {
        self.dir.join("exit")
    }
    /// `starts`: one line per start of the script (job id, node, epoch seconds).
    pub fn starts(&self) -> PathBuf {
        self.dir.join("starts")
    }

    /// The exit code in the marker, once the script has written it.
    pub fn exit_code(&self) -> Option<i32> {
        std::fs::read_to_string(self.marker())
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The last start of the script: (node, epoch seconds).
    pub fn last_start(&self) -> Option<(String, u64)> {
        let text = std::fs::read_to_string(self.starts()).ok()?;
        let line = text.lines().last()?;
        let f: Vec<&str> = line.split_whitespace().collect();
        Some((f.get(1)?.to_string(), f.get(2)?.parse().ok()?))
    }

    /// When the marker was written (epoch seconds, sub-second).
    pub fn ended(&self) -> Option<f64> {
        let m = std::fs::metadata(self.marker()).ok()?.modified().ok()?;
        Some(m.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs_f64())
    }

    /// Writes the spec and the job script (which runs `exe run-instance`), after creating
    /// the log directory and marking the instance's folder as the store's.
    pub fn prepare(&self, spec: &InstanceSpec, exe: &Path) -> Result<(), JobError> {
        std::fs::create_dir_all(self.log())
            .and_then(|_| match self.dir.parent() {
                Some(instance_folder) => crate::owned::mark(instance_folder),
                None => Ok(()),
            })
            .map_err(|source| JobError::CreateDir {
                dir: self.log(),
                source,
            })?;
        let write = |path: PathBuf, bytes: Vec<u8>| {
            std::fs::write(&path, bytes).map_err(|source| JobError::Write { path, source })
        };
        write(self.spec(), serde_json::to_vec_pretty(spec)?)?;
        write(self.script(), job_script(self, spec, exe).into_bytes())
    }
}

/// The job script. The marker is written last and by rename, so its presence means the stage
/// ran to the end and its content is whole.
pub fn job_script(a: &Attempt, spec: &InstanceSpec, exe: &Path) -> String {
    let q = |p: &Path| quote(&p.to_string_lossy());
    format!(
        r#"#!/bin/sh
# `pipeline run` submitted this for {instance} (fingerprint {fp}).
# Slurm signals a job it ends (TIMEOUT, scancel, a node going down): then no marker, so that
# the controller judges the job by Slurm's state, not by the stage's interrupted exit code.
trap 'echo "pipeline: the job was signalled; no exit marker" >&2; exit 143' TERM INT HUP USR1 USR2
rm -f {marker}
echo "${{SLURM_JOB_ID:-?}} $(hostname) $(date +%s)" >> {starts}
{exe} run-instance {spec}
code=$?
# Slurm signals every process of the job at once: the stage may die of the signal (and this
# shell resume) before the trap above runs. Ended by one of those signals, it leaves no marker
# either (a requeued job was judged failed with exit 143 when the stage was the faster one).
case "$code" in 129|130|138|140|143) echo "pipeline: the job was signalled; no exit marker" >&2; exit "$code" ;; esac
printf '%s\n' "$code" > {marker}.tmp && mv -f {marker}.tmp {marker}
exit "$code"
"#,
        instance = spec.instance.replace('\n', " "),
        fp = spec.fingerprint,
        marker = q(&a.marker()),
        starts = q(&a.starts()),
        exe = q(exe),
        spec = q(&a.spec()),
    )
}

/// The arguments of `sbatch` for one job.
pub fn sbatch_args(s: &JobSettings, a: &Attempt, instance: &str, root: &Path) -> Vec<String> {
    let log = a.log();
    let mut args = vec![
        "--parsable".to_string(),
        format!("--job-name=pipeline:{instance}"),
        format!("--chdir={}", root.display()),
        format!("--output={}", log.join("slurm-%j.out").display()),
        format!("--error={}", log.join("slurm-%j.err").display()),
        // A requeued job appends to its logs instead of losing the first attempt's.
        "--open-mode=append".to_string(),
        "--export=ALL".to_string(),
        if s.requeue {
            "--requeue".to_string()
        } else {
            "--no-requeue".to_string()
        },
    ];
    if let Some(p) = &s.partition {
        args.push(format!("--partition={}", p.value));
    }
    if let Some(acc) = &s.account {
        args.push(format!("--account={acc}"));
    }
    if let Some(t) = s.time {
        args.push(format!("--time={}", format_time(t)));
    }
    args.push(format!("--cpus-per-task={}", s.cpu.max(1)));
    if let Some(m) = s.mem {
        args.push(format!("--mem={m}M"));
    }
    if s.gpu > 0 {
        args.push(format!("--gres=gpu:{}", s.gpu));
    }
    args.extend(s.extra.iter().cloned());
    args.push(a.script().to_string_lossy().into_owned());
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::config::ExecutorKind;
    use crate::yaml::Located;
    use std::time::Duration;

    #[test]
    fn resources_become_sbatch_flags() {
        let s = JobSettings {
            kind: ExecutorKind::Slurm,
            partition: Some(Located {
                value: "gpu".into(),
                mark: Default::default(),
            }),
            account: Some("proj".into()),
            time: Some(48 * 3600),
            mem: Some(32 * 1024),
            cpu: 8,
            gpu: 1,
            extra: vec!["--qos=normal".into()],
            requeue: false,
            retries: 1,
            poll_max: Duration::from_secs(1),
            pending_timeout: Duration::from_secs(1),
            unknown_timeout: Duration::from_secs(1),
            fs_wait: Duration::from_secs(1),
        };
        let a = Attempt {
            dir: PathBuf::from("/ws/.pipeline/jobs/x/f-1"),
        };
        let args = sbatch_args(&s, &a, "x", Path::new("/ws")).join(" ");
        for flag in [
            "--parsable",
            "--no-requeue",
            "--partition=gpu",
            "--account=proj",
            "--time=2-00:00:00",
            "--cpus-per-task=8",
            "--mem=32768M",
            "--gres=gpu:1",
            "--qos=normal",
            "--output=/ws/.pipeline/jobs/x/f-1/log/slurm-%j.out",
        ] {
            assert!(args.contains(flag), "{flag} missing from {args}");
        }
        assert!(args.ends_with("/ws/.pipeline/jobs/x/f-1/job.sh"));
    }
}
