//! The sentences on the pretraining data: what each `clean` instance read (its corpus files,
//! the task texts it added, what decontamination dropped, and whether a file known to hold
//! evaluation texts was read without decontamination), and what the `mask` stage made of it.

use pipeline_metrics::MaskSplitRecord;
use stage_clean::{DecontamTask, Metrics};

use crate::deps::Dep;
use crate::table::thousands;

/// Corpus files of the shared data that hold a fine-tuning task's evaluation texts: the file's
/// path ending, the task, and what it holds (../shared/datasets/README.md).
const KNOWN_LEAKS: &[(&str, &str, &str)] = &[
    (
        "chnsenticorp_reviews.txt",
        "chnsenticorp",
        "every ChnSentiCorp train, dev and test text",
    ),
    (
        "wiki_mrc_contexts/",
        "cmrc2018",
        "the CMRC 2018 dev contexts",
    ),
];

fn n(x: u64) -> String {
    thousands(x as i64)
}

/// The decontamination entry of `task` (by its name, or an entry name that starts with it).
fn decontaminated(c: &Metrics, task: &str) -> Option<(String, DecontamTask)> {
    c.decontamination
        .as_ref()?
        .tasks
        .iter()
        .find(|(name, _)| name.as_str() == task || name.starts_with(&format!("{task}_")))
        .map(|(name, t)| (name.clone(), t.clone()))
}

/// `Task text added (train splits only): chnsenticorp 9,600 examples → 9,512 documents …`.
fn task_text_sentence(c: &Metrics) -> Option<String> {
    let tasks = &c.task_text;
    if tasks.is_empty() {
        return None;
    }
    let parts: Vec<String> = tasks
        .iter()
        .map(|(name, t)| {
            format!(
                "{name} {} train examples → {} documents kept ({} characters)",
                n(t.examples),
                n(t.documents_out),
                n(t.chars_out)
            )
        })
        .collect();
    Some(format!(
        "Task text added to it (the train splits as fine-tuning loads them, never dev or test): \
         {}.",
        parts.join("; ")
    ))
}

fn decontamination_sentence(c: &Metrics) -> Option<String> {
    let d = c.decontamination.as_ref()?;
    let parts: Vec<String> = d
        .tasks
        .iter()
        .map(|(name, t)| {
            format!(
                "{name} {} paragraphs (of {} dev and test texts, {} too short to match)",
                n(t.counts.paragraphs_dropped),
                n(t.counts.texts),
                n(t.counts.too_short)
            )
        })
        .collect();
    Some(format!(
        "Decontamination dropped every paragraph holding a dev or test text of the fine-tuning \
         tasks (texts of {} characters or more; from {} characters, any shared passage of 1.5× \
         that): {} in all — {}.",
        n(d.min_chars as u64),
        n(d.window as u64),
        n(d.paragraphs_dropped),
        parts.join("; ")
    ))
}

/// What a file known to hold evaluation texts means for this corpus.
fn leak_sentences(c: &Metrics, files: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for (ending, task, holds) in KNOWN_LEAKS {
        let Some(file) = files.iter().find(|f| f.contains(ending)) else {
            if *task == "chnsenticorp" {
                out.push(
                    "`corpus/misc/chnsenticorp_reviews.txt` (every ChnSentiCorp test text) is \
                     not among them."
                        .into(),
                );
            }
            continue;
        };
        out.push(match decontaminated(c, task) {
            Some((name, t)) => format!(
                "It includes `{file}`, which holds {holds}; decontamination against {name}'s dev \
                 and test texts dropped {} paragraphs, so no {task} evaluation text was \
                 pretrained on.",
                n(t.counts.paragraphs_dropped)
            ),
            None => format!(
                "**It includes `{file}`, which holds {holds}, without decontamination against \
                 {task}: {task} scores of models pretrained on it are contaminated.**"
            ),
        });
    }
    out
}

/// A corpus file as the report names it: as `clean` recorded it when relative to the workspace,
/// else from its `corpus` directory on (`corpus/misc/news_zh_1.txt`, as the shared data's README
/// names its files), so that published results do not carry the paths of the machine that ran
/// them. An absolute path without a `corpus` directory stays as it is.
fn data_relative(path: &str) -> String {
    let p = std::path::Path::new(path);
    if !p.is_absolute() {
        return path.to_string();
    }
    let parts: Vec<_> = p.components().collect();
    match parts.iter().rposition(|c| c.as_os_str() == "corpus") {
        Some(i) => parts[i..]
            .iter()
            .collect::<std::path::PathBuf>()
            .display()
            .to_string(),
        None => path.to_string(),
    }
}

/// The files a `clean` instance read (its metrics.json's `formats`, one entry per corpus file),
/// the task text it added, what decontamination dropped, and the known leaks.
pub fn corpus_sentence(c: &Dep) -> String {
    let record = c.clean();
    let owned: Vec<String> = record.formats.keys().map(|k| data_relative(k)).collect();
    let files: Vec<&str> = owned.iter().map(String::as_str).collect();
    let mut s = format!(
        "The pretraining corpus (`{}`) read {} file(s): {}.",
        c.instance,
        files.len(),
        files
            .iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for extra in task_text_sentence(record)
        .into_iter()
        .chain(decontamination_sentence(record))
        .chain(leak_sentences(record, &files))
    {
        s.push(' ');
        s.push_str(&extra);
    }
    s
}

/// The pretraining data, from a `mask` dep.
pub fn mask_sentence(m: &Dep) -> String {
    let r = m.mask();
    let split = |s: &Option<MaskSplitRecord>, f: fn(&MaskSplitRecord) -> Option<u64>| {
        s.as_ref().and_then(f)
    };
    let n = |x: Option<u64>| x.map_or_else(|| "?".into(), |x| thousands(x as i64));
    let mut s = String::from("Pretraining data (the `mask` stage): ");
    s.push_str(&format!(
        "{} training instances ({} tokens) and {} held-out eval instances from {} documents",
        n(split(&r.train, |t| t.instances)),
        n(split(&r.train, |t| t.tokens)),
        n(split(&r.eval, |t| t.instances)),
        n(r.documents),
    ));
    let params: Vec<String> = [
        r.max_seq_length.map(|x| format!("max_seq_length {x}")),
        r.masked_lm_prob.map(|x| format!("masked_lm_prob {x}")),
        r.max_ngram.map(|x| format!("n-grams up to {x}")),
        r.whole_word.map(|w| {
            if w {
                "whole-word masking".into()
            } else {
                "character masking".into()
            }
        }),
        r.dupe_factor.map(|x| format!("dupe_factor {x}")),
        r.train
            .as_ref()
            .and_then(|t| t.padding_fraction)
            .map(|x| format!("{:.1} % padding", x * 100.0)),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !params.is_empty() {
        s.push_str(&format!(" ({})", params.join(", ")));
    }
    s.push('.');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deps::DepKind;
    use crate::recipes::tests::dep;
    use serde_json::{Value, json};

    fn clean(metrics: Value) -> Dep {
        dep("clean", DepKind::Clean, metrics)
    }

    #[test]
    fn absolute_corpus_paths_are_named_from_their_corpus_directory() {
        let files = json!({"/tmp/gpu/data/corpus/misc/news_zh_1.txt": "lines",
                           "/tmp/gpu/data/corpus/wiki_mrc_contexts/cmrc2018_dev_contexts.txt":
                               "paragraphs",
                           "../shared/datasets/corpus/misc/x.txt": "lines",
                           "/elsewhere/notes.txt": "lines"});
        let s = corpus_sentence(&clean(json!({"documents_in": 1, "formats": files})));
        assert!(s.contains("`corpus/misc/news_zh_1.txt`"), "{s}");
        assert!(s.contains("`../shared/datasets/corpus/misc/x.txt`"), "{s}");
        assert!(s.contains("`/elsewhere/notes.txt`"), "{s}");
        assert!(
            s.contains("It includes `corpus/wiki_mrc_contexts/cmrc2018_dev_contexts.txt`"),
            "{s}"
        );
        assert!(!s.contains("/tmp/gpu"), "{s}");
    }

    #[test]
    fn a_leaky_file_is_flagged_unless_decontaminated() {
        let files = json!({"d/corpus/misc/chnsenticorp_reviews.txt": "lines",
                           "d/corpus/misc/news.txt": "lines"});
        let raw = corpus_sentence(&clean(json!({"documents_in": 1, "formats": files})));
        assert!(raw.contains("read 2 file(s)"), "{raw}");
        assert!(
            raw.contains("**It includes `d/corpus/misc/chnsenticorp_reviews.txt`"),
            "{raw}"
        );
        assert!(raw.contains("are contaminated.**"), "{raw}");
        let clean_one = corpus_sentence(&clean(json!({"documents_in": 1, "formats": files,
            "decontamination": {"min_chars": 12, "window": 32, "paragraphs_dropped": 2400,
                "tasks": {"chnsenticorp": {"files": [], "texts": 2400, "too_short": 0,
                                           "paragraphs_dropped": 2400}}},
            "task_text": {"chnsenticorp": {"examples": 9600, "documents_out": 9000,
                                           "chars_out": 1000000}}})));
        assert!(!clean_one.contains("contaminated.**"), "{clean_one}");
        assert!(
            clean_one.contains("dropped 2,400 paragraphs, so no chnsenticorp evaluation text"),
            "{clean_one}"
        );
        assert!(
            clean_one.contains(
                "chnsenticorp 9,600 train examples → 9,000 documents kept (1,000,000 characters)"
            ),
            "{clean_one}"
        );
        let none = corpus_sentence(&clean(json!({"documents_in": 1,
            "formats": {"d/corpus/misc/news.txt": "lines"}})));
        assert!(none.contains("is not among them"), "{none}");
    }
}
