//! The `vocab` stage kind: adopt or train a WordPiece/Unigram vocabulary, with tokenizer.json and
//! coverage statistics.
//!
//! Dep: the `clean` stage (its `corpus-*.txt`, one sentence a line); required for
//! `source: train`, optional for `source: file` (without it there are no coverage statistics).
//!
//! | param | default | what |
//! |---|---|---|
//! | `source` | `file` | `file`: adopt a vocab.txt; `train`: train one on the clean corpus |
//! | `file` | — | the vocab.txt for `source: file`, relative to the workspace root; declare it in `inputs:` too (when left out, the one input ending in `vocab.txt`) |
//! | `model` | `wordpiece` | `wordpiece` or `unigram` (SentencePiece's algorithm; `source: train` only) |
//! | `size` | 8000 | vocabulary size for `source: train`, the 5 special tokens included |
//! | `min_frequency` | 2 | characters seen fewer times are left out; WordPiece merges need as many |
//! | `lowercase` | true | lower-case and strip accents (BERT's `do_lower_case`) |
//! | `coverage_sample_mb` | 64 | coverage statistics on the first this many MB of the corpus; 0: all |
//!
//! Output: `vocab.txt` (one token a line, `[PAD]` `[UNK]` `[CLS]` `[SEP]` `[MASK]` present, ids 0–4 when
//! trained), `tokenizer.json` (Hugging Face `tokenizers`, BERT normaliser and pre-tokeniser,
//! which encodes as our Rust tokenizer does), and `metrics.json`: `source`, `model`,
//! `vocab_size`, `lowercase`, training counts for `source: train`, and the coverage of the
//! corpus (`tokens`, `unk_tokens`, `unk_rate`, `chars`, `unk_chars`, `unk_char_rate`,
//! `top_unk_chars`, …). Everything depends only on the inputs and params.

#![warn(missing_docs)]

pub mod coverage;
pub mod params;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use pipeline_engine::ParamError;
use pipeline_engine::stage::{DepArtifact, Stage, StageContext};
use pipeline_text::Tokenizer;
use pipeline_text::hf::{wordpiece_tokenizer, write_tokenizer_json};
use pipeline_text::train::{TrainConfig, train};
use pipeline_text::vocab::Vocab;
use pipeline_text::wordpiece::load_tokenizer;
use serde_json::{Map, Value, json};

use params::{Source, VocabParams, known_params};

/// The `vocab` stage kind.
pub struct VocabStage;

impl Stage for VocabStage {
    fn kind(&self) -> &'static str {
        "vocab"
    }

    fn code_version(&self) -> &'static str {
        env!("STAGE_CODE_VERSION")
    }

    fn known_params(&self) -> &'static [&'static str] {
        known_params()
    }

    fn validate(&self, params: &Map<String, Value>, _spec: &Value) -> Result<(), ParamError> {
        VocabParams::parse(params).map(|_| ())
    }

    fn run(&self, ctx: &StageContext) -> anyhow::Result<()> {
        let p = VocabParams::parse(ctx.params)?;
        let corpus = match corpus_dep(ctx) {
            Some(dep) => Some(corpus_files(&dep.dir)?),
            None => None,
        };
        let mut metrics = Map::new();
        metrics.insert("source".into(), json!(source_name(p.source)));
        metrics.insert("model".into(), json!(p.model.name()));
        metrics.insert("lowercase".into(), json!(p.lowercase));
        let (vocab, tokenizer) = match p.source {
            Source::File => adopt(ctx, &p)?,
            Source::Train => train_vocab(ctx, &p, corpus.as_deref(), &mut metrics)?,
        };
        metrics.insert("vocab_size".into(), json!(vocab.len()));
        metrics.insert("special_ids".into(), json!(vocab.special_ids()));

        let vocab_path = ctx.out_dir.join("vocab.txt");
        vocab
            .write(&vocab_path)
            .with_context(|| format!("cannot write {}", vocab_path.display()))?;
        write_tokenizer_json(&tokenizer, &ctx.out_dir.join("tokenizer.json"))?;

        let log = match &corpus {
            Some(files) => measure_coverage(ctx, &p, files, &mut metrics)?,
            None => "no clean dep: no coverage statistics (add `deps: [clean]` to get them)\n"
                .to_string(),
        };
        let log_path = ctx.log_dir.join("vocab.log");
        std::fs::write(&log_path, &log)
            .with_context(|| format!("cannot write {}", log_path.display()))?;

        let metrics_path = ctx.out_dir.join("metrics.json");
        std::fs::write(
            &metrics_path,
            serde_json::to_string_pretty(&Value::Object(metrics))? + "\n",
        )
        .with_context(|| format!("cannot write {}", metrics_path.display()))?;
        Ok(())
    }
}

/// `source: file`: the vocab.txt, checked, and its tokenizer.
fn adopt(ctx: &StageContext, p: &VocabParams) -> anyhow::Result<(Vocab, Tokenizer)> {
    let path = vocab_file(ctx, p)?;
    ctx.progress
        .set_message(format!("checking {}", path.display()));
    let vocab = Vocab::load(&path)?;
    let tok = wordpiece_tokenizer(&vocab, p.lowercase)?;
    Ok((vocab, tok))
}

/// `source: train`: a vocabulary trained on the corpus, its counts added to `metrics`.
fn train_vocab(
    ctx: &StageContext,
    p: &VocabParams,
    corpus: Option<&[PathBuf]>,
    metrics: &mut Map<String, Value>,
) -> anyhow::Result<(Vocab, Tokenizer)> {
    let Some(files) = corpus else {
        bail!(
            "`source: train` needs the corpus: add the clean stage to `deps:` (e.g. `deps: [clean]`)"
        );
    };
    ctx.progress.set_length(total_bytes(files));
    ctx.progress
        .set_message(format!("counting words for {}", p.model.name()));
    let cfg = TrainConfig {
        model: p.model,
        vocab_size: p.size,
        min_frequency: p.min_frequency,
        lowercase: p.lowercase,
    };
    let trained = train(files, &cfg, &|n| ctx.progress.inc(n))?;
    metrics.insert("requested_size".into(), json!(p.size));
    metrics.insert("min_frequency".into(), json!(p.min_frequency));
    if let Value::Object(m) = serde_json::to_value(&trained.stats)? {
        for (k, v) in m {
            metrics.insert(format!("train_{k}"), v);
        }
    }
    Ok((trained.vocab, trained.tokenizer))
}

/// Coverage of the corpus with the tokenizer the mask stage will load from this artifact: into
/// `metrics`, and as the lines of `vocab.log`.
fn measure_coverage(
    ctx: &StageContext,
    p: &VocabParams,
    files: &[PathBuf],
    metrics: &mut Map<String, Value>,
) -> anyhow::Result<String> {
    let (loaded_vocab, tok) = load_tokenizer(ctx.out_dir)?;
    let limit = (p.coverage_sample_mb > 0).then_some(p.coverage_sample_mb << 20);
    let total = total_bytes(files);
    ctx.progress.set_position(0);
    ctx.progress
        .set_length(limit.map_or(total, |l| l.min(total)));
    ctx.progress.set_message("coverage");
    let cov = coverage::coverage(files, tok.as_ref(), loaded_vocab.unk_id(), limit, &|n| {
        ctx.progress.inc(n)
    })?;
    let mut log = String::new();
    let _ = writeln!(
        log,
        "coverage on {} bytes of {} corpus file(s): {} tokens, {} [UNK] ({:.4} %); {} of {} distinct characters are [UNK] on their own ({} occurrences)",
        cov.sample_bytes,
        files.len(),
        cov.tokens,
        cov.unk_tokens,
        100.0 * cov.unk_rate,
        cov.distinct_unk_chars,
        cov.distinct_chars,
        cov.unk_chars
    );
    for u in &cov.top_unk_chars {
        let _ = writeln!(
            log,
            "  [UNK] char {:?} (U+{:04X}): {}",
            u.char,
            u.char.chars().next().map_or(0, |c| c as u32),
            u.count
        );
    }
    if cov.unk_rate > 0.01 {
        tracing::warn!(
            "vocab: {:.2} % of the corpus tokens are [UNK] (see vocab.log for the characters)",
            100.0 * cov.unk_rate
        );
    }
    if let Value::Object(m) = serde_json::to_value(&cov)? {
        metrics.extend(m);
    }
    Ok(log)
}

fn source_name(s: Source) -> &'static str {
    match s {
        Source::File => "file",
        Source::Train => "train",
    }
}

/// The clean dep: the dep of stage `clean`, else the only dep.
fn corpus_dep<'a>(ctx: &'a StageContext) -> Option<&'a DepArtifact> {
    ctx.dep("clean").or(match ctx.deps {
        [only] => Some(only),
        _ => None,
    })
}

/// The corpus files of a clean artifact: its `corpus-*.txt` in name order (any `*.txt` if it
/// has none of those).
pub fn corpus_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut txt: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list the clean artifact {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "txt"))
        .collect();
    txt.sort();
    let corpus: Vec<PathBuf> = txt
        .iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("corpus-"))
        })
        .cloned()
        .collect();
    let files = if corpus.is_empty() { txt } else { corpus };
    if files.is_empty() {
        bail!(
            "the clean artifact {} has no corpus-*.txt files: is the dep a `clean` stage?",
            dir.display()
        );
    }
    Ok(files)
}

fn total_bytes(files: &[PathBuf]) -> u64 {
    files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum()
}

/// The vocab.txt of `source: file`: the declared input that is (or ends with) `file`; when
/// `file` is left out, the only input named `vocab.txt`.
fn vocab_file(ctx: &StageContext, p: &VocabParams) -> anyhow::Result<PathBuf> {
    let Some(file) = &p.file else {
        let named: Vec<&PathBuf> = ctx
            .inputs
            .iter()
            .filter(|i| i.file_name().is_some_and(|n| n == "vocab.txt"))
            .collect();
        return match named[..] {
            [one] => Ok(one.clone()),
            [] => bail!(
                "`source: file` needs a vocab.txt: set the param `file` (a path relative to the workspace root) and list it in `inputs:`"
            ),
            _ => bail!("several inputs are named vocab.txt; set the param `file` to say which one"),
        };
    };
    let wanted = Path::new(file);
    let joined = ctx.root.join(wanted);
    if let Some(found) = ctx
        .inputs
        .iter()
        .find(|i| **i == joined || *i == wanted || i.ends_with(wanted))
    {
        return Ok(found.clone());
    }
    if joined.is_file() {
        // Usable, but the engine does not hash it: changes to it would not re-run the stage.
        tracing::warn!(
            "vocab: param `file` {file} is not among the stage's `inputs:`; add it there so that a change to it re-runs the stage"
        );
        return Ok(joined);
    }
    if joined.is_dir() {
        bail!(
            "param `file`: {} ({}) is a directory, not a vocab.txt file",
            file,
            joined.display()
        );
    }
    bail!(
        "param `file`: {} not found (looked up as {}); give a path relative to the workspace root and add it to `inputs:`",
        file,
        joined.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use indicatif::ProgressBar;
    use pipeline_engine::stage::DepArtifact;
    use std::collections::BTreeMap;

    const CORPUS: &str = "春天来了，河边的柳树发出了新芽。\n孩子们在田野里放风筝，笑声传得很远。\n\n\
        Hello world, the ALBERT model was released in 2019 年。\n奶奶坐在门口晒太阳。\n\n\
        罕见的字：龘。\n";

    struct Fixture {
        _dir: tempfile::TempDir,
        root: PathBuf,
        clean: PathBuf,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        let clean = dir.path().join("clean");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&clean).unwrap();
        std::fs::write(clean.join("corpus-00000.txt"), CORPUS.repeat(10)).unwrap();
        std::fs::write(clean.join("corpus-00001.txt"), CORPUS.repeat(3)).unwrap();
        std::fs::write(clean.join("metrics.json"), "{}").unwrap();
        Fixture {
            _dir: dir,
            root,
            clean,
        }
    }

    /// Runs the stage as the engine would; returns the output dir's metrics.
    fn run(
        fx: &Fixture,
        params: Value,
        inputs: &[PathBuf],
        with_dep: bool,
        out: &Path,
    ) -> anyhow::Result<Value> {
        let params = params.as_object().unwrap().clone();
        VocabStage
            .validate(&params, &Value::Null)
            .map_err(anyhow::Error::msg)?;
        std::fs::create_dir_all(out).unwrap();
        let work = out.with_extension("work");
        let log = out.with_extension("log");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(&log).unwrap();
        let deps = if with_dep {
            vec![DepArtifact {
                instance: "clean".into(),
                stage: "clean".into(),
                kind: "clean".into(),
                coords: BTreeMap::new(),
                dir: fx.clean.clone(),
            }]
        } else {
            vec![]
        };
        let progress = ProgressBar::hidden();
        let ctx = StageContext {
            instance: "vocab",
            stage: "vocab",
            params: &params,
            spec: &Value::Null,
            root: &fx.root,
            out_dir: out,
            work_dir: &work,
            log_dir: &log,
            inputs,
            deps: &deps,
            progress: &progress,
        };
        VocabStage.run(&ctx)?;
        Ok(serde_json::from_slice(&std::fs::read(
            out.join("metrics.json"),
        )?)?)
    }

    fn write_vocab(fx: &Fixture, text: &str) -> PathBuf {
        let p = fx.root.join("vocab.txt");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn source_file() {
        let fx = fixture();
        let mut tokens: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
            .iter()
            .map(|s| s.to_string())
            .chain(
                CORPUS
                    .chars()
                    .filter(|c| !c.is_whitespace() && *c != '龘')
                    .map(|c| c.to_lowercase().collect::<String>()),
            )
            .chain(
                [
                    "hello", "world", "the", "albert", "model", "was", "released", "in", "2019",
                ]
                .map(String::from),
            )
            .collect();
        let mut seen = std::collections::HashSet::new();
        tokens.retain(|t| seen.insert(t.clone()));
        let vfile = write_vocab(&fx, &(tokens.join("\n") + "\n"));
        let out = fx.root.join("out");
        let m = run(
            &fx,
            json!({"source": "file", "file": "vocab.txt"}),
            std::slice::from_ref(&vfile),
            true,
            &out,
        )
        .unwrap();
        assert_eq!(m["source"], "file");
        assert_eq!(m["vocab_size"], tokens.len());
        assert_eq!(m["unk_tokens"], 13, "{m}");
        assert_eq!(m["top_unk_chars"][0]["char"], "龘");
        assert_eq!(m["top_unk_chars"][0]["count"], 13);
        assert_eq!(
            std::fs::read_to_string(out.join("vocab.txt")).unwrap(),
            tokens.join("\n") + "\n"
        );
        // tokenizer.json loads, and the mask stage gets the fast WordPiece for it.
        let (v, tok) = load_tokenizer(&out).unwrap();
        let (mut ids, mut starts) = (vec![], vec![]);
        tok.encode_with_offsets("春天 hello", &mut ids, &mut starts);
        assert_eq!(
            ids,
            [
                v.id("春").unwrap(),
                v.id("天").unwrap(),
                v.id("hello").unwrap()
            ]
        );
        assert_eq!(starts, [0, 3, 7]);

        // The same without the clean dep: no coverage, same vocabulary; `file` inferred.
        let out2 = fx.root.join("out2");
        let m2 = run(&fx, json!({}), std::slice::from_ref(&vfile), false, &out2).unwrap();
        assert!(m2.get("unk_tokens").is_none());
        assert_eq!(m2["vocab_size"], m["vocab_size"]);
    }

    #[test]
    fn source_file_errors() {
        let fx = fixture();
        let out = fx.root.join("out");
        // Missing special token, named with the file.
        let v = write_vocab(&fx, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n的\n");
        let e = run(
            &fx,
            json!({"file": "vocab.txt"}),
            std::slice::from_ref(&v),
            true,
            &out,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("vocab.txt") && e.contains("[MASK]"), "{e}");
        // Duplicate token: both lines.
        let v = write_vocab(&fx, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n的\n了\n的\n");
        let e = run(
            &fx,
            json!({"file": "vocab.txt"}),
            std::slice::from_ref(&v),
            true,
            &fx.root.join("o2"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("vocab.txt:8") && e.contains("line 6"), "{e}");
        // Not found: says to add it to inputs.
        let e = run(
            &fx,
            json!({"file": "nope/vocab.txt"}),
            &[],
            true,
            &fx.root.join("o3"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("nope/vocab.txt") && e.contains("inputs"), "{e}");
        // No file and no input.
        let e = run(&fx, json!({}), &[], true, &fx.root.join("o4"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`file`") && e.contains("inputs"), "{e}");
        // Size too small for training: a validate error naming the param.
        let e = run(
            &fx,
            json!({"source": "train", "size": 4}),
            &[],
            true,
            &fx.root.join("o5"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("`size`"), "{e}");
        // Training without the corpus.
        let e = run(
            &fx,
            json!({"source": "train"}),
            &[],
            false,
            &fx.root.join("o6"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("deps"), "{e}");
    }

    #[test]
    fn source_train_is_deterministic() {
        let fx = fixture();
        for model in ["wordpiece", "unigram"] {
            let params =
                json!({"source": "train", "model": model, "size": 200, "min_frequency": 2});
            let a = fx.root.join(format!("{model}-a"));
            let b = fx.root.join(format!("{model}-b"));
            let ma = run(&fx, params.clone(), &[], true, &a).unwrap();
            let mb = run(&fx, params, &[], true, &b).unwrap();
            for f in ["vocab.txt", "tokenizer.json", "metrics.json"] {
                assert_eq!(
                    std::fs::read(a.join(f)).unwrap(),
                    std::fs::read(b.join(f)).unwrap(),
                    "{model} {f}"
                );
            }
            assert_eq!(ma, mb);
            assert_eq!(ma["model"], model);
            assert!(ma["vocab_size"].as_u64().unwrap() <= 200, "{ma}");
            let v = Vocab::load(&a.join("vocab.txt")).unwrap();
            assert_eq!(v.special_ids(), [0, 1, 2, 3, 4]);
            // 龘 occurs 13 times, above min_frequency: it is in the vocabulary.
            assert!(v.id("龘").is_some(), "{model}");
            assert_eq!(ma["unk_tokens"], 0, "{model}: {ma}");
            let (_, tok) = load_tokenizer(&a).unwrap();
            let (mut ids, mut starts) = (vec![], vec![]);
            tok.encode_with_offsets("春天来了", &mut ids, &mut starts);
            assert_eq!(starts, [0, 3, 6, 9], "{model}");
        }
    }

    /// Adopting bert-base-chinese and measuring its coverage on a real corpus sample.
    #[test]
    fn bert_base_chinese_on_real_corpus() {
        let root = std::env::var_os("PIPELINE_DATA_ROOT")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets")
            });
        let vocab = root.join("vocab/vocab.txt");
        let text = root.join("corpus/wiki_mrc_contexts/cmrc2018_dev_contexts.txt");
        if !vocab.exists() || !text.exists() {
            eprintln!("note: {} absent, skipping", root.display());
            return;
        }
        let fx = fixture();
        std::fs::remove_file(fx.clean.join("corpus-00000.txt")).unwrap();
        std::fs::remove_file(fx.clean.join("corpus-00001.txt")).unwrap();
        std::fs::copy(&text, fx.clean.join("corpus-00000.txt")).unwrap();
        let out = fx.root.join("out");
        let m = run(
            &fx,
            json!({"file": vocab.to_str().unwrap(), "coverage_sample_mb": 1}),
            std::slice::from_ref(&vocab),
            true,
            &out,
        )
        .unwrap();
        eprintln!("{m:#}");
        assert_eq!(m["vocab_size"], 21128);
        assert_eq!(m["special_ids"], json!([0, 100, 101, 102, 103]));
        assert!(m["sample_bytes"].as_u64().unwrap() <= 1 << 20);
        assert!(m["unk_rate"].as_f64().unwrap() < 0.01, "{m}");
    }
}
