//! The default `pipeline.yaml` on the bundled fixtures: its artifacts and metrics, caching,
//! and early cutoff when a stage's output did not change.

use super::*;

#[test]
fn default_pipeline_masks_the_fixtures_caches_and_cuts_off_early() {
    let ws = default_ws();
    let data = format!("data={}", fixtures());
    let set = |extra: &[&str]| {
        let mut a = vec!["mask", "--set", data.as_str()];
        a.extend_from_slice(extra);
        ws.run_ok(&a)
    };

    // First run: everything runs.
    let first = set(&[]);
    assert_eq!(
        first["counts"],
        json!({"ran": 3, "cached": 0, "failed": 0, "skipped": 0}),
        "{first:#}"
    );
    let clean = artifact(&first, "clean");
    let vocab = artifact(&first, "vocab");
    let mask = artifact(&first, "mask");

    // clean: one corpus shard, one sentence a line, blank line between documents; the counts
    // of datasets/README.md (1 exact duplicate, 1 near-duplicate, 1 too-short document).
    assert_eq!(
        listing(&clean),
        ["MANIFEST.json", "corpus-00000.txt", "metrics.json"]
    );
    let cm = metrics(&clean);
    assert_eq!(cm["files"], 3, "{cm:#}");
    assert_eq!(cm["documents_in"], 130, "{cm:#}");
    assert_eq!(cm["documents_out"], 127, "{cm:#}");
    assert_eq!(cm["drops"]["duplicate"], 1, "{cm:#}");
    assert_eq!(cm["drops"]["near_duplicate"], 1, "{cm:#}");
    assert_eq!(cm["drops"]["short_document"], 1, "{cm:#}");
    assert_eq!(cm["invalid_utf8_lines"], 0, "{cm:#}");
    assert_eq!(cm["shards"], 1, "{cm:#}");
    let corpus = read(clean.join("corpus-00000.txt"));
    let docs: Vec<&str> = corpus.split("\n\n").collect();
    assert_eq!(docs.len() as u64, u64_of(&cm["documents_out"]));
    let sentences = corpus.lines().filter(|l| !l.is_empty()).count() as u64;
    assert_eq!(sentences, u64_of(&cm["sentences_out"]), "{cm:#}");
    let chars: usize = corpus.lines().map(|l| l.chars().count()).sum();
    assert_eq!(chars as u64, u64_of(&cm["chars_out"]), "{cm:#}");
    // Normalised: full-width digits, HTML and Traditional characters are gone.
    for bad in [
        "２０２４",
        "<br>",
        "&nbsp;",
        "這個週末",
        "\u{200b}",
        "\u{3000}",
    ] {
        assert!(!corpus.contains(bad), "clean output still holds {bad:?}");
    }
    assert!(
        corpus.contains("2024年5月18日"),
        "full-width digits not folded"
    );
    assert!(corpus.contains("这个周末"), "Traditional not converted");

    // vocab: the fixture vocab.txt adopted as is, a tokenizer.json, coverage statistics.
    assert_eq!(
        listing(&vocab),
        [
            "MANIFEST.json",
            "metrics.json",
            "tokenizer.json",
            "vocab.txt"
        ]
    );
    let fixture_vocab = read(format!("{}/vocab/vocab.txt", fixtures()));
    assert_eq!(read(vocab.join("vocab.txt")), fixture_vocab);
    let tj = json_file(vocab.join("tokenizer.json"));
    assert_eq!(tj["model"]["type"], "WordPiece", "tokenizer.json model");
    assert_eq!(
        tj["model"]["vocab"].as_object().map(|m| m.len()),
        Some(1291),
        "tokenizer.json vocab size"
    );
    let vm = metrics(&vocab);
    assert_eq!(vm["source"], "file");
    assert_eq!(vm["vocab_size"], 1291);
    assert_eq!(vm["special_ids"], json!([0, 1, 2, 3, 4]));
    assert_eq!(
        vm["unk_tokens"], 0,
        "the fixture vocab covers its corpus: {vm:#}"
    );
    assert!(u64_of(&vm["tokens"]) > 9_000, "{vm:#}");

    // mask: one training shard per masking pass (dupe_factor 5), one eval shard, metrics
    // consistent with clean and vocab.
    let train_shards: Vec<String> = (0..5).map(|i| format!("shard-{i:05}.arrow")).collect();
    let mut files = vec!["MANIFEST.json", "eval-00000.arrow", "metrics.json"];
    files.extend(train_shards.iter().map(String::as_str));
    assert_eq!(listing(&mask), files);
    for file in train_shards
        .iter()
        .map(String::as_str)
        .chain(["eval-00000.arrow"])
    {
        assert_arrow_file(&mask.join(file));
    }
    let mm = metrics(&mask);
    assert_eq!(mm["documents"], cm["documents_out"], "{mm:#}");
    assert_eq!(mm["sentences"], cm["sentences_out"], "{mm:#}");
    assert_eq!(mm["corpus_tokens"], vm["tokens"], "{mm:#}");
    assert_eq!(mm["dupe_factor"], 5);
    assert_eq!(mm["max_seq_length"], 128);
    assert_eq!(mm["train"]["shards"], json!(train_shards));
    assert_eq!(mm["eval"]["shards"], json!(["eval-00000.arrow"]));
    let eval_docs = u64_of(&mm["eval_documents"]);
    assert!((1..=10).contains(&eval_docs), "eval_documents {eval_docs}");
    let train = &mm["train"];
    let instances = u64_of(&train["instances"]);
    // Five passes over ~125 documents of ~80 tokens: several hundred instances.
    assert!((400..2_000).contains(&instances), "{mm:#}");
    assert!(u64_of(&mm["eval"]["instances"]) >= 1, "{mm:#}");
    assert_within("train.mask_rate", f64_of(&train["mask_rate"]), 0.13, 0.16);
    assert_within(
        "train.mean_length",
        f64_of(&train["mean_length"]),
        20.0,
        128.0,
    );
    assert_within(
        "train.sop_swapped_fraction",
        f64_of(&train["sop_swapped_fraction"]),
        0.4,
        0.6,
    );
    assert_within(
        "train.replaced_by_mask",
        f64_of(&train["replaced_by_mask"]),
        0.75,
        0.85,
    );
    assert_eq!(
        u64_of(&train["tokens"]),
        (f64_of(&train["mean_length"]) * instances as f64).round() as u64,
        "{mm:#}"
    );
    let h = &train["ngram_histogram"];
    let (n1, n2, n3) = (u64_of(&h["1"]), u64_of(&h["2"]), u64_of(&h["3"]));
    assert!(n1 > n2 && n2 > n3 && n3 > 0, "n-gram histogram {h}");
    // The manifest lists exactly the files of the artifact.
    for dir in [&clean, &vocab, &mask] {
        let mut files: Vec<String> = manifest_files(dir).into_keys().collect();
        files.push("MANIFEST.json".into());
        files.sort();
        assert_eq!(files, listing(dir), "manifest of {}", dir.display());
    }

    // Second run: all cached.
    let v = set(&[]);
    assert_eq!(
        v["counts"],
        json!({"ran": 0, "cached": 3, "failed": 0, "skipped": 0}),
        "{v:#}"
    );

    // A mask param: only mask re-runs, into other shards.
    let v = set(&["--set", "mask.seed=7"]);
    assert_status(&v, "clean", "cached");
    assert_status(&v, "vocab", "cached");
    assert_status(&v, "mask", "ran");
    assert_reason(&v, "mask", "param seed changed 12345 → 7");
    let seeded = artifact(&v, "mask");
    assert_ne!(
        manifest_files(&seeded)["shard-00000.arrow"],
        manifest_files(&mask)["shard-00000.arrow"],
        "another seed gave the same shard"
    );
    assert_eq!(metrics(&seeded)["documents"], mm["documents"]);

    // A clean param that does not change clean's output (the one near-duplicate is still
    // dropped at 0.7): clean re-runs, vocab and mask stay cached (early cutoff).
    let v = set(&["--set", "clean.near_dup_threshold=0.7"]);
    assert_status(&v, "clean", "ran");
    assert_reason(&v, "clean", "param near_dup_threshold changed 0.8 → 0.7");
    assert_status(&v, "vocab", "cached");
    assert_status(&v, "mask", "cached");
    let clean07 = artifact(&v, "clean");
    assert_ne!(clean07, clean, "a new fingerprint, a new artifact");
    assert_eq!(manifest_files(&clean07), manifest_files(&clean));
    assert!(same_path(&artifact(&v, "mask"), &mask));

    // One that does (near-duplicates kept): everything downstream re-runs.
    let v = set(&["--set", "clean.near_dup=false"]);
    assert_status(&v, "clean", "ran");
    assert_reason(&v, "clean", "param near_dup added");
    let cm2 = metrics(&artifact(&v, "clean"));
    assert_eq!(cm2["drops"]["near_duplicate"], 0, "{cm2:#}");
    assert_eq!(cm2["documents_out"], 128, "{cm2:#}");
    assert_status(&v, "vocab", "ran");
    assert_reason(&v, "vocab", "dep clean produced new output");
    assert_status(&v, "mask", "ran");
    assert_reason(&v, "mask", "dep clean produced new output");
    assert_eq!(metrics(&artifact(&v, "mask"))["documents"], 128);
}
