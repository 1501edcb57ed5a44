//! The engine's errors. [`UserError`] is a mistake the user can fix: it names the file, line
//! and column (or the stage, or the flag) and says what to do, and the CLI turns it into exit
//! code 2 without a backtrace. The typed errors of the public functions, which callers can
//! match on, are grouped by job: the store, its index and fingerprints ([`StoreError`],
//! [`IndexError`], [`FingerprintError`]), the commands that read or keep the store
//! ([`InspectError`], [`MaintainError`]), and running ([`RunError`], [`InstanceError`],
//! [`JobError`]). Those that can carry a [`UserError`] say so through `user_error`, and
//! [`user_error`] finds it behind an `anyhow::Error`.
//!
//! Their messages are the ones the CLI always printed: a wrapped error is the `source` where
//! the message used to be an `anyhow` context over it or quoted its whole chain (so `{:#}`
//! through `anyhow` prints the same text), and stays part of the message where the message
//! quoted it alone. [`chain_text`] prints a chain with each text once (many types quote their
//! source and return it too), and [`printable`] escapes the control characters of text that
//! came from a file before it is printed.

use std::error::Error;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::yaml::Mark;

pub mod printable;
mod run;
mod store;

pub use run::{InstanceError, JobError, RunError};
pub use store::{FingerprintError, IndexError, InspectError, MaintainError, StoreError};

/// A mistake in the user's input: `pipeline.yaml`, a flag, a target name, the workspace.
#[derive(Debug, Clone)]
pub struct UserError {
    /// What is wrong (made by [`UserError::at`], a message of over 1000 characters keeps only
    /// its start and end).
    pub message: String,
    /// Where in which file, when the mistake is in a file.
    pub location: Option<(PathBuf, Mark)>,
    /// The offending source line, shown under the message with a caret.
    pub snippet: Option<String>,
    /// What to do about it, shown on a line of its own after `help:`.
    pub help: Option<String>,
}

impl UserError {
    /// A mistake that is not at a place in a file (a flag, a target name, the workspace).
    pub fn new(message: impl Into<String>) -> Self {
        UserError {
            message: message.into(),
            location: None,
            snippet: None,
            help: None,
        }
    }

    /// An error at `mark` in `file`, whose text is `source`.
    pub fn at(file: &Path, source: &str, mark: Mark, message: impl Into<String>) -> Self {
        let snippet = source
            .lines()
            .nth(mark.line.saturating_sub(1))
            .map(str::to_string);
        UserError {
            message: elide(message.into()),
            location: Some((file.to_path_buf(), mark)),
            snippet,
            help: None,
        }
    }

    /// The same mistake, with what to do about it.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

impl fmt::Display for UserError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.location {
            Some((file, mark)) => write!(
                f,
                "{}:{}:{}: {}",
                file.display(),
                mark.line,
                mark.col,
                self.message
            )?,
            None => write!(f, "{}", self.message)?,
        }
        if let (Some((_, mark)), Some(line)) = (&self.location, &self.snippet) {
            let num = mark.line.to_string();
            let pad = " ".repeat(num.len());
            let (shown, caret) = window(line, mark.col);
            write!(
                f,
                "\n{pad} |\n{num} | {shown}\n{pad} | {}^",
                " ".repeat(caret)
            )?;
        }
        if let Some(help) = &self.help {
            write!(f, "\n  help: {help}")?;
        }
        Ok(())
    }
}

/// How much of a source line an error shows: a line of 200 KB (one deeply nested flow
/// mapping, say) is shown as the characters around the column, not echoed whole.
const SNIPPET_CHARS: usize = 120;

/// The part of `line` around 1-based character column `col`, and the caret's offset in it.
fn window(line: &str, col: usize) -> (String, usize) {
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= SNIPPET_CHARS {
        return (line.to_string(), col.saturating_sub(1));
    }
    let at = col.saturating_sub(1).min(chars.len());
    let start = at.saturating_sub(SNIPPET_CHARS / 2);
    let end = (start + SNIPPET_CHARS).min(chars.len());
    let mut shown: String = chars[start..end].iter().collect();
    let mut caret = at - start;
    if start > 0 {
        shown.insert(0, '…');
        caret += 1;
    }
    if end < chars.len() {
        shown.push('…');
    }
    (shown, caret)
}

/// A message quoting a value from the file (an unknown key of 200 KB) keeps its start and end.
fn elide(message: String) -> String {
    const MAX: usize = 1000;
    if message.chars().count() <= MAX {
        return message;
    }
    let head: String = message.chars().take(MAX / 2).collect();
    let tail: Vec<char> = message.chars().rev().take(MAX / 2).collect();
    let tail: String = tail.into_iter().rev().collect();
    format!(
        "{head} … ({} characters left out) … {tail}",
        message.chars().count() - MAX
    )
}

impl std::error::Error for UserError {}

/// The [`UserError`] that `err` is, or that the engine's error it is carries (a target that
/// `status` does not know, a pipeline file `gc` cannot load, a run that cannot start, a bad
/// instance spec): what the CLI prints alone and exits with 2 for. Context added with `anyhow`
/// is looked through, as `anyhow`'s own downcasts do.
pub fn user_error(err: &anyhow::Error) -> Option<&UserError> {
    if let Some(e) = err.downcast_ref::<UserError>() {
        return Some(e);
    }
    if let Some(e) = err.downcast_ref::<InspectError>() {
        return e.user_error();
    }
    if let Some(e) = err.downcast_ref::<MaintainError>() {
        return e.user_error();
    }
    if let Some(e) = err.downcast_ref::<RunError>() {
        return e.user_error();
    }
    err.downcast_ref::<InstanceError>()
        .and_then(InstanceError::user_error)
}

/// `err` and its sources, joined by ": " as `{:#}` of an `anyhow::Error` joins them, each
/// text once: a source whose text the text so far already ends with is left out.
///
/// Many error types of the workspace (and of its dependencies) both quote their source in
/// their message (`"{path}: {source}"`) and return it from `source()`, so that `{:#}` printed
/// "Permission denied (os error 13): Permission denied (os error 13)" (issue 31). Leaving out a
/// source that the text already ends with fixes every such type at once, including those
/// added later and those of other crates; it can only drop words that are already printed
/// right before where they would go, so nothing is lost. A source's own sources are still
/// looked at: only the repeated text is left out, not the rest of the chain.
pub fn chain_text(err: &(dyn Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        let next = e.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = e.source();
    }
    text
}

/// [`chain_text`] of an `anyhow::Error` (its contexts, then the error and its sources): what
/// the CLI prints for an error that is not the user's.
pub fn anyhow_text(err: &anyhow::Error) -> String {
    chain_text(err.as_ref())
}

/// The closest candidate to `word` (the pipeline's one measure, in `pipeline_params`).
pub use pipeline_params::closest;

/// "did you mean `x`?" when a candidate is close to `word`, else the list of candidates (or
/// "none are declared" when there are none): the `help` of an unknown name.
pub fn suggestion(word: &str, candidates: &[&str]) -> String {
    match closest(word, candidates.iter().copied()) {
        Some(c) => format!("did you mean `{c}`?"),
        None if candidates.is_empty() => "none are declared".to_string(),
        None => format!("expected one of: {}", candidates.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        assert_eq!(closest("dep", ["deps", "kind", "params"]), Some("deps"));
        assert_eq!(closest("zzzzzz", ["deps", "kind"]), None);
    }

    /// An error that quotes its source and returns it too, as many do.
    #[derive(Debug, thiserror::Error)]
    #[error("{path}: {source}")]
    struct Quoting {
        path: String,
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn a_chain_prints_each_text_once() {
        let denied = || std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let once = denied().to_string();
        let e = Quoting {
            path: "/r".into(),
            source: denied(),
        };
        assert_eq!(chain_text(&e), format!("/r: {once}"));
        let e = anyhow::Error::new(e).context("pushing");
        assert_eq!(anyhow_text(&e), format!("pushing: /r: {once}"));
        // A source the text does not end with is still printed.
        let e = anyhow::Error::new(denied()).context("reading /r");
        assert_eq!(anyhow_text(&e), format!("reading /r: {once}"));
    }

    #[test]
    fn display_shows_the_line_and_a_caret() {
        let e = UserError::at(
            Path::new("p.yaml"),
            "a: 1\n  dep: x\n",
            Mark { line: 2, col: 3 },
            "unknown key `dep`",
        )
        .with_help("did you mean `deps`?");
        let s = e.to_string();
        assert!(s.starts_with("p.yaml:2:3: unknown key `dep`"), "{s}");
        assert!(s.contains("2 |   dep: x\n  |   ^"), "{s}");
        assert!(s.ends_with("help: did you mean `deps`?"), "{s}");
    }
}
