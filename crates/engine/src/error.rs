//! Errors a user can fix: they name the file, line and column (or the stage, or the flag) and
//! say what to do, and the CLI turns them into exit code 2 without a backtrace.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::yaml::Mark;

/// A mistake in the user's input: `pipeline.yaml`, a flag, a target name, the workspace.
#[derive(Debug, Clone)]
pub struct UserError {
    pub message: String,
    /// Where in which file, when the mistake is in a file.
    pub location: Option<(PathBuf, Mark)>,
    /// The offending source line, shown under the message with a caret.
    pub snippet: Option<String>,
    pub help: Option<String>,
}

impl UserError {
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

/// The closest candidate to `word` (the pipeline's one measure, in `pipeline_params`).
pub use pipeline_params::closest;

/// "did you mean `x`?" or a list of what is allowed.
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
