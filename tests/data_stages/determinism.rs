//! The data stages give the same bytes whatever the thread count.

use super::*;

/// A corpus of `docs` documents (one a line) of 2–6 sentences drawn from the fixture corpus
/// with a fixed xorshift generator: more documents than one block of clean (2,000) or mask
/// (2,048), so that several blocks are processed in parallel.
fn synthetic_corpus(docs: usize) -> String {
    let text = read(format!("{}/corpus/lines/docs.txt", fixtures()));
    let pool: Vec<String> = text
        .split(['。', '！', '？', '\n'])
        .map(str::trim)
        .filter(|s| s.chars().count() >= 8 && !s.contains('<') && !s.contains('&'))
        .map(|s| format!("{s}。"))
        .collect();
    assert!(pool.len() > 100, "only {} fixture sentences", pool.len());
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut out = String::new();
    for _ in 0..docs {
        let n = 2 + (next() % 5) as usize;
        for _ in 0..n {
            out.push_str(&pool[(next() % pool.len() as u64) as usize]);
        }
        out.push('\n');
    }
    out
}

const TRAINED_PIPELINE: &str = r#"
stages:
  clean:
    kind: clean
    inputs: ["data/corpus/*/*.txt"]
    params: {format: lines}
  vocab:
    kind: vocab
    deps: [clean]
    params: {source: train, model: wordpiece, size: 3000, min_frequency: 1}
  mask:
    kind: mask
    deps: [clean, vocab]
    params: {max_seq_length: 64, dupe_factor: 2, eval_fraction: 0.05, seed: 99}
"#;

#[test]
fn outputs_do_not_depend_on_the_thread_count() {
    let corpus = synthetic_corpus(5_000);
    let mut runs = Vec::new();
    for threads in ["1", "2"] {
        let ws = Ws::new(TRAINED_PIPELINE);
        ws.write("data/corpus/gen/docs.txt", &corpus);
        let v = run_ok_env(&ws, &["mask"], &[("RAYON_NUM_THREADS", threads)]);
        let mut digests = BTreeMap::new();
        for s in ["clean", "vocab", "mask"] {
            assert_status(&v, s, "ran");
            digests.insert(s, manifest_files(&artifact(&v, s)));
        }
        let mm = metrics(&artifact(&v, "mask"));
        assert!(
            u64_of(&mm["documents"]) > 2_048,
            "the corpus should span several mask blocks: {mm:#}"
        );
        assert!(u64_of(&mm["train"]["instances"]) > 5_000, "{mm:#}");
        assert!(
            manifest_files(&artifact(&v, "mask")).len() >= 3,
            "no shards: {mm:#}"
        );
        runs.push((threads, digests, ws));
    }
    let (_, one, _) = &runs[0];
    let (_, two, _) = &runs[1];
    for s in ["clean", "vocab", "mask"] {
        assert_eq!(
            one[s], two[s],
            "`{s}` wrote different files with RAYON_NUM_THREADS=1 and =2"
        );
    }
}
