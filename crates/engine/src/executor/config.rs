//! The `executor:` block of `pipeline.yaml` (top level, and per stage as an override) and the
//! Slurm-only resource values (`mem`, `time`), checked key by key with the position of every
//! mistake, as the rest of the schema is.

use std::path::Path;
use std::time::Duration;

use crate::error::{UserError, suggestion};
use crate::yaml::Located;
use crate::yaml::{Mark, Node, NodeValue};

/// The keys an `executor:` block may hold (the top-level block and a stage's alike).
pub const EXECUTOR_KEYS: &[&str] = &[
    "kind",
    "partition",
    "account",
    "time",
    "mem",
    "extra",
    "requeue",
    "retries",
    "poll_max",
    "pending_timeout",
    "unknown_timeout",
    "fs_wait",
];
/// The values of `kind:` in an `executor:` block, as [`ExecutorKind::as_str`] spells them.
pub const KINDS: &[&str] = &["local", "slurm"];

/// Where a stage instance runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutorKind {
    /// In the `pipeline run` process, within `--jobs` and `--gpus` (the default).
    Local,
    /// One Slurm job per instance, submitted with `sbatch`.
    Slurm,
}

impl ExecutorKind {
    /// The kind `local` or `slurm` names (exactly, lower case); `None` for anything else.
    pub fn parse(text: &str) -> Option<ExecutorKind> {
        match text {
            "local" => Some(ExecutorKind::Local),
            "slurm" => Some(ExecutorKind::Slurm),
            _ => None,
        }
    }
    /// The name `pipeline.yaml` and `--executor` use for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutorKind::Local => "local",
            ExecutorKind::Slurm => "slurm",
        }
    }
}

/// One `executor:` block as written. Every key is optional: a stage's block overrides the
/// top-level one key by key.
#[derive(Debug, Clone, Default)]
pub struct ExecutorDecl {
    /// `kind:`, where instances run.
    pub kind: Option<Located<ExecutorKind>>,
    /// `partition:`, passed to `sbatch --partition`; checked against `sinfo` before a run.
    pub partition: Option<Located<String>>,
    /// `account:`, passed to `sbatch --account`.
    pub account: Option<Located<String>>,
    /// `time:`, the job's time limit in seconds (written as a Slurm time, see [`parse_time`]).
    pub time: Option<Located<u64>>,
    /// `mem:`, the job's memory in megabytes (written as `32G`, see [`parse_mem`]).
    pub mem: Option<Located<u64>>,
    /// `extra:`, further `sbatch` flags, each one argument starting with `-`.
    pub extra: Option<Vec<Located<String>>>,
    /// `requeue:`, whether Slurm requeues a job after a node failure or preemption.
    pub requeue: Option<bool>,
    /// `retries:`, 0 to 100: how often the controller resubmits a job that ended in a node
    /// failure, boot failure or preemption (one Slurm did not requeue itself).
    pub retries: Option<u32>,
    /// `poll_max:`, the longest wait between two polls of Slurm (written as `30s`, `5m`).
    pub poll_max: Option<Duration>,
    /// `pending_timeout:`, how long a job may stay pending for a reason that cannot clear.
    pub pending_timeout: Option<Duration>,
    /// `unknown_timeout:`, how long a job may be neither finished nor listed by Slurm.
    pub unknown_timeout: Option<Duration>,
    /// `fs_wait:`, how long to wait for a finished job's files on the shared filesystem.
    pub fs_wait: Option<Duration>,
}

/// Parses an `executor:` mapping; `what` names it in messages ("`executor`" or
/// "`executor` of stage `x`").
pub fn parse_block(
    path: &Path,
    source: &str,
    node: &Node,
    what: &str,
) -> Result<ExecutorDecl, UserError> {
    let p = BlockParser { path, source, what };
    let mut decl = ExecutorDecl::default();
    if node.is_null() {
        return Ok(decl);
    }
    let NodeValue::Map(entries) = &node.value else {
        return Err(p
            .err(
                node.mark,
                format!("{what} must be a mapping, found {}", node.type_name()),
            )
            .with_help("e.g. `executor: {kind: slurm, partition: gpu, time: \"24:00:00\"}`"));
    };
    let mut seen: Vec<&str> = Vec::new();
    for (k, v) in entries.iter() {
        let Some(key) = k.scalar_text() else {
            return Err(p.err(
                k.mark,
                format!("keys of {what} must be strings, found {}", k.type_name()),
            ));
        };
        if seen.contains(&key) {
            return Err(p.err(k.mark, format!("duplicate key `{key}` in {what}")));
        }
        seen.push(key);
        p.set(&mut decl, k, key, v)?;
    }
    Ok(decl)
}

/// Reads one `executor:` block: where it is (for file:line:col errors) and what it is called.
struct BlockParser<'a> {
    path: &'a Path,
    source: &'a str,
    what: &'a str,
}

impl BlockParser<'_> {
    fn err(&self, mark: Mark, msg: String) -> UserError {
        UserError::at(self.path, self.source, mark, msg)
    }

    /// Sets the field `key` names from `v`.
    fn set(&self, decl: &mut ExecutorDecl, k: &Node, key: &str, v: &Node) -> Result<(), UserError> {
        let field = format!("`{key}` of {}", self.what);
        match key {
            "kind" => decl.kind = Some(self.kind(v, &field)?),
            "partition" => decl.partition = Some(self.text(v, &field)?),
            "account" => decl.account = Some(self.text(v, &field)?),
            "time" => {
                let t = self.text(v, &field)?;
                decl.time = Some(Located {
                    value: parse_time(&t.value)
                        .ok_or_else(|| time_error(self.path, self.source, v, &field))?,
                    mark: v.mark,
                });
            }
            "mem" => {
                let t = self.text(v, &field)?;
                decl.mem = Some(Located {
                    value: parse_mem(&t.value)
                        .ok_or_else(|| mem_error(self.path, self.source, v, &field))?,
                    mark: v.mark,
                });
            }
            "extra" => decl.extra = Some(self.extra(v, &field)?),
            "requeue" => decl.requeue = Some(self.requeue(v, &field)?),
            "retries" => decl.retries = Some(self.retries(v, &field)?),
            "poll_max" => decl.poll_max = Some(self.duration(v, &field)?),
            "pending_timeout" => decl.pending_timeout = Some(self.duration(v, &field)?),
            "unknown_timeout" => decl.unknown_timeout = Some(self.duration(v, &field)?),
            "fs_wait" => decl.fs_wait = Some(self.duration(v, &field)?),
            other => {
                return Err(self
                    .err(k.mark, format!("unknown key `{other}` in {}", self.what))
                    .with_help(format!(
                        "{} (executor keys: {})",
                        suggestion(other, EXECUTOR_KEYS),
                        EXECUTOR_KEYS.join(", ")
                    )));
            }
        }
        Ok(())
    }

    fn text(&self, v: &Node, field: &str) -> Result<Located<String>, UserError> {
        match (&v.value, v.to_json()) {
            (NodeValue::Scalar { text, .. }, j) if !j.is_null() => Ok(Located {
                value: text.clone(),
                mark: v.mark,
            }),
            _ => Err(self.err(
                v.mark,
                format!("{field} must be a string, found {}", v.type_name()),
            )),
        }
    }

    fn duration(&self, v: &Node, field: &str) -> Result<Duration, UserError> {
        let t = self.text(v, field)?;
        humantime::parse_duration(&t.value).map_err(|e| {
            self.err(
                v.mark,
                format!("{field} must be a duration, found `{}` ({e})", t.value),
            )
            .with_help("write e.g. `30s`, `5m` or `1h`")
        })
    }

    fn kind(&self, v: &Node, field: &str) -> Result<Located<ExecutorKind>, UserError> {
        let t = self.text(v, field)?;
        let Some(kind) = ExecutorKind::parse(&t.value) else {
            return Err(self
                .err(v.mark, format!("unknown executor kind `{}`", t.value))
                .with_help(suggestion(&t.value, KINDS)));
        };
        Ok(Located {
            value: kind,
            mark: v.mark,
        })
    }

    /// `extra:` — one sbatch flag or a list of them, each starting with `-`.
    fn extra(&self, v: &Node, field: &str) -> Result<Vec<Located<String>>, UserError> {
        let items: Vec<&Node> = match &v.value {
            NodeValue::Seq(items) => items.iter().collect(),
            NodeValue::Scalar { .. } if !v.is_null() => vec![v],
            _ => {
                return Err(self
                    .err(
                        v.mark,
                        format!(
                            "{field} must be a list of sbatch flags, found {}",
                            v.type_name()
                        ),
                    )
                    .with_help("e.g. `extra: [\"--qos=normal\", \"--constraint=a100\"]`"));
            }
        };
        let mut flags = Vec::new();
        for item in items {
            let flag = self.text(item, field)?;
            if !flag.value.starts_with('-') {
                return Err(self
                    .err(
                        item.mark,
                        format!("`{}` in {field} is not an sbatch flag", flag.value),
                    )
                    .with_help(
                        "each entry is passed to sbatch as one argument, e.g. `--qos=normal`",
                    ));
            }
            flags.push(flag);
        }
        Ok(flags)
    }

    fn requeue(&self, v: &Node, field: &str) -> Result<bool, UserError> {
        match v.to_json() {
            serde_json::Value::Bool(b) => Ok(b),
            _ => Err(self.err(
                v.mark,
                format!("{field} must be true or false, found {}", v.type_name()),
            )),
        }
    }

    fn retries(&self, v: &Node, field: &str) -> Result<u32, UserError> {
        match v.to_json().as_u64().filter(|n| *n <= 100) {
            Some(n) => Ok(n as u32),
            None => Err(self.err(
                v.mark,
                format!(
                    "{field} must be a whole number from 0 to 100, found {}",
                    v.type_name()
                ),
            )),
        }
    }
}

/// The error for a `time:` value (at `v`, called `field`) that is not a Slurm time limit,
/// with the forms that are.
pub fn time_error(path: &Path, source: &str, v: &Node, field: &str) -> UserError {
    UserError::at(
        path,
        source,
        v.mark,
        format!(
            "{field} must be a Slurm time limit, found {}",
            v.scalar_text()
                .map_or(v.type_name().to_string(), |t| format!("`{t}`"))
        ),
    )
    .with_help("write MINUTES, HH:MM:SS or DAYS-HH:MM:SS, e.g. \"48:00:00\" or \"2-00:00:00\"")
}

/// The error for a `mem:` value (at `v`, called `field`) that is not an amount of memory,
/// with the forms that are.
pub fn mem_error(path: &Path, source: &str, v: &Node, field: &str) -> UserError {
    UserError::at(
        path,
        source,
        v.mark,
        format!(
            "{field} must be an amount of memory, found {}",
            v.scalar_text()
                .map_or(v.type_name().to_string(), |t| format!("`{t}`"))
        ),
    )
    .with_help("write a number with K, M, G or T, e.g. 32G or 500M (a bare number is MB)")
}

/// A Slurm time limit (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`) in seconds.
pub fn parse_time(text: &str) -> Option<u64> {
    let text = text.trim();
    let num = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let secs = if let Some((days, rest)) = text.split_once('-') {
        let d = num(days)?;
        let parts: Vec<&str> = rest.split(':').collect();
        let (h, m, s) = match parts.as_slice() {
            [h] => (num(h)?, 0, 0),
            [h, m] => (num(h)?, num(m)?, 0),
            [h, m, s] => (num(h)?, num(m)?, num(s)?),
            _ => return None,
        };
        if m >= 60 || s >= 60 {
            return None;
        }
        ((d * 24 + h) * 60 + m) * 60 + s
    } else {
        let parts: Vec<&str> = text.split(':').collect();
        match parts.as_slice() {
            [m] => num(m)? * 60,
            [m, s] if num(s)? < 60 => num(m)? * 60 + num(s)?,
            [h, m, s] if num(m)? < 60 && num(s)? < 60 => (num(h)? * 60 + num(m)?) * 60 + num(s)?,
            _ => return None,
        }
    };
    (secs > 0).then_some(secs)
}

/// Seconds as sbatch's `--time` (`D-HH:MM:SS`).
pub fn format_time(secs: u64) -> String {
    let (d, rest) = (secs / 86_400, secs % 86_400);
    format!(
        "{d}-{:02}:{:02}:{:02}",
        rest / 3600,
        (rest % 3600) / 60,
        rest % 60
    )
}

/// An amount of memory (`32G`, `500M`, `1T`, `1024` = MB) in megabytes.
pub fn parse_mem(text: &str) -> Option<u64> {
    let t = text.trim().trim_end_matches(['B', 'b']);
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (&t[..i], &t[i..]),
        None => (t, "M"),
    };
    let n: u64 = digits.parse().ok()?;
    let mb = match unit.to_ascii_uppercase().as_str() {
        "K" => n.div_ceil(1024),
        "M" => n,
        "G" => n.checked_mul(1024)?,
        "T" => n.checked_mul(1024 * 1024)?,
        _ => return None,
    };
    (mb > 0).then_some(mb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_follow_slurm() {
        assert_eq!(parse_time("90"), Some(5400));
        assert_eq!(parse_time("1:30"), Some(90));
        assert_eq!(parse_time("48:00:00"), Some(48 * 3600));
        assert_eq!(parse_time("2-00:00:00"), Some(2 * 86_400));
        assert_eq!(parse_time("1-12"), Some(36 * 3600));
        for bad in ["", "x", "1:99", "1:2:3:4", "-1", "0", "1-2:3:4:5"] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
        assert_eq!(format_time(2 * 86_400 + 3661), "2-01:01:01");
    }

    #[test]
    fn memory_amounts() {
        assert_eq!(parse_mem("32G"), Some(32 * 1024));
        assert_eq!(parse_mem("500M"), Some(500));
        assert_eq!(parse_mem("2048"), Some(2048));
        assert_eq!(parse_mem("1T"), Some(1024 * 1024));
        assert_eq!(parse_mem("16GB"), Some(16 * 1024));
        for bad in ["", "G", "12X", "-1G", "0"] {
            assert_eq!(parse_mem(bad), None, "{bad}");
        }
    }

    fn block(text: &str) -> Result<ExecutorDecl, UserError> {
        let node = crate::yaml::parse(text).unwrap().unwrap();
        parse_block(Path::new("p.yaml"), text, &node, "`executor`")
    }

    #[test]
    fn blocks_are_checked_with_positions() {
        let d = block("kind: slurm\npartition: gpu\ntime: \"24:00:00\"\nextra: [\"--qos=normal\"]\nretries: 2\nfs_wait: 5s\n").unwrap();
        assert_eq!(d.kind.unwrap().value, ExecutorKind::Slurm);
        assert_eq!(d.time.unwrap().value, 86_400);
        assert_eq!(d.extra.unwrap()[0].value, "--qos=normal");
        assert_eq!(d.retries, Some(2));
        assert_eq!(d.fs_wait, Some(Duration::from_secs(5)));
        let e = block("kind: slurn\n").unwrap_err();
        assert!(e.help.unwrap().contains("`slurm`"));
        let e = block("partiton: gpu\n").unwrap_err();
        assert_eq!(e.location.unwrap().1, Mark { line: 1, col: 1 });
        assert!(e.help.unwrap().contains("did you mean `partition`?"));
        let e = block("time: soon\n").unwrap_err();
        assert!(e.message.contains("Slurm time limit"), "{e}");
        let e = block("extra: [qos]\n").unwrap_err();
        assert!(e.message.contains("not an sbatch flag"), "{e}");
    }
}
