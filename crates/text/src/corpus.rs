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

impl FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Format, String> {
        Format::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                format!("unknown corpus format `{s}` (expected auto, lines, paragraphs or wiki)")
            })
    }
}

/// How much of a file [`detect_format`] looks at.
pub const SNIFF_BYTES: usize = 64 * 1024;

/// A `paragraphs` or `wiki` document longer than this is cut into several (a file with no blank
/// line read as `paragraphs` must not become one document held in memory).
pub const DEFAULT_MAX_DOC_BYTES: usize = 16 * 1024 * 1024;

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
    let mut file = File::open(path)?;
    let (sample, whole) = read_sample(&mut file)?;
    Ok(detect_format(&sample, whole))
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
    pub fn open(path: &Path, format: Format) -> io::Result<Self> {
        let mut file = File::open(path)?;
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
        let n = self.reader.read_until(b'\n', &mut self.buf)?;
        if n == 0 {
            return Ok(None);
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
mod tests {
    use super::*;

    /// Paragraphs and first line of each document.
    type Docs = Vec<(Vec<String>, u64)>;

    fn read(text: &[u8], format: Format) -> (Docs, DocumentReader<&[u8]>) {
        let mut r = DocumentReader::new(text, Arc::from(Path::new("t.txt")), format);
        let docs = r
            .by_ref()
            .map(|d| {
                let d = d.unwrap();
                (d.paragraphs, d.line)
            })
            .collect();
        (docs, r)
    }

    fn paras(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn format_names_round_trip_through_serde_and_from_str() {
        for f in Format::ALL {
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(json, format!("\"{}\"", f.name()));
            assert_eq!(serde_json::from_str::<Format>(&json).unwrap(), f);
            assert_eq!(f.name().parse::<Format>().unwrap(), f);
        }
        assert!(
            "Wiki"
                .parse::<Format>()
                .unwrap_err()
                .contains("expected auto")
        );
    }

    #[test]
    fn detects_wiki_paragraphs_and_lines() {
        let d = detect_format("\u{FEFF}<doc id=\"1\" title=\"x\">\nx\n".as_bytes(), true);
        assert_eq!(d.format, Format::Wiki);
        let d = detect_format("一\n二\n\n三\n\n四\n".as_bytes(), false);
        assert_eq!(d.format, Format::Paragraphs, "{}", d.reason);
        assert!(d.reason.contains("3 groups"), "{}", d.reason);
        let d = detect_format("一\n二\n三\n".as_bytes(), false);
        assert_eq!(d.format, Format::Lines);
        // Leading and trailing blank lines separate nothing.
        let d = detect_format("\n\n一\n二\n\n\n".as_bytes(), true);
        assert_eq!(d.format, Format::Lines);
        // One stray blank line: paragraphs in a small file, lines in a sample of a big one.
        let d = detect_format("一\n\u{3000}\n二\n".as_bytes(), true);
        assert_eq!(d.format, Format::Paragraphs);
        let d = detect_format("一\n\u{3000}\n二\n".as_bytes(), false);
        assert_eq!(d.format, Format::Lines);
        assert!(d.reason.contains("only one blank line"), "{}", d.reason);
    }

    #[test]
    fn lines_are_documents() {
        let (docs, r) = read("第一篇\r\n\n  \n第二篇\n第三篇".as_bytes(), Format::Lines);
        assert_eq!(
            docs,
            [
                (paras(&["第一篇"]), 1),
                (paras(&["第二篇"]), 4),
                (paras(&["第三篇"]), 5)
            ]
        );
        assert_eq!(r.lines_read(), 5);
        assert_eq!(
            r.bytes_read(),
            "第一篇\r\n\n  \n第二篇\n第三篇".len() as u64
        );
    }

    #[test]
    fn paragraphs_are_grouped_by_blank_lines() {
        let (docs, _) = read(
            "\n甲一\n甲二\n\n\n乙一\n \n丙一\n丙二".as_bytes(),
            Format::Paragraphs,
        );
        assert_eq!(
            docs,
            [
                (paras(&["甲一", "甲二"]), 2),
                (paras(&["乙一"]), 6),
                (paras(&["丙一", "丙二"]), 8)
            ]
        );
    }

    #[test]
    fn wiki_blocks_are_documents_without_their_title_line() {
        let text = "<doc id=\"13\" url=\"u\" title=\"数学\">\n数学\n\n数学是一门学科。\n\n历史\n它很古老。\n</doc>\n\
                    <doc id=\"14\" title=\"A &amp; B\">\nA & B\n正文\n</doc>\n\
                    <doc id=\"15\" title=\"空\">\n空\n</doc>\n\
                    <doc id=\"16\" title=\"无尾\">\n第一段\n";
        let (docs, r) = read(text.as_bytes(), Format::Auto);
        assert_eq!(r.format(), Format::Wiki);
        assert_eq!(
            docs,
            [
                (paras(&["数学是一门学科。", "历史", "它很古老。"]), 1),
                (paras(&["正文"]), 9),
                (paras(&["第一段"]), 16)
            ]
        );
    }

    #[test]
    fn invalid_utf8_lines_are_counted_with_their_line_numbers() {
        let mut text = b"good one\n".to_vec();
        text.extend_from_slice(b"bad \xFF\xFE line\n");
        text.extend_from_slice("好的\n".as_bytes());
        text.extend_from_slice(b"\xE4\xB8\n");
        let (docs, r) = read(&text, Format::Lines);
        assert_eq!(docs, [(paras(&["good one"]), 1), (paras(&["好的"]), 3)]);
        assert_eq!(
            r.invalid_utf8(),
            &InvalidUtf8 {
                count: 2,
                lines: vec![2, 4]
            }
        );
        // In `paragraphs`, an invalid line neither ends a document nor adds to it.
        let mut text = "一\n".as_bytes().to_vec();
        text.extend_from_slice(b"\xFF\n");
        text.extend_from_slice("二\n".as_bytes());
        let (docs, r) = read(&text, Format::Paragraphs);
        assert_eq!(docs, [(paras(&["一", "二"]), 1)]);
        assert_eq!(r.invalid_utf8().lines, [2]);
    }

    #[test]
    fn oversized_documents_are_cut() {
        let mut r = DocumentReader::new(
            "一一\n二二\n三三\n\n四\n".as_bytes(),
            Arc::from(Path::new("t")),
            Format::Paragraphs,
        )
        .with_max_doc_bytes(12);
        let docs: Vec<_> = r.by_ref().map(|d| d.unwrap()).collect();
        let got: Vec<_> = docs
            .iter()
            .map(|d| (d.paragraphs.clone(), d.line))
            .collect();
        assert_eq!(
            got,
            [
                (paras(&["一一", "二二"]), 1),
                (paras(&["三三"]), 3),
                (paras(&["四"]), 5)
            ]
        );
        assert_eq!(r.split_documents(), 1);
    }

    #[test]
    fn open_detects_from_the_file_and_rewinds() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.txt");
        std::fs::write(&p, "甲\n\n乙\n\n丙\n").unwrap();
        let r = DocumentReader::open(&p, Format::Auto).unwrap();
        assert_eq!(r.format(), Format::Paragraphs);
        assert!(r.detection().is_some());
        let docs: Vec<_> = r.map(|d| d.unwrap().paragraphs).collect();
        assert_eq!(docs.len(), 3);
        assert_eq!(detect_file_format(&p).unwrap().format, Format::Paragraphs);
        assert!(DocumentReader::open(&dir.path().join("missing"), Format::Lines).is_err());
    }
}
