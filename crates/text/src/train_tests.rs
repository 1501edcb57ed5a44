//! Training on a small corpus: counts, determinism of both models, and the errors.

use super::*;

fn corpus(dir: &Path) -> Vec<PathBuf> {
    let text = "春天来了，河边的柳树发出了新芽。孩子们在田野里放风筝。\n\
                Hello world, the unaffable ALBERT model 2024 年发布。\n\n\
                奶奶坐在门口晒太阳，一边剥豆子，一边给我们讲故事。\n\
                hello again: the models, the worlds, unaffable things.\n";
    let p = dir.join("corpus-00000.txt");
    std::fs::write(&p, text.repeat(20)).unwrap();
    vec![p]
}

fn train_files(files: &[PathBuf], c: &TrainConfig) -> Result<Trained, TrainError> {
    train(files, c, &|_| ())
}

fn cfg(model: ModelKind, size: usize) -> TrainConfig {
    TrainConfig {
        model,
        vocab_size: size,
        min_frequency: 2,
        lowercase: true,
    }
}

#[test]
fn counts_words_like_bert() {
    let dir = tempfile::tempdir().unwrap();
    let files = corpus(dir.path());
    let counts: HashMap<String, u64> = count_words(&files, true, &|_| ())
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(counts["春"], 20);
    assert_eq!(counts["the"], 60);
    assert_eq!(counts["albert"], 20);
    assert_eq!(counts["，"], 60);
    assert!(!counts.contains_key("ALBERT"));
}

#[test]
fn wordpiece_training_is_deterministic_and_covers_chinese() {
    let dir = tempfile::tempdir().unwrap();
    let files = corpus(dir.path());
    let a = train_files(&files, &cfg(ModelKind::WordPiece, 150)).unwrap();
    let b = train_files(&files, &cfg(ModelKind::WordPiece, 150)).unwrap();
    assert_eq!(a.vocab.to_text(), b.vocab.to_text());
    assert_eq!(&a.vocab.tokens()[..5], SPECIAL_TOKENS);
    assert!(a.vocab.len() <= 150, "{}", a.vocab.len());
    for c in "春天来了河边的柳树奶奶".chars() {
        assert!(a.vocab.id(&c.to_string()).is_some(), "{c} missing");
    }
    assert!(a.vocab.id("##e").is_some());
    // The tokenizer.json and our WordPiece agree on the training text.
    let wp = crate::wordpiece::WordPiece::new(std::sync::Arc::new(a.vocab.clone()), true);
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let hf = a.tokenizer.encode(text.as_str(), false).unwrap();
    assert_eq!(wp.encode(&text), hf.get_ids());
    assert!(!hf.get_ids().contains(&1), "no [UNK] on the training text");
}

#[test]
fn unigram_training_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let files = corpus(dir.path());
    let a = train_files(&files, &cfg(ModelKind::Unigram, 120)).unwrap();
    let b = train_files(&files, &cfg(ModelKind::Unigram, 120)).unwrap();
    assert_eq!(a.vocab.to_text(), b.vocab.to_text());
    assert_eq!(
        a.tokenizer.to_string(false).unwrap(),
        b.tokenizer.to_string(false).unwrap()
    );
    assert_eq!(&a.vocab.tokens()[..5], SPECIAL_TOKENS);
    assert!(a.vocab.len() <= 120, "{}", a.vocab.len());
    let enc = a.tokenizer.encode("春天来了 hello", false).unwrap();
    assert!(!enc.get_ids().contains(&1), "{:?}", enc.get_tokens());
}

#[test]
fn size_too_small_and_empty_corpus() {
    let dir = tempfile::tempdir().unwrap();
    let files = corpus(dir.path());
    let e = train_files(&files, &cfg(ModelKind::WordPiece, 5))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("special tokens"), "{e}");
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "\n\n").unwrap();
    let e = train_files(&[empty], &cfg(ModelKind::Unigram, 100))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no text"), "{e}");
}

/// Training twice on real corpora gives the same vocab.txt (skipped without the data).
#[test]
fn real_corpus_determinism() {
    let Some(p) = crate::vocab::shared_data_file("corpus/misc/CLUECorpusSmall_sampled.txt") else {
        return;
    };
    let counts = count_words(&[p], true, &|_| ()).unwrap();
    for (model, size) in [(ModelKind::WordPiece, 8000), (ModelKind::Unigram, 8000)] {
        let c = TrainConfig {
            model,
            vocab_size: size,
            min_frequency: 2,
            lowercase: true,
        };
        let a = train_on_counts(&counts, &c).unwrap();
        let b = train_on_counts(&counts, &c).unwrap();
        assert_eq!(a.vocab.to_text(), b.vocab.to_text(), "{model:?}");
        eprintln!("{model:?}: {} tokens, {:?}", a.vocab.len(), a.stats);
    }
}

/// Trains on every shared corpus file (~37 MB) twice per model and prints a digest of the
/// vocab.txt, to compare across runs and `RAYON_NUM_THREADS` (skipped without the data).
/// `cargo test --release -p pipeline-text full_corpus_training -- --ignored --nocapture`
#[test]
#[ignore]
fn full_corpus_training() {
    let Some(root) = crate::vocab::shared_data_file("corpus") else {
        return;
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .map(|f| f.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt") && !p.ends_with("SOURCE.txt"))
        .collect();
    files.sort();
    let t = std::time::Instant::now();
    let counts = count_words(&files, true, &|_| ()).unwrap();
    eprintln!(
        "counted {} distinct words in {:.1} s",
        counts.len(),
        t.elapsed().as_secs_f64()
    );
    for model in [ModelKind::WordPiece, ModelKind::Unigram] {
        let c = TrainConfig {
            model,
            vocab_size: 21128,
            min_frequency: 2,
            lowercase: true,
        };
        let mut digests = Vec::new();
        for _ in 0..2 {
            let t = std::time::Instant::now();
            let a = train_on_counts(&counts, &c).unwrap();
            let text = a.vocab.to_text();
            let mut h = std::hash::DefaultHasher::new();
            std::hash::Hash::hash(&text, &mut h);
            let d = std::hash::Hasher::finish(&h);
            eprintln!(
                "{model:?}: {} tokens in {:.1} s, digest {d:016x}, {:?}",
                a.vocab.len(),
                t.elapsed().as_secs_f64(),
                a.stats
            );
            digests.push(d);
        }
        assert_eq!(digests[0], digests[1], "{model:?}");
    }
}

#[test]
fn a_fifo_or_device_corpus_file_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("corpus-00000.txt");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
    let e = for_each_block(&fifo, |_| ControlFlow::Continue(())).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("corpus-00000.txt: not a regular file (it is a FIFO)"),
        "{text}"
    );
    // The reader's error is the text, not also a source a chain printer would repeat.
    assert!(std::error::Error::source(&e).is_none());
    let e = for_each_block(Path::new("/dev/zero"), |_| ControlFlow::Continue(())).unwrap_err();
    assert!(e.to_string().contains("a character device"), "{e}");
}

#[test]
fn one_endless_line_is_refused_at_the_line_bound() {
    // Sparse: zeros and no line break, one byte over the bound, never held whole.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("corpus-00000.txt");
    std::fs::File::create(&p)
        .unwrap()
        .set_len(crate::corpus::MAX_LINE_BYTES as u64 + 1)
        .unwrap();
    let mut blocks = 0;
    let e = for_each_block(&p, |_| {
        blocks += 1;
        ControlFlow::Continue(())
    })
    .unwrap_err();
    assert_eq!(blocks, 0);
    assert!(
        e.to_string()
            .contains("corpus-00000.txt: a line longer than 64 MiB"),
        "{e}"
    );
}
