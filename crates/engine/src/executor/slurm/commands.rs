//! The Slurm client tools, called as processes (`sbatch`, `squeue`, `sacct`, `scancel`, `sinfo`):
//! with the `SLURM_*` variables of an enclosing allocation removed, their errors sorted into
//! transient (the controller is busy or unreachable: retry) and final (a rejection: report),
//! and their `-P`/`-o` outputs parsed.
//!
//! Why processes and not libslurm: the tools are what every cluster has and keeps
//! compatible across versions; the library's ABI changes with each release.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// Calls made to the Slurm tools by this process (the benchmark reads it).
pub static CALLS: AtomicU64 = AtomicU64::new(0);

/// A failed call of a Slurm tool.
#[derive(Debug, Clone)]
pub struct ToolError {
    /// The command line, as a user could paste it.
    pub line: String,
    /// What the tool printed on stderr (or why it could not start).
    pub message: String,
    /// Worth retrying: the controller was unreachable or busy.
    pub transient: bool,
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}`: {}", self.line, self.message)
    }
}

/// Messages of a controller that is down, restarting or overloaded; Slurm's own clients retry
/// on these too.
const TRANSIENT: &[&str] = &[
    "socket timed out",
    "connection refused",
    "unable to contact slurm controller",
    "zero bytes were transmitted",
    "unexpected message",
    "resource temporarily unavailable",
    "temporarily unable to accept job",
    "connection reset",
    "communication connection failure",
    "network is unreachable",
    "transport endpoint",
    "slurm_receive_msg",
    "try again",
];

/// Whether a tool's stderr says the controller is down, restarting or overloaded (any case):
/// a call worth repeating rather than a rejection to report.
pub fn is_transient(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    TRANSIENT.iter().any(|t| m.contains(t))
}

/// Quotes an argument for display (and for `sh`): plain words stay as they are.
pub fn quote(arg: &str) -> String {
    if !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=.,/:+%@".contains(c))
    {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

/// `program args`, each argument through [`quote`]: the line messages show, which a user can
/// paste into a shell.
pub fn command_line(program: &str, args: &[String]) -> String {
    std::iter::once(program.to_string())
        .chain(args.iter().map(|a| quote(a)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `program args` and returns its stdout.
pub fn run(program: &str, args: &[String]) -> Result<String, ToolError> {
    CALLS.fetch_add(1, Ordering::Relaxed);
    let line = command_line(program, args);
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null());
    // A controller started inside an allocation (salloc, an interactive job) inherits its
    // SLURM_* variables; sbatch reads many of them as defaults (SLURM_MEM_PER_CPU clashes
    // with --mem, SLURM_JOB_ID makes it a step of that job), so none reach a submission.
    // SLURM_CONF says where the cluster's configuration is and stays.
    for (key, _) in std::env::vars_os() {
        if let Some(k) = key.to_str()
            && k.starts_with("SLURM_")
            && k != "SLURM_CONF"
        {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().map_err(|e| ToolError {
        line: line.clone(),
        message: format!("cannot start `{program}`: {e}"),
        transient: false,
    })?;
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if !out.status.success() {
        let message = if stderr.is_empty() {
            format!("exited with {}", out.status)
        } else {
            stderr
        };
        return Err(ToolError {
            transient: is_transient(&message) || out.status.code().is_none(),
            line,
            message,
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `sbatch --parsable ...`: the job id.
pub fn sbatch(args: &[String]) -> Result<String, ToolError> {
    let out = run("sbatch", args)?;
    // `--parsable` prints `ID` or `ID;CLUSTER`.
    let id = out
        .trim()
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ToolError {
            line: command_line("sbatch", args),
            message: format!("sbatch printed no job id: {:?}", out.trim()),
            transient: false,
        });
    }
    Ok(id)
}

/// One `scancel` for all of `ids`.
pub fn scancel(ids: &[String]) -> Result<(), ToolError> {
    if ids.is_empty() {
        return Ok(());
    }
    run("scancel", ids).map(|_| ())
}

/// The cluster's partitions (`sinfo`, else `scontrol show partition`).
pub fn partitions() -> Result<Vec<String>, ToolError> {
    let out = match run("sinfo", &["-h".into(), "-o".into(), "%R".into()]) {
        Ok(out) => out,
        Err(e) if e.message.starts_with("cannot start") => {
            let out = run(
                "scontrol",
                &["show".into(), "partition".into(), "-o".into()],
            )?;
            return Ok(out
                .lines()
                .filter_map(|l| l.split_whitespace().next())
                .filter_map(|w| w.strip_prefix("PartitionName="))
                .map(str::to_string)
                .collect());
        }
        Err(e) => return Err(e),
    };
    let mut names: Vec<String> = out
        .lines()
        .map(|l| l.trim().trim_end_matches('*').to_string())
        .filter(|l| !l.is_empty())
        .collect();
    names.dedup();
    Ok(names)
}

/// How the tracker learns job states: one call per poll for every job in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `sacct -j` (slurmdbd accounting): every state, with the reason and exit code.
    Sacct,
    /// `squeue -t all -j`, and `sacct -c` (the job-completion log) for jobs squeue no longer
    /// lists, when `jobcomp` is true.
    Squeue {
        /// `sacct -c` works here (a job-completion log is configured).
        jobcomp: bool,
    },
}

impl Source {
    /// Which of the three this cluster offers: two cheap probe calls at the start of a run.
    pub fn detect() -> Source {
        let probe = |extra: &[&str]| {
            let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            args.extend(["-n", "-P", "-X", "-j", "1", "-o", "JobID"].map(String::from));
            run("sacct", &args).is_ok()
        };
        if probe(&[]) {
            Source::Sacct
        } else {
            Source::Squeue {
                jobcomp: probe(&["-c"]),
            }
        }
    }

    /// The calls this source makes, as the log and the run's statistics name it.
    pub fn name(self) -> &'static str {
        match self {
            Source::Sacct => "sacct -j",
            Source::Squeue { jobcomp: true } => {
                "squeue -t all -j (sacct -c for jobs it no longer lists)"
            }
            Source::Squeue { jobcomp: false } => "squeue -t all -j",
        }
    }
}

/// A job as one Slurm tool reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// `PENDING`, `RUNNING`, `COMPLETED`, `CANCELLED`, ...
    pub state: String,
    /// `CANCELLED by 0`'s tail, or the pending reason.
    pub reason: String,
    /// The node list (`gpu07`, `gpu[01-02]`); empty while pending.
    pub node: String,
    /// `3:0` (exit code : signal) where the tool says.
    pub exit: Option<String>,
}

/// The states of `ids`, in one call. A job missing from the map was not listed.
pub fn poll(source: Source, ids: &[String]) -> Result<HashMap<String, Seen>, ToolError> {
    let list = ids.join(",");
    match source {
        Source::Sacct => {
            let args = [
                "-n",
                "-P",
                "-X",
                "-j",
                list.as_str(),
                "-o",
                "JobID,State,Reason,NodeList,ExitCode",
            ];
            let out = run("sacct", &args.map(String::from))?;
            Ok(parse(&out, true))
        }
        Source::Squeue { .. } => {
            let args = ["-h", "-t", "all", "-j", list.as_str(), "-o", "%i|%T|%r|%N"];
            match run("squeue", &args.map(String::from)) {
                Ok(out) => Ok(parse(&out, false)),
                // Every id has left squeue (MinJobAge): nothing is listed.
                Err(e) if e.message.contains("Invalid job id") => Ok(HashMap::new()),
                Err(e) => Err(e),
            }
        }
    }
}

/// Final states from the job-completion log (`sacct -c`), the last record of each job.
pub fn jobcomp(ids: &[String]) -> Result<HashMap<String, Seen>, ToolError> {
    let list = ids.join(",");
    let args = [
        "-c",
        "-n",
        "-P",
        "-j",
        list.as_str(),
        "-o",
        "JobID,State,NodeList,ExitCode",
    ];
    let out = run("sacct", &args.map(String::from))?;
    let mut seen = HashMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('|').collect();
        if f.len() < 4 {
            continue;
        }
        let (state, reason) = split_state(f[1]);
        seen.insert(
            f[0].trim().to_string(),
            Seen {
                state,
                reason,
                node: f[2].trim().to_string(),
                exit: Some(f[3].trim().to_string()),
            },
        );
    }
    Ok(seen)
}

/// `CANCELLED by 0` → (`CANCELLED`, `by 0`).
fn split_state(text: &str) -> (String, String) {
    let text = text.trim();
    match text.split_once(' ') {
        Some((s, rest)) => (s.to_string(), rest.trim().to_string()),
        None => (text.to_string(), String::new()),
    }
}

/// `ID|STATE|REASON|NODE[|EXIT]` lines; a later line of the same id wins.
fn parse(out: &str, with_exit: bool) -> HashMap<String, Seen> {
    let mut seen = HashMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('|').collect();
        if f.len() < 4 {
            continue;
        }
        let (state, extra) = split_state(f[1]);
        let reason = match f[2].trim() {
            "" | "None" => extra,
            r => r.to_string(),
        };
        seen.insert(
            f[0].trim().to_string(),
            Seen {
                state,
                reason,
                node: f[3].trim().to_string(),
                exit: with_exit.then(|| f.get(4).unwrap_or(&"").trim().to_string()),
            },
        );
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_parse() {
        let s = parse("12|RUNNING|None|vm\n13|PENDING|PartitionConfig|\n", false);
        assert_eq!(s["12"].state, "RUNNING");
        assert_eq!(s["12"].node, "vm");
        assert_eq!(s["13"].reason, "PartitionConfig");
        let s = parse("14|CANCELLED by 0|None|vm|0:15\n", true);
        assert_eq!(s["14"].state, "CANCELLED");
        assert_eq!(s["14"].reason, "by 0");
        assert_eq!(s["14"].exit.as_deref(), Some("0:15"));
    }

    #[test]
    fn transient_errors_are_recognised() {
        assert!(is_transient(
            "squeue: error: Unable to contact slurm controller (connect failure)"
        ));
        assert!(is_transient(
            "slurm_load_jobs error: Socket timed out on send/recv operation"
        ));
        assert!(!is_transient(
            "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified"
        ));
    }

    #[test]
    fn quoting_is_for_sh() {
        assert_eq!(quote("--time=0-01:00:00"), "--time=0-01:00:00");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
    }
}
