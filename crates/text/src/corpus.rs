//! Reading corpus files into documents, streaming and never failing on bad text.
//!
//! Three layouts are found in Chinese pretraining corpora ([`Format`]):
//!
//! - `lines`: one document per line (reviews, CLUECorpus, and People's Daily, whose lines are
//!   paragraphs with no document breaks at all);
//! - `paragraphs`: one paragraph per line, a blank line between documents (albert_zh's own
//!   input format, Wikipedia MRC contexts, novels with a blank line between chapters);
//! - `wiki`: WikiExtractor output, `<doc id=… url=… title=…>` … `</doc>` blocks whose first line
//!   repeats the title (dropped here) and whose paragraphs are separated by blank lines.
//!
//! `auto` decides per file from its first [`SNIFF_BYTES`] ([`detect_format`]).
//!
//! A [`DocumentReader`] reads a file line by line as bytes through a `BufReader`, so memory
//! stays bounded by the largest document (and a document of the `paragraphs` or `wiki` formats
//! is cut after [`DEFAULT_MAX_DOC_BYTES`]). Lines that are not valid UTF-8 are skipped and
//! counted with their line numbers ([`InvalidUtf8`]), never fatal. A UTF-8 byte order mark and
//! `\r\n` line ends are accepted.

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// How a corpus file is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Decide per file from its first 64 KiB.
    Auto,
    /// One document per line.
    Lines,
    /// One paragraph per line, blank lines between documents.
    Paragraphs,
    /// WikiExtractor `<doc …>` … `</doc>` blocks.
    Wiki,
}

impl Format {
    /// Every format, `auto` first.
    pub const ALL: [Format; 4] = [
        Format::Auto,
        Format::Lines,
        Format::Paragraphs,
        Format::Wiki,
    ];

    /// The name params and logs use.
    pub fn name(self) -> &'static str {
        match self {
            Format::Auto => "auto",
            Format::Lines => "lines",
            Format::Paragraphs => "paragraphs",
            Format::Wiki => "wiki",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A corpus format name that is none of [`Format::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown corpus format `{0}` (expected auto, lines, paragraphs or wiki)")]
pub struct UnknownFormat(pub String);

impl FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Format, UnknownFormat> {
        Format::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| UnknownFormat(s.to_string()))
    }
}

/// How much of a file [`detect_format`] looks at.
pub const SNIFF_BYTES: usize = 64 * 1024;

/// A `paragraphs` or `wiki` document longer than this is cut into several (a file with no blank
/// line read as `paragraphs` must not become one document held in memory).
pub const DEFAULT_MAX_DOC_BYTES: usize = 16 * 1024 * 1024;

/// A line longer than this is an error naming its line: the reader holds one line at a time,
/// and a file with no line end (or a device such as `/dev/zero` behind a symlink) must not take
/// all memory. Four times the largest document kept whole ([`DEFAULT_MAX_DOC_BYTES`]).
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// At most this many invalid line numbers are kept per file; all are counted.
pub const MAX_RECORDED_INVALID: usize = 10_000;

/// What [`detect_format`] chose, and why (for the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detection {
    /// The format chosen.
    pub format: Format,
    /// What in the file decided it.
    pub reason: String,
}

/// Decides the format of a file from its beginning: `wiki` if its first non-blank line opens a
/// `<doc`; `paragraphs` if blank lines separate non-blank lines at least twice (or once, when
/// `whole_file` says the sample is the whole file: one stray blank line in a big file of
/// one-document lines must not merge them all); `lines` otherwise.
pub fn detect_format(sample: &[u8], whole_file: bool) -> Detection {
    let sample = sample.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(sample);
    let mut nonblank = 0usize;
    let mut separators = 0usize;
    let mut blank_run = false;
    for line in sample.split(|&b| b == b'\n') {
        let blank = is_blank(line);
        if nonblank == 0 && !blank && is_doc_open(line) {
            return Detection {
                format: Format::Wiki,
                reason: "its first line opens a WikiExtractor <doc> block".into(),
            };
        }
        if blank {
            blank_run = nonblank > 0;
        } else {
            if blank_run {
                separators += 1;
                blank_run = false;
            }
            nonblank += 1;
        }
    }
    let within = if whole_file {
        "in the file".to_string()
    } else {
        format!("in its first {} KiB", SNIFF_BYTES / 1024)
    };
    if separators >= 2 || (separators == 1 && whole_file) {
        Detection {
            format: Format::Paragraphs,
            reason: format!(
                "blank lines separate its {nonblank} non-blank lines into {} groups {within}",
                separators + 1
            ),
        }
    } else {
        Detection {
            format: Format::Lines,
            reason: if separators == 0 {
                format!("no blank line separates its {nonblank} non-blank lines {within}")
            } else {
                format!("only one blank line separates its {nonblank} non-blank lines {within}")
            },
        }
    }
}

/// Reads the first [`SNIFF_BYTES`] of a file and detects its format.
pub fn detect_file_format(path: &Path) -> io::Result<Detection> {
    let mut file = open_regular(path)?;
    let (sample, whole) = read_sample(&mut file)?;
    Ok(detect_format(&sample, whole))
}

/// Opens `path` if it is a regular file, with the shared reader's open: `O_NONBLOCK`, so that
/// a FIFO with no writer cannot block the open, and the kind checked on the opened handle, so
/// that no rename between a check and the open can put a FIFO or `/dev/zero` there. The error
/// is the reason alone (the callers name the file).
fn open_regular(path: &Path) -> io::Result<File> {
    pipeline_bounded::open(path).map_err(|e| match e {
        pipeline_bounded::ReadError::Io { source, .. } => source,
        other => io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} (a corpus file cannot be a device, FIFO or directory)",
                other.reason()
            ),
        ),
    })
}

fn read_sample(file: &mut File) -> io::Result<(Vec<u8>, bool)> {
    let mut sample = Vec::with_capacity(SNIFF_BYTES);
    file.by_ref()
        .take(SNIFF_BYTES as u64 + 1)
        .read_to_end(&mut sample)?;
    let whole = sample.len() <= SNIFF_BYTES;
    sample.truncate(SNIFF_BYTES);
    Ok((sample, whole))
}

fn is_blank(line: &[u8]) -> bool {
    // Lossy: an invalid line is not blank.
    match std::str::from_utf8(line) {
        Ok(s) => s.trim().is_empty(),
        Err(_) => false,
    }
}

fn is_doc_open(line: &[u8]) -> bool {
    let t = line.trim_ascii_start();
    t.starts_with(b"<doc") && matches!(t.get(4), Some(b' ' | b'>' | b'\t'))
}

/// A document: its paragraphs (raw text, without line ends), where it came from, and the line
/// (1-based) it starts on (the `<doc>` line for `wiki`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// The paragraphs, raw, without line ends.
    pub paragraphs: Vec<String>,
    /// The file it was read from.
    pub file: Arc<Path>,
    /// The 1-based line it starts on.
    pub line: u64,
}

impl Document {
    /// Bytes of text (paragraphs only).
    pub fn text_len(&self) -> usize {
        self.paragraphs.iter().map(String::len).sum()
    }
}

/// Lines of a file that were not valid UTF-8 and were skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InvalidUtf8 {
    /// All of them.
    pub count: u64,
    /// Their line numbers (1-based), the first [`MAX_RECORDED_INVALID`].
    pub lines: Vec<u64>,
}

/// Streams the documents of one corpus file. Yields `Err` once on an I/O error and then stops.
pub struct DocumentReader<R> {
    reader: R,
    file: Arc<Path>,
    format: Format,
    detection: Option<Detection>,
    buf: Vec<u8>,
    line: u64,
    bytes_read: u64,
    invalid: InvalidUtf8,
    max_doc_bytes: usize,
    max_line_bytes: usize,
    split_documents: u64,
    done: bool,
    /// The document being built (`paragraphs`, `wiki`), its size and first line.
    current: Vec<String>,
    current_bytes: usize,
    current_line: u64,
    /// The current document's first line is already set (a `<doc>` line).
    hold_line: bool,
    /// `wiki`: inside a `<doc>` block, its title, and whether the title line may still come.
    in_doc: bool,
    title: Option<String>,
    expect_title: bool,
}

impl DocumentReader<BufReader<File>> {
    /// Opens a file; `Format::Auto` is decided from the file's first [`SNIFF_BYTES`]
    /// (see [`DocumentReader::detection`]).
    /// Anything but a regular file (a FIFO, a device, a directory) is refused before a byte
    /// is read, and a FIFO without blocking (see [`open_regular`]).
    pub fn open(path: &Path, format: Format) -> io::Result<Self> {
        let mut file = open_regular(path)?;
        let mut detection = None;
        let format = if format == Format::Auto {
            let (sample, whole) = read_sample(&mut file)?;
            file.seek(SeekFrom::Start(0))?;
            let d = detect_format(&sample, whole);
            let f = d.format;
            detection = Some(d);
            f
        } else {
            format
        };
        let mut reader = DocumentReader::new(
            BufReader::with_capacity(256 * 1024, file),
            Arc::from(path),
            format,
        );
        reader.detection = detection;
        Ok(reader)
    }
}

impl<R: BufRead> DocumentReader<R> {
    /// Reads documents of the given format from `reader`. `Format::Auto` is decided from what
    /// the reader has buffered (use [`DocumentReader::open`] for files).
    pub fn new(mut reader: R, file: Arc<Path>, format: Format) -> Self {
        let mut detection = None;
        let format = if format == Format::Auto {
            // An error here comes back again on the first read.
            let d = match reader.fill_buf() {
                Ok(b) => detect_format(&b[..b.len().min(SNIFF_BYTES)], false),
                Err(_) => detect_format(b"", false),
            };
            let f = d.format;
            detection = Some(d);
            f
        } else {
            format
        };
        DocumentReader {
            reader,
            file,
            format,
            detection,
            buf: Vec::new(),
            line: 0,
            bytes_read: 0,
            invalid: InvalidUtf8::default(),
            max_doc_bytes: DEFAULT_MAX_DOC_BYTES,
            max_line_bytes: MAX_LINE_BYTES,
            split_documents: 0,
            done: false,
            current: Vec::new(),
            current_bytes: 0,
            current_line: 0,
            hold_line: false,
            in_doc: false,
            title: None,
            expect_title: false,
        }
    }

    /// Cuts `paragraphs`/`wiki` documents longer than this many bytes (at a paragraph).
    pub fn with_max_doc_bytes(mut self, max: usize) -> Self {
        self.max_doc_bytes = max.max(1);
        self
    }

    /// Refuses lines longer than this many bytes, line end included (default
    /// [`MAX_LINE_BYTES`]).
    pub fn with_max_line_bytes(mut self, max: usize) -> Self {
        self.max_line_bytes = max.max(1);
        self
    }

    /// The format being read (never `Auto`).
    pub fn format(&self) -> Format {
        self.format
    }

    /// What `Auto` chose and why; `None` when the format was given.
    pub fn detection(&self) -> Option<&Detection> {
        self.detection.as_ref()
    }

    /// The file being read.
    pub fn file(&self) -> &Arc<Path> {
        &self.file
    }

    /// Lines read so far.
    pub fn lines_read(&self) -> u64 {
        self.line
    }

    /// Bytes read so far (line ends included).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// The invalid UTF-8 lines met so far.
    pub fn invalid_utf8(&self) -> &InvalidUtf8 {
        &self.invalid
    }

    /// How many times a document was cut because it exceeded the maximum size.
    pub fn split_documents(&self) -> u64 {
        self.split_documents
    }

    /// The next line as text; `Ok(None)` at the end of the file. Invalid UTF-8 lines are
    /// recorded and come back as `Some(None)`.
    fn next_line(&mut self) -> io::Result<Option<Option<String>>> {
        self.buf.clear();
        let limit = self.max_line_bytes as u64 + 1;
        let n = (&mut self.reader)
            .take(limit)
            .read_until(b'\n', &mut self.buf)?;
        if n == 0 {
            return Ok(None);
        }
        if n > self.max_line_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "line {} is longer than {} (is this a text file?)",
                    self.line + 1,
                    match self.max_line_bytes {
                        m if m >= 1 << 20 => format!("{} MiB", m >> 20),
                        m => format!("{m} bytes"),
                    }
                ),
            ));
        }
        self.line += 1;
        self.bytes_read += n as u64;
        let mut bytes = &self.buf[..];
        if let Some(b) = bytes.strip_suffix(b"\n") {
            bytes = b;
        }
        if let Some(b) = bytes.strip_suffix(b"\r") {
            bytes = b;
        }
        if self.line == 1
            && let Some(b) = bytes.strip_prefix(b"\xEF\xBB\xBF")
        {
            bytes = b;
        }
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(Some(Some(s.to_owned()))),
            Err(_) => {
                self.invalid.count += 1;
                if self.invalid.lines.len() < MAX_RECORDED_INVALID {
                    self.invalid.lines.push(self.line);
                }
                Ok(Some(None))
            }
        }
    }

    fn take_current(&mut self) -> Option<Document> {
        self.current_bytes = 0;
        if self.current.is_empty() {
            return None;
        }
        Some(Document {
            paragraphs: std::mem::take(&mut self.current),
            file: self.file.clone(),
            line: self.current_line,
        })
    }

    /// Adds a paragraph to the current document; returns a full document if it grew too big.
    fn push_paragraph(&mut self, text: String) -> Option<Document> {
        if self.current.is_empty() && !self.hold_line {
            self.current_line = self.line;
        }
        self.hold_line = false;
        self.current_bytes += text.len();
        self.current.push(text);
        if self.current_bytes >= self.max_doc_bytes {
            self.split_documents += 1;
            return self.take_current();
        }
        None
    }

    fn next_doc(&mut self) -> io::Result<Option<Document>> {
        loop {
            let Some(line) = self.next_line()? else {
                return Ok(self.take_current());
            };
            let Some(line) = line else {
                // Invalid UTF-8: skipped; it neither adds text nor ends a document.
                continue;
            };
            let blank = line.trim().is_empty();
            match self.format {
                Format::Lines | Format::Auto => {
                    if !blank {
                        return Ok(Some(Document {
                            paragraphs: vec![line],
                            file: self.file.clone(),
                            line: self.line,
                        }));
                    }
                }
                Format::Paragraphs => {
                    if blank {
                        if let Some(doc) = self.take_current() {
                            return Ok(Some(doc));
                        }
                    } else if let Some(doc) = self.push_paragraph(line) {
                        return Ok(Some(doc));
                    }
                }
                Format::Wiki => {
                    if let Some(doc) = self.wiki_line(line, blank) {
                        return Ok(Some(doc));
                    }
                }
            }
        }
    }

    fn wiki_line(&mut self, line: String, blank: bool) -> Option<Document> {
        if is_doc_open(line.as_bytes()) {
            // An unclosed block ends where the next one opens.
            let prev = self.take_current();
            self.in_doc = true;
            self.title = doc_title(&line);
            self.expect_title = true;
            self.current_line = self.line;
            self.hold_line = true;
            return prev;
        }
        if line.trim() == "</doc>" {
            self.in_doc = false;
            self.expect_title = false;
            self.hold_line = false;
            return self.take_current();
        }
        if blank {
            // Inside a block blank lines separate paragraphs; outside, they end the stray
            // text (read like the `paragraphs` format).
            return if self.in_doc {
                None
            } else {
                self.take_current()
            };
        }
        if self.in_doc && self.expect_title {
            self.expect_title = false;
            if self.title.as_deref() == Some(line.trim()) {
                return None;
            }
        }
        self.push_paragraph(line)
    }
}

/// The `title="…"` attribute of a `<doc>` line, with the entities WikiExtractor writes decoded.
fn doc_title(line: &str) -> Option<String> {
    let start = line.find("title=\"")? + "title=\"".len();
    let len = line[start..].find('"')?;
    let raw = &line[start..start + len];
    Some(
        raw.replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&")
            .trim()
            .to_string(),
    )
}

impl<R: BufRead> Iterator for DocumentReader<R> {
    type Item = io::Result<Document>;

    fn next(&mut self) -> Option<io::Result<Document>> {
        if self.done {
            return None;
        }
        match self.next_doc() {
            Ok(Some(doc)) => Some(Ok(doc)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
#[path = "corpus_tests.rs"]
mod tests;
