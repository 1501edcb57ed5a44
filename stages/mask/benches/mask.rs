//! Masking throughput against albert_zh's `create_pretraining_data.py`: `cargo bench -p stage-mask`.
//!
//! The input is the one the baseline was measured on: People's Daily (Jan 1998, 5.5 MB) from the
//! shared datasets, one sentence a line, a blank line between documents of 7 paragraphs
//! (2,784 documents), with the bert-base-chinese vocabulary; params max_seq_length 128,
//! max_predictions_per_seq 20, masked_lm_prob 0.15, dupe_factor 1, whole-word masking.
//! Baseline on this machine (Python + jieba, one process): 11,488 instances in 15.5 s,
//! 742 instances/s. The target is ≥ 50× that, ≥ 37,000 instances/s.
//!
//! Set `PIPELINE_DATA_ROOT` when the shared datasets are not at `../shared/datasets`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use pipeline_text::sentences::SentenceSplitter;
use pipeline_text::wordpiece::load_tokenizer;
use stage_mask::{MaskConfig, Masker};

fn data_root() -> PathBuf {
    std::env::var_os("PIPELINE_DATA_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets")
        })
}

fn main() {
    let root = data_root();
    let source = root.join("corpus/peoples_daily_199801/peoples_daily_199801_raw.txt");
    let vocab = root.join("vocab/vocab.txt");
    if !source.exists() || !vocab.exists() {
        println!(
            "skipped: {} or {} is missing (set PIPELINE_DATA_ROOT)",
            source.display(),
            vocab.display()
        );
        return;
    }
    let tmp = tempfile::tempdir().expect("a temp dir");

    let (corpus, docs, bytes) = write_corpus(&source, tmp.path());
    let vocab_dir = write_vocab_artifact(&vocab, tmp.path());

    let config = MaskConfig {
        max_seq_length: 128,
        max_predictions_per_seq: 20,
        masked_lm_prob: 0.15,
        dupe_factor: 1,
        whole_word: true,
        eval_fraction: 0.0,
        ..MaskConfig::default()
    };
    let mut best = f64::MAX;
    let mut instances = 0;
    for _ in 0..5 {
        let out_dir = tempfile::tempdir().expect("out dir");
        let (vocab, tokenizer) = load_tokenizer(&vocab_dir).expect("tokenizer");
        let t0 = Instant::now();
        let masker = Masker::new(config.clone(), vocab, tokenizer).expect("masker");
        let report = masker
            .run(std::slice::from_ref(&corpus), out_dir.path(), |_| {})
            .expect("mask");
        best = best.min(t0.elapsed().as_secs_f64());
        instances = report.train.instances;
    }
    let threads = rayon::current_num_threads();
    println!(
        "mask, People's Daily ({:.1} MB, {docs} documents), {threads} threads: {instances} instances in {:.3} s \
         (best of 5) = {:.0} instances/s, {:.1} MB/s; albert_zh: 742 instances/s → {:.0}× (target ≥ 50×)",
        bytes as f64 / 1e6,
        best,
        instances as f64 / best,
        bytes as f64 / 1e6 / best,
        instances as f64 / best / 742.0
    );
    // For results/bench/ (the report's throughput table): ours, and the baseline the issue
    // measured on this machine with albert_zh's create_pretraining_data.py.
    println!(
        "{}",
        serde_json::json!({"bench": "mask", "corpus": "peoples_daily_199801 (5.6 MB)",
            "threads": threads, "instances": instances, "seconds": best,
            "instances_per_s": instances as f64 / best, "mb_per_s": bytes as f64 / 1e6 / best})
    );
    println!(
        "{}",
        serde_json::json!({"bench": "albert_zh_mask", "corpus": "peoples_daily_199801 (5.6 MB)",
            "threads": 1, "instances": 11488, "seconds": 15.5, "instances_per_s": 742.0,
            "note": "albert_zh create_pretraining_data.py (Python + jieba), measured for issue 3"})
    );
}

/// The baseline's input: sentences on lines, documents of 7 paragraphs. Returns the file, its
/// documents and its bytes.
fn write_corpus(source: &Path, tmp: &Path) -> (PathBuf, usize, u64) {
    let text = std::fs::read_to_string(source).expect("reading People's Daily");
    let corpus = tmp.join("corpus-00000.txt");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&corpus).expect("corpus file"));
    let mut docs = 0;
    let splitter = SentenceSplitter::new(256);
    for (i, paragraph) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        for s in splitter.split(paragraph.trim()) {
            writeln!(out, "{s}").expect("write");
        }
        if i % 7 == 6 {
            writeln!(out).expect("write");
            docs += 1;
        }
    }
    drop(out);
    let bytes = std::fs::metadata(&corpus).expect("corpus").len();
    (corpus, docs, bytes)
}

/// The vocab stage's artifact layout: vocab.txt + tokenizer.json.
fn write_vocab_artifact(vocab: &Path, tmp: &Path) -> PathBuf {
    let vocab_dir = tmp.join("vocab");
    std::fs::create_dir_all(&vocab_dir).expect("vocab dir");
    std::fs::copy(vocab, vocab_dir.join("vocab.txt")).expect("copy vocab");
    let v = pipeline_text::vocab::Vocab::load(&vocab_dir.join("vocab.txt")).expect("vocab");
    let tok = pipeline_text::hf::wordpiece_tokenizer(&v, true).expect("tokenizer");
    pipeline_text::hf::write_tokenizer_json(&tok, &vocab_dir.join("tokenizer.json"))
        .expect("tokenizer.json");
    vocab_dir
}
