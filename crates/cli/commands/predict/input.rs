//! `predict --input`: the lines of a TSV or text file, or of standard input (`-`), read with a
//! bound on everything an untrusted file could make unbounded (issue 31: `--input /dev/zero`
//! aborted on an allocation failure, a FIFO hung, a 10 MB field came back whole in an error):
//!
//! - a path must be a regular file, opened with the shared reader (`pipeline_bounded::open`:
//!   without blocking on a FIFO, and a device such as `/dev/zero` refused unread);
//! - at most [`MAX_INPUT_BYTES`] in all (standard input too, through `take`), a line at most
//!   [`MAX_LINE_BYTES`], at most [`MAX_LINES`] lines;
//! - input echoed into an error is cut to [`EXCERPT_CHARS`] characters ([`excerpt`]).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// The largest input read: the bound of the other data readers of whole files (SQuAD and C3
/// JSON). Every row is kept until the batch is predicted, so this bounds the texts held.
pub const MAX_INPUT_BYTES: u64 = 1 << 30;

/// The longest line: the task readers' bound on a TSV line. A row is cut to `max_seq_length`
/// tokens anyway; a 16 MiB line is no sentence pair.
pub const MAX_LINE_BYTES: u64 = 16 << 20;

/// The most lines read. Each row is held as its texts and, once encoded, as a row of up to
/// `max_seq_length` token ids (about 1 KB at 128 tokens), so 2·10^6 rows of short texts, all
/// of them within [`MAX_INPUT_BYTES`], would still take some 2 GB beyond the file. LCQMC's
/// whole training set is 2.4·10^5 rows; a larger file is better split.
pub const MAX_LINES: usize = 2_000_000;

/// How much of a field an error quotes.
pub const EXCERPT_CHARS: usize = 200;

/// `s` as an error quotes it: at most [`EXCERPT_CHARS`] characters, with an ellipsis and the
/// count of what was left out when it is longer.
pub fn excerpt(s: &str) -> String {
    match s.char_indices().nth(EXCERPT_CHARS) {
        None => s.to_string(),
        Some((cut, _)) => format!(
            "{}… ({} more characters)",
            &s[..cut],
            s[cut..].chars().count()
        ),
    }
}

/// The lines of one input, numbered from 1, each without its line end.
pub struct Lines {
    /// The file as errors name it (`-` is "standard input").
    name: PathBuf,
    reader: Box<dyn BufRead>,
    /// Lines returned so far.
    line: usize,
    /// Bytes read so far.
    read: u64,
}

impl Lines {
    /// The input `path`: standard input for `-`, else a regular file.
    pub fn open(path: &Path) -> Result<Lines> {
        let (name, source): (PathBuf, Box<dyn Read>) = if path == Path::new("-") {
            ("standard input".into(), Box::new(std::io::stdin()))
        } else {
            (path.to_path_buf(), Box::new(pipeline_bounded::open(path)?))
        };
        Ok(Lines {
            name,
            // One byte past the limit, so that a larger input is told from one of the limit.
            reader: Box::new(BufReader::new(
                source.take(MAX_INPUT_BYTES.saturating_add(1)),
            )),
            line: 0,
            read: 0,
        })
    }

    /// The input as errors name it.
    pub fn name(&self) -> &Path {
        &self.name
    }

    /// The next line and its number, or `None` at the end; an error past any of the bounds.
    pub fn next_line(&mut self) -> Result<Option<(usize, Vec<u8>)>> {
        let mut buf = Vec::new();
        let n = (&mut self.reader)
            .take(MAX_LINE_BYTES.saturating_add(1))
            .read_until(b'\n', &mut buf)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", self.name.display()))?;
        if n == 0 {
            return Ok(None);
        }
        self.read += n as u64;
        self.line += 1;
        if self.read > MAX_INPUT_BYTES {
            return Err(pipeline_bounded::ReadError::TooLarge {
                path: self.name.clone(),
                limit: MAX_INPUT_BYTES,
                what: "a predict input",
            }
            .into());
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        if buf.len() as u64 > MAX_LINE_BYTES {
            bail!(
                "{}:{}: a line longer than {}, the limit for a line of a predict input",
                self.name.display(),
                self.line,
                pipeline_bounded::size_text(MAX_LINE_BYTES)
            );
        }
        if self.line > MAX_LINES {
            bail!(
                "{}: more than {MAX_LINES} lines, the most one `predict --input` reads: split \
                 the file",
                self.name.display()
            );
        }
        Ok(Some((self.line, buf)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_excerpt_cuts_long_fields_only() {
        assert_eq!(excerpt("短"), "短");
        let long = "字".repeat(10_000);
        let e = excerpt(&long);
        assert!(e.starts_with(&"字".repeat(EXCERPT_CHARS)), "{e}");
        assert!(e.ends_with("… (9800 more characters)"), "{e}");
    }

    #[test]
    fn lines_are_numbered_without_their_ends() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("in.tsv");
        std::fs::write(&f, "a\tb\r\n\nc").unwrap();
        let mut lines = Lines::open(&f).unwrap();
        let mut got = Vec::new();
        while let Some(l) = lines.next_line().unwrap() {
            got.push(l);
        }
        assert_eq!(
            got,
            vec![(1, b"a\tb\r".to_vec()), (2, Vec::new()), (3, b"c".to_vec())]
        );
    }

    #[test]
    fn a_device_and_a_long_line_are_refused() {
        let e = Lines::open(Path::new("/dev/zero"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("long.tsv");
        let mut text = b"ok\n".to_vec();
        text.extend(vec![b'x'; MAX_LINE_BYTES as usize + 1]);
        std::fs::write(&f, text).unwrap();
        let mut lines = Lines::open(&f).unwrap();
        assert!(lines.next_line().unwrap().is_some());
        let e = lines.next_line().unwrap_err().to_string();
        assert!(e.contains("long.tsv:2: a line longer than 16 MiB"), "{e}");
    }
}
