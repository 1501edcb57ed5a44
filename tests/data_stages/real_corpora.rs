//! The data stages on the real corpora when `PIPELINE_DATA_ROOT` points at the shared datasets
//! (skipped with a note otherwise).

use super::*;

#[test]
fn the_real_corpora_mask_with_sane_statistics() {
    let Some(root) = real_data_root() else {
        return;
    };
    let root = root.canonicalize().unwrap();
    // What the default inputs glob selects: corpus/*/*.txt but SOURCE.txt, and but the
    // ChnSentiCorp reviews (every ChnSentiCorp test text: pipeline.yaml leaves them out).
    let mut expected_files = 0;
    for source in std::fs::read_dir(root.join("corpus")).unwrap() {
        let source = source.unwrap().path();
        if !source.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&source).unwrap() {
            let f = f.unwrap().path();
            if f.is_file()
                && f.extension().is_some_and(|e| e == "txt")
                && !f.ends_with("SOURCE.txt")
                && !f.ends_with("misc/chnsenticorp_reviews.txt")
            {
                expected_files += 1;
            }
        }
    }
    let vocab_lines: Vec<String> = read(root.join("vocab/vocab.txt"))
        .lines()
        .map(String::from)
        .collect();
    let id = |t: &str| vocab_lines.iter().position(|l| l == t).unwrap();

    let ws = default_ws();
    let data = format!("data={}", root.display());
    let v = ws.run_ok(&["mask", "--set", &data, "--set", "mask.dupe_factor=1"]);
    for s in ["clean", "vocab", "mask"] {
        assert_status(&v, s, "ran");
    }
    let cm = metrics(&artifact(&v, "clean"));
    let vm = metrics(&artifact(&v, "vocab"));
    let mm = metrics(&artifact(&v, "mask"));
    println!("clean: {cm}\nvocab: {vm}\nmask: {mm}");

    assert_eq!(u64_of(&cm["files"]), expected_files, "{cm:#}");
    let docs = u64_of(&cm["documents_out"]);
    assert!(docs > 1_000, "{cm:#}");
    assert!(
        u64_of(&cm["chars_out"]) > u64_of(&cm["chars_in"]) / 2,
        "clean dropped more than half the text: {cm:#}"
    );

    assert_eq!(vm["vocab_size"], vocab_lines.len(), "{vm:#}");
    assert_eq!(
        vm["special_ids"],
        json!([
            id("[PAD]"),
            id("[UNK]"),
            id("[CLS]"),
            id("[SEP]"),
            id("[MASK]")
        ])
    );
    assert!(f64_of(&vm["unk_rate"]) < 0.05, "{vm:#}");

    assert_eq!(mm["documents"], docs, "{mm:#}");
    assert_eq!(mm["sentences"], cm["sentences_out"], "{mm:#}");
    assert_eq!(mm["dupe_factor"], 1);
    assert!(f64_of(&mm["unk_rate"]) < 0.05, "{mm:#}");
    // pipeline.yaml holds out eval_fraction 0.05 of the documents.
    assert_within(
        "eval_documents share",
        u64_of(&mm["eval_documents"]) as f64 / docs as f64,
        0.04,
        0.06,
    );
    let train = &mm["train"];
    let instances = u64_of(&train["instances"]);
    assert!(instances > docs, "{mm:#}");
    assert_within("train.mask_rate", f64_of(&train["mask_rate"]), 0.14, 0.16);
    assert_within(
        "train.sop_swapped_fraction",
        f64_of(&train["sop_swapped_fraction"]),
        0.48,
        0.52,
    );
    assert_within(
        "train.replaced_by_mask",
        f64_of(&train["replaced_by_mask"]),
        0.78,
        0.82,
    );
    assert_within(
        "train.replaced_by_random",
        f64_of(&train["replaced_by_random"]),
        0.08,
        0.12,
    );
    assert_within("train.kept", f64_of(&train["kept"]), 0.08, 0.12);
    assert_within(
        "train.mean_length",
        f64_of(&train["mean_length"]),
        64.0,
        128.0,
    );
    let h = &train["ngram_histogram"];
    let (n1, n2, n3) = (u64_of(&h["1"]), u64_of(&h["2"]), u64_of(&h["3"]));
    assert!(n1 > n2 && n2 > n3 && n3 > 0, "n-gram histogram {h}");
    // Every shard listed exists, and nothing else.
    let mask = artifact(&v, "mask");
    let mut shards: Vec<String> = train["shards"]
        .as_array()
        .unwrap()
        .iter()
        .chain(mm["eval"]["shards"].as_array().unwrap())
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    shards.sort();
    let on_disk: Vec<String> = listing(&mask)
        .into_iter()
        .filter(|n| n.ends_with(".arrow"))
        .collect();
    assert_eq!(shards, on_disk);
    for s in &on_disk {
        assert_arrow_file(&mask.join(s));
    }
}
