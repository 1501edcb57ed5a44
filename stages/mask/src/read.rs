//! Documents (runs of non-blank lines) streamed from the clean corpus's files, a block at a
//! time, so that memory stays flat whatever the corpus size.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;

use anyhow::{Context, bail};
use pipeline_text::corpus::MAX_LINE_BYTES;

/// Documents read in one go, with their size in bytes.
pub(crate) struct Block {
    pub(crate) docs: Vec<Vec<String>>,
    pub(crate) bytes: u64,
}

/// Streams documents (runs of non-blank lines) from the corpus files, a block at a time.
pub(crate) struct DocReader<'a> {
    files: &'a [PathBuf],
    next_file: usize,
    current: Option<(BufReader<File>, PathBuf, u64)>,
    line: Vec<u8>,
}

impl<'a> DocReader<'a> {
    pub(crate) fn new(files: &'a [PathBuf]) -> DocReader<'a> {
        DocReader {
            files,
            next_file: 0,
            current: None,
            line: Vec::new(),
        }
    }

    pub(crate) fn next_block(&mut self, max_docs: usize) -> anyhow::Result<Option<Block>> {
        let mut block = Block {
            docs: Vec::new(),
            bytes: 0,
        };
        let mut doc: Vec<String> = Vec::new();
        loop {
            if self.current.is_none() {
                let Some(path) = self.files.get(self.next_file) else {
                    break;
                };
                self.next_file += 1;
                // The clean dep's files (a `cmd` dep may have made them): regular files only,
                // a FIFO refused rather than waited on. The reader's error names the file.
                let f = pipeline_bounded::open(path)?;
                self.current = Some((BufReader::with_capacity(1 << 20, f), path.clone(), 0));
            }
            let Some((reader, path, line_no)) = self.current.as_mut() else {
                break;
            };
            self.line.clear();
            // One line at most MAX_LINE_BYTES (the clean stage's own bound), so that a file
            // of one endless line is not held whole.
            let n = reader
                .by_ref()
                .take(MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut self.line)
                .with_context(|| format!("reading {}", path.display()))?;
            if n > MAX_LINE_BYTES {
                bail!(
                    "{}:{}: a line longer than {} MiB (is the dep a `clean` stage?)",
                    path.display(),
                    *line_no + 1,
                    MAX_LINE_BYTES >> 20
                );
            }
            if n == 0 {
                // A document never spans two files.
                self.current = None;
                if !doc.is_empty() {
                    block.docs.push(std::mem::take(&mut doc));
                    if block.docs.len() >= max_docs {
                        break;
                    }
                }
                continue;
            }
            *line_no += 1;
            block.bytes += n as u64;
            let text = std::str::from_utf8(&self.line).with_context(|| {
                format!(
                    "{}:{}: invalid UTF-8 in the clean corpus",
                    path.display(),
                    line_no
                )
            })?;
            let text = text.trim_end_matches(['\n', '\r']);
            if text.trim().is_empty() {
                if !doc.is_empty() {
                    block.docs.push(std::mem::take(&mut doc));
                    if block.docs.len() >= max_docs {
                        break;
                    }
                }
            } else {
                doc.push(text.to_string());
            }
        }
        if !doc.is_empty() {
            block.docs.push(doc);
        }
        Ok((!block.docs.is_empty()).then_some(block))
    }
}
