//! The reader thread: every input file, in sorted path order, into blocks of documents sent
//! in waves to the cleaning threads, with what was read of each file.

use std::path::{Path, PathBuf};

use anyhow::Context;
use pipeline_engine::stage::StageContext;
use pipeline_text::corpus::{Detection, Document, DocumentReader, Format, InvalidUtf8};

use crate::FormatRules;

/// Documents per block of parallel work.
pub(crate) const BLOCK_DOCS: usize = 2_000;
/// A block also ends after this much text, so that blocks of long documents stay small.
pub(crate) const BLOCK_BYTES: usize = 4 * 1024 * 1024;

/// What the reader thread sends, in input order.
pub(crate) enum Msg {
    /// A file is opened (and read as `format`).
    File {
        rel: String,
        format: Format,
        detection: Option<Detection>,
    },
    /// Blocks of documents to clean.
    Wave(Vec<Vec<Document>>),
    /// A file has been read.
    FileDone {
        rel: String,
        bytes: u64,
        split_documents: u64,
        invalid: InvalidUtf8,
    },
}

/// The path as shown in logs and metrics and matched by `formats`: relative to the workspace
/// root when inside it.
pub(crate) fn display_path(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// Reads every file into blocks of documents, sent in waves of a few blocks per thread.
/// Returns early, without error, when the receiver is gone.
pub(crate) fn read_all(
    ctx: &StageContext,
    files: &[PathBuf],
    rules: &FormatRules,
    default: Format,
    tx: std::sync::mpsc::SyncSender<Msg>,
) -> anyhow::Result<()> {
    let wave_blocks = (2 * rayon::current_num_threads()).max(4);
    let mut block: Vec<Document> = Vec::new();
    let mut block_bytes = 0usize;
    let mut wave: Vec<Vec<Document>> = Vec::new();
    macro_rules! send {
        ($msg:expr) => {
            if tx.send($msg).is_err() {
                return Ok(());
            }
        };
    }
    for path in files {
        let rel = display_path(ctx.root, path);
        let format = rules.format_for(Path::new(&rel), default)?;
        let mut reader = DocumentReader::open(path, format)
            .with_context(|| format!("opening the input {}", path.display()))?;
        send!(Msg::File {
            rel: rel.clone(),
            format: reader.format(),
            detection: reader.detection().cloned(),
        });
        ctx.progress.set_message(rel.clone());
        let mut reported = 0u64;
        while let Some(doc) = reader.next() {
            let doc = doc.with_context(|| {
                format!(
                    "reading {} after line {}",
                    path.display(),
                    reader.lines_read()
                )
            })?;
            block_bytes += doc.text_len();
            block.push(doc);
            if block.len() >= BLOCK_DOCS || block_bytes >= BLOCK_BYTES {
                wave.push(std::mem::take(&mut block));
                block_bytes = 0;
                ctx.progress.inc(reader.bytes_read() - reported);
                reported = reader.bytes_read();
                if wave.len() >= wave_blocks {
                    send!(Msg::Wave(std::mem::take(&mut wave)));
                }
            }
        }
        ctx.progress.inc(reader.bytes_read() - reported);
        send!(Msg::FileDone {
            rel,
            bytes: reader.bytes_read(),
            split_documents: reader.split_documents(),
            invalid: reader.invalid_utf8().clone(),
        });
    }
    if !block.is_empty() {
        wave.push(block);
    }
    if !wave.is_empty() {
        send!(Msg::Wave(wave));
    }
    Ok(())
}
