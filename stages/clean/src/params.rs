//! The `clean` stage's params: parsing with errors that name the param, range checks, and the
//! per-file format rules.

use std::collections::BTreeMap;
use std::path::Path;

pub use pipeline_params::ParamError;
use pipeline_params::{from_params, struct_fields};
use pipeline_text::corpus::Format;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::task_text::{TaskEntry, parse_entries};

/// Every param the kind takes (see the crate documentation for what each does): the fields
/// of [`CleanParams`].
pub fn known_params() -> &'static [&'static str] {
    struct_fields::<CleanParams>()
}

/// The params as given (defaults for those left out).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct CleanParams {
    /// How the files are laid out (`auto`: decided per file).
    pub format: Format,
    /// Kept raw here; [`FormatRules::parse`] checks it.
    pub formats: Value,
    /// Convert Traditional to Simplified Chinese.
    pub to_simplified: bool,
    /// Drop shorter sentences (characters).
    pub min_sentence_chars: usize,
    /// Cut longer sentences.
    pub max_sentence_chars: usize,
    /// Drop documents with fewer characters.
    pub min_doc_chars: usize,
    /// Drop documents with more characters; 0: no maximum.
    pub max_doc_chars: usize,
    /// Drop documents with fewer sentences.
    pub min_doc_sentences: usize,
    /// Drop exact duplicate documents.
    pub dedup: bool,
    /// Also drop near-duplicates (MinHash).
    pub near_dup: bool,
    /// Estimated Jaccard similarity from which a document is a near-duplicate.
    pub near_dup_threshold: f64,
    /// Start a new output file after this many bytes.
    pub shard_bytes: u64,
    /// Fine-tuning protocols whose train texts join the corpus; kept raw here, parsed by
    /// [`CleanParams::parse`] into [`TaskParams::task_text`].
    pub task_text: Value,
    /// Whether `task_text` is added (a scalar, so that it can be a matrix axis: the same
    /// protocols with and without their text).
    pub add_task_text: bool,
    /// Fine-tuning protocols whose dev and evaluation texts must not enter the corpus; raw.
    pub exclude_texts_of: Value,
    /// Held-out texts shorter than this (characters) are not matched.
    pub exclude_min_chars: usize,
    /// Held-out texts this long or longer match by shared passages of this many characters.
    pub exclude_window: usize,
}

impl Default for CleanParams {
    fn default() -> Self {
        CleanParams {
            format: Format::Auto,
            formats: Value::Null,
            to_simplified: true,
            min_sentence_chars: 2,
            max_sentence_chars: 256,
            min_doc_chars: 20,
            max_doc_chars: 0,
            min_doc_sentences: 1,
            dedup: true,
            near_dup: true,
            near_dup_threshold: 0.8,
            shard_bytes: 64 * 1024 * 1024,
            task_text: Value::Null,
            add_task_text: true,
            exclude_texts_of: Value::Null,
            exclude_min_chars: 12,
            exclude_window: 32,
        }
    }
}

/// The task entries of `task_text` and `exclude_texts_of`, parsed (no file read yet).
#[derive(Debug, Clone, Default)]
pub struct TaskParams {
    /// `task_text`: protocols whose train texts join the corpus.
    pub task_text: Vec<TaskEntry>,
    /// `exclude_texts_of`: protocols whose dev and evaluation texts are kept out.
    pub exclude_texts_of: Vec<TaskEntry>,
}

/// Smallest `shard_bytes`: below it a shard would hold a handful of documents.
pub const MIN_SHARD_BYTES: u64 = 1024;

impl CleanParams {
    /// Parses and checks the params; the error names the param and what it allows.
    pub fn parse(
        params: &Map<String, Value>,
    ) -> Result<(CleanParams, FormatRules, TaskParams), ParamError> {
        let p: CleanParams = from_params(params, |name| match name {
            "format" => " (auto, lines, paragraphs or wiki)",
            "to_simplified" | "dedup" | "near_dup" | "add_task_text" => " (true or false)",
            "near_dup_threshold" => " (a number in (0, 1])",
            _ => " (a whole number ≥ 0)",
        })?;
        let rules = FormatRules::parse(&p.formats)?;
        p.check()?;
        let tasks = TaskParams {
            task_text: parse_entries(&p.task_text, "task_text")?,
            exclude_texts_of: parse_entries(&p.exclude_texts_of, "exclude_texts_of")?,
        };
        Ok((p, rules, tasks))
    }

    fn check(&self) -> Result<(), ParamError> {
        if self.max_sentence_chars == 0 {
            return Err("param `max_sentence_chars` must be at least 1 (long sentences are cut to this many characters)".into());
        }
        if self.min_sentence_chars > self.max_sentence_chars {
            return Err(format!(
                "param `min_sentence_chars` ({}) is more than `max_sentence_chars` ({}): every sentence would be dropped",
                self.min_sentence_chars, self.max_sentence_chars
            ).into());
        }
        if self.max_doc_chars > 0 && self.min_doc_chars > self.max_doc_chars {
            return Err(format!(
                "param `min_doc_chars` ({}) is more than `max_doc_chars` ({}): every document would be dropped (0 = no maximum)",
                self.min_doc_chars, self.max_doc_chars
            ).into());
        }
        if !(self.near_dup_threshold > 0.0 && self.near_dup_threshold <= 1.0) {
            return Err(format!(
                "param `near_dup_threshold` is {}; it must be in (0, 1] (the estimated Jaccard similarity from which a document counts as a near-duplicate)",
                self.near_dup_threshold
            ).into());
        }
        if self.exclude_min_chars < 2 || self.exclude_window < self.exclude_min_chars {
            return Err(format!(
                "params `exclude_min_chars` ({}) and `exclude_window` ({}): need 2 ≤ \
                 exclude_min_chars ≤ exclude_window (texts shorter than the first are not \
                 matched; longer than the second match by shared passages of that length)",
                self.exclude_min_chars, self.exclude_window
            )
            .into());
        }
        if self.shard_bytes < MIN_SHARD_BYTES {
            return Err(format!(
                "param `shard_bytes` is {}; it must be at least {MIN_SHARD_BYTES}",
                self.shard_bytes
            )
            .into());
        }
        Ok(())
    }
}

/// `formats`: glob patterns over the input paths (relative to the workspace root) → format.
#[derive(Debug, Clone, Default)]
pub struct FormatRules {
    /// In the order they are tried.
    rules: Vec<(glob::Pattern, Format)>,
    /// A map (no order): a path matched by patterns naming different formats is an error.
    unordered: bool,
}

impl FormatRules {
    /// A map `{pattern: format}` (patterns must not disagree on a file), or a list of one-entry
    /// maps `[{pattern: format}, …]` (the first match wins).
    pub fn parse(v: &Value) -> Result<FormatRules, ParamError> {
        let (entries, unordered): (Vec<(&String, &Value)>, bool) = match v {
            Value::Null => return Ok(FormatRules::default()),
            Value::Object(m) => (m.iter().collect(), true),
            Value::Array(items) => {
                let mut entries = Vec::new();
                for item in items {
                    match item {
                        Value::Object(m) if m.len() == 1 => entries.extend(m.iter()),
                        _ => {
                            return Err(format!(
                                "param `formats`: each list item must be one `pattern: format` pair, not {item}"
                            ).into());
                        }
                    }
                }
                (entries, false)
            }
            other => {
                return Err(format!(
                    "param `formats` must map glob patterns to formats, e.g. {{\"*/zhwiki_sample/*\": wiki}}, not {other}"
                ).into());
            }
        };
        let mut rules = Vec::new();
        for (pattern, format) in entries {
            let glob = glob::Pattern::new(pattern).map_err(|e| {
                format!(
                    "param `formats`: `{pattern}` is not a valid glob: {} (at character {})",
                    e.msg,
                    e.pos + 1
                )
            })?;
            let format = format
                .as_str()
                .ok_or_else(|| {
                    format!(
                        "param `formats`: the format of `{pattern}` must be a name, not {format}"
                    )
                })?
                .parse::<Format>()
                .map_err(|e| format!("param `formats`: `{pattern}`: {e}"))?;
            rules.push((glob, format));
        }
        Ok(FormatRules { rules, unordered })
    }

    /// The format for a file (its path relative to the workspace root, or absolute if outside).
    pub fn format_for(&self, rel: &Path, default: Format) -> Result<Format, ParamError> {
        let mut matched: BTreeMap<Format, &str> = BTreeMap::new();
        for (glob, format) in &self.rules {
            if glob.matches_path(rel) {
                if !self.unordered {
                    return Ok(*format);
                }
                matched.entry(*format).or_insert(glob.as_str());
            }
        }
        match matched.len() {
            0 => Ok(default),
            1 => Ok(*matched.keys().next().unwrap_or(&default)),
            _ => Err(format!(
                "param `formats`: {} is matched by patterns that disagree ({}); write `formats` as a list of `pattern: format` items to say which comes first",
                rel.display(),
                matched
                    .iter()
                    .map(|(f, p)| format!("`{p}` → {f}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<(CleanParams, FormatRules), String> {
        CleanParams::parse(v.as_object().unwrap())
            .map(|(p, r, _)| (p, r))
            .map_err(|e| e.0)
    }

    #[test]
    fn defaults_and_unknown_keys() {
        let (p, rules) = parse(json!({"lr": 0.1})).unwrap();
        assert_eq!(p.format, Format::Auto);
        assert_eq!(p.max_sentence_chars, 256);
        assert!(rules.rules.is_empty());
    }

    #[test]
    fn bad_values_name_the_param() {
        for (v, needle) in [
            (json!({"format": "csv"}), "param `format`"),
            (json!({"min_doc_chars": "many"}), "param `min_doc_chars`"),
            (json!({"min_doc_chars": -1}), "param `min_doc_chars`"),
            (json!({"dedup": "yes"}), "param `dedup`"),
            (json!({"near_dup_threshold": 1.5}), "(0, 1]"),
            (json!({"near_dup_threshold": 0}), "(0, 1]"),
            (json!({"max_sentence_chars": 0}), "at least 1"),
            (
                json!({"min_sentence_chars": 10, "max_sentence_chars": 5}),
                "min_sentence_chars",
            ),
            (
                json!({"min_doc_chars": 100, "max_doc_chars": 50}),
                "max_doc_chars",
            ),
            (json!({"shard_bytes": 10}), "shard_bytes"),
            (json!({"exclude_min_chars": 1}), "exclude_min_chars"),
            (
                json!({"exclude_min_chars": 20, "exclude_window": 10}),
                "exclude_window",
            ),
            (json!({"add_task_text": "yes"}), "param `add_task_text`"),
            (
                json!({"task_text": "lcqmc"}),
                "param `task_text` must be a list",
            ),
            (
                json!({"exclude_texts_of": [{"task": "nope", "train": "a", "dev": "b"}]}),
                "exclude_texts_of[0]",
            ),
            (json!({"formats": "wiki"}), "param `formats`"),
            (json!({"formats": {"[": "wiki"}}), "not a valid glob"),
            (json!({"formats": {"*": "xml"}}), "unknown corpus format"),
            (
                json!({"formats": [{"a": "wiki", "b": "lines"}]}),
                "one `pattern: format` pair",
            ),
        ] {
            let e = parse(v.clone()).unwrap_err();
            assert!(e.contains(needle), "{v}: {e}");
        }
    }

    #[test]
    fn format_rules_match_relative_paths() {
        let (_, rules) =
            parse(json!({"formats": {"*/zhwiki_sample/*": "wiki", "*/news/*.txt": "paragraphs"}}))
                .unwrap();
        let f = |p: &str| rules.format_for(Path::new(p), Format::Auto).unwrap();
        assert_eq!(
            f("../shared/datasets/corpus/zhwiki_sample/zhwiki_AA_wiki_00.txt"),
            Format::Wiki
        );
        assert_eq!(f("data/news/a.txt"), Format::Paragraphs);
        assert_eq!(f("data/reviews/a.txt"), Format::Auto);
    }

    #[test]
    fn ordered_rules_take_the_first_match_and_maps_refuse_conflicts() {
        let (_, rules) = parse(json!({"formats": [{"*/wiki/*": "wiki"}, {"*": "lines"}]})).unwrap();
        assert_eq!(
            rules
                .format_for(Path::new("c/wiki/a.txt"), Format::Auto)
                .unwrap(),
            Format::Wiki
        );
        assert_eq!(
            rules
                .format_for(Path::new("c/x/a.txt"), Format::Auto)
                .unwrap(),
            Format::Lines
        );
        let (_, rules) = parse(json!({"formats": {"*/wiki/*": "wiki", "*": "lines"}})).unwrap();
        let e = rules
            .format_for(Path::new("c/wiki/a.txt"), Format::Auto)
            .unwrap_err()
            .0;
        assert!(e.contains("disagree"), "{e}");
    }
}
