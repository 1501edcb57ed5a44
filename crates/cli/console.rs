//! What the user sees of a run: logging set-up, progress bars (indicatif, one line per running
//! stage on a terminal), the line printed when a stage finishes and the line of a cluster job
//! in flight. Shared by `run`, `status` and `runs`; named apart from the report stage, which
//! writes the experiment's README, not the terminal's lines.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use pipeline_engine::exec::{Outcome, Reporter, Status};

use crate::global::LogFormat;
use crate::sanitize;

pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.with_target(false).init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Progress bars on stderr when it is a terminal, and one line per finished stage on stdout
/// (unless `--json` or `--quiet`). A failed stage's block (its FAILED line, error and the
/// last lines of its log) follows its line on stdout, or goes to stderr when the lines are off:
/// `-q` still says why a run failed, and `--json` keeps stdout one JSON object.
pub struct TermReporter {
    multi: MultiProgress,
    lines: bool,
    bars: bool,
}

impl TermReporter {
    /// `lines`: print a line per finished stage on stdout (off for `--json` and `-q`).
    pub fn new(lines: bool) -> TermReporter {
        let bars = lines && std::io::stderr().is_terminal();
        let target = if bars {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        TermReporter {
            multi: MultiProgress::with_draw_target(target),
            lines,
            bars,
        }
    }

    fn print(&self, line: String) {
        if self.bars {
            let _ = self.multi.println(line);
        } else {
            println!("{line}");
        }
    }
}

impl Reporter for TermReporter {
    fn started(&self, instance: &str, _reasons: &[String]) -> ProgressBar {
        if !self.bars {
            return ProgressBar::hidden();
        }
        let bar = self.multi.add(ProgressBar::new_spinner());
        bar.set_style(
            ProgressStyle::with_template("{spinner:.cyan} {prefix:.bold} {elapsed:>4} {wide_msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_prefix(sanitize::cell(instance, sanitize::NAME));
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    }

    fn finished(&self, o: &Outcome) {
        if self.lines {
            self.print(outcome_line(o));
            if o.status == Status::Failed {
                self.print(failure_details(o));
            }
        } else if o.status == Status::Failed {
            // Quiet or JSON: stdout stays empty or one object, and the failure still shows.
            eprintln!("{}\n{}", outcome_line(o), failure_details(o));
        }
    }
}

pub fn outcome_line(o: &Outcome) -> String {
    let label = match o.status {
        Status::Ran => "ran",
        Status::Cached => "cached",
        Status::Failed => "FAILED",
        Status::Skipped => "skipped",
        Status::WouldRun => "stale",
        Status::Fresh => "fresh",
    };
    let time = o
        .duration_ms
        .map(|ms| format!(" {:.2}s", ms as f64 / 1000.0))
        .unwrap_or_default();
    // A reason quotes a param's old value from the stored manifest: escaped and cut.
    let why = if o.reasons.is_empty() {
        String::new()
    } else {
        let reasons: Vec<String> = o
            .reasons
            .iter()
            .map(|r| sanitize::cell(r, sanitize::FIELD))
            .collect();
        format!("  ({})", reasons.join("; "))
    };
    let instance = sanitize::cell(&o.instance, sanitize::NAME);
    format!("{label:>8}  {instance}{time}{why}")
}

/// A cluster job in flight, as `status` and `runs` list it: id, state, instance (from the
/// run's record, escaped and cut).
pub fn job_line(j: &pipeline_engine::manifest::JobEntry) -> String {
    let cell = |s: &str| sanitize::cell(s, sanitize::CELL);
    format!(
        "{}  {}  {}",
        sanitize::pad(&cell(&j.job_id), 8, true),
        sanitize::pad(&cell(&j.state), 24, false),
        cell(&j.instance)
    )
}

/// The error, where the log was kept, and the last lines of it.
pub fn failure_details(o: &Outcome) -> String {
    // The error may quote a file, and the log is what the stage printed: both escaped.
    let mut s = format!(
        "          error: {}",
        sanitize::message(o.error.as_deref().unwrap_or("unknown"))
    );
    if let Some(log) = &o.log {
        s.push_str(&format!("\n          log: {}", log.display()));
        for name in ["stderr.txt", "stage.log", "stdout.txt"] {
            let tail = tail(&log.join(name), 15);
            if !tail.is_empty() {
                s.push_str(&format!("\n          last lines of {name}:"));
                for line in tail {
                    s.push_str(&format!("\n          | {}", sanitize::line(&line)));
                }
                break;
            }
        }
    }
    s
}

/// The last `n` lines of a log, read from its last 16 KiB and each cut to 300 characters: a
/// stage that printed one 200 MB line shows its end, not all of it (that took 638 MB).
fn tail(path: &Path, n: usize) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    const WINDOW: u64 = 16 << 10;
    const LINE: usize = 300;
    let Ok(mut file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(WINDOW);
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err()
        || file.take(WINDOW).read_to_end(&mut bytes).is_err()
    {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| {
            let count = l.chars().count();
            if count <= LINE {
                return l.to_string();
            }
            let end: String = l.chars().skip(count - LINE).collect();
            format!("…{end}")
        })
        .collect()
}
