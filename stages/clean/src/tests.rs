//! Stage-level tests: `CleanStage::run` on files in a temporary workspace.

use std::path::{Path, PathBuf};

use indicatif::ProgressBar;
use serde_json::{Value, json};

use super::*;

struct Run {
    result: anyhow::Result<()>,
    out: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Run {
    fn metrics(&self) -> Value {
        let text = fs::read_to_string(self.out.join("metrics.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    fn shard(&self, i: usize) -> String {
        fs::read_to_string(self.out.join(format!("corpus-{i:05}.txt"))).unwrap()
    }

    fn shards(&self) -> Vec<String> {
        let mut names: Vec<_> = fs::read_dir(&self.out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("corpus-"))
            .collect();
        names.sort();
        names
            .iter()
            .map(|n| fs::read_to_string(self.out.join(n)).unwrap())
            .collect()
    }

    fn log_text(&self) -> String {
        fs::read_to_string(self.log.join("clean.log")).unwrap_or_default()
    }
}

/// Runs the stage on `inputs` (absolute paths) with `root` as the workspace root.
fn run_on(root: &Path, inputs: &[PathBuf], params: Value) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let work = dir.path().join("work");
    let log = dir.path().join("log");
    for d in [&out, &work, &log] {
        fs::create_dir_all(d).unwrap();
    }
    let params = params.as_object().cloned().unwrap_or_default();
    let progress = ProgressBar::hidden();
    let ctx = StageContext {
        instance: "clean",
        stage: "clean",
        params: &params,
        spec: &Value::Null,
        root,
        out_dir: &out,
        work_dir: &work,
        log_dir: &log,
        inputs,
        deps: &[],
        progress: &progress,
    };
    let result = CleanStage.run(&ctx);
    Run {
        result,
        out,
        log,
        _dir: dir,
    }
}

/// Writes `files` (name → bytes) into a fresh workspace and runs the stage on them.
fn run_files(files: &[(&str, &[u8])], params: Value) -> (Run, tempfile::TempDir) {
    let ws = tempfile::tempdir().unwrap();
    let mut inputs = Vec::new();
    for (name, bytes) in files {
        let p = ws.path().join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, bytes).unwrap();
        inputs.push(p);
    }
    (run_on(ws.path(), &inputs, params), ws)
}

const REVIEW_A: &str = "这家酒店的位置很好，离地铁站只有五分钟，房间干净整洁，服务员也很热情。";
const REVIEW_B: &str = "这本书的内容太浅了，作者讲的道理网上都能查到，读完以后觉得很失望。";
const REVIEW_C: &str = "手机用了一个月，电池很耐用，拍照效果也不错，就是屏幕有点容易沾指纹。";

#[test]
fn cleans_all_three_formats_into_sentences_and_documents() {
    let lines = format!(
        "{REVIEW_A}\n{REVIEW_B}\n{REVIEW_A}\n這個國家的歷史很長，博物館裡有很多珍貴的文物。\n好\n价格是１２８元，质量<br>还可以&amp;推荐购买！\n"
    );
    let paragraphs = "春天来了。河边的柳树发出了新芽！\n孩子们在田野里放风筝。\n\n\n图书馆周末开放到晚上九点。借书需要带上借书证。\n\n";
    let wiki = "<doc id=\"1\" url=\"u\" title=\"数学\">\n数学\n\n数学是研究数量、结构以及空间等概念的一门学科。\n</doc>\n";
    let (run, _ws) = run_files(
        &[
            ("corpus/b_reviews/docs.txt", lines.as_bytes()),
            ("corpus/a_novel/book.txt", paragraphs.as_bytes()),
            ("corpus/c_wiki/wiki.txt", wiki.as_bytes()),
        ],
        json!({"format": "auto"}),
    );
    run.result.as_ref().unwrap();
    // Input order is the sorted path order: a_novel, b_reviews, c_wiki.
    assert_eq!(
        run.shard(0),
        "春天来了。\n河边的柳树发出了新芽！\n孩子们在田野里放风筝。\n\
         \n图书馆周末开放到晚上九点。\n借书需要带上借书证。\n\
         \n这家酒店的位置很好，离地铁站只有五分钟，房间干净整洁，服务员也很热情。\n\
         \n这本书的内容太浅了，作者讲的道理网上都能查到，读完以后觉得很失望。\n\
         \n这个国家的历史很长，博物馆里有很多珍贵的文物。\n\
         \n价格是128元，质量 还可以&推荐购买！\n\
         \n数学是研究数量、结构以及空间等概念的一门学科。\n"
    );
    let m = run.metrics();
    assert_eq!(m["files"], 3);
    assert_eq!(m["documents_in"], 9);
    assert_eq!(m["documents_out"], 7);
    assert_eq!(m["sentences_out"], 10);
    assert_eq!(m["drops"]["duplicate"], 1);
    assert_eq!(m["drops"]["short_document"], 1);
    assert_eq!(m["drops"]["short_sentence"], 1);
    assert_eq!(m["shards"], 1);
    assert_eq!(
        m["formats"],
        json!({
            "corpus/a_novel/book.txt": "paragraphs",
            "corpus/b_reviews/docs.txt": "lines",
            "corpus/c_wiki/wiki.txt": "wiki",
        })
    );
    let out_chars: u64 = run.shard(0).chars().filter(|c| *c != '\n').count() as u64;
    assert_eq!(m["chars_out"], out_chars);
    assert!(
        run.log_text()
            .contains("corpus/c_wiki/wiki.txt: format auto → wiki")
    );
}

#[test]
fn near_duplicates_are_dropped_and_the_first_is_kept() {
    // One character changed in 68: Jaccard of the 5-shingle sets 59/69 = 0.86.
    let long = format!("{REVIEW_A}{REVIEW_B}");
    let near = long.replace("五分钟", "六分钟");
    let text = format!("{long}\n{REVIEW_C}\n{near}\n");
    let (run, _ws) = run_files(&[("docs.txt", text.as_bytes())], json!({"format": "lines"}));
    run.result.as_ref().unwrap();
    assert_eq!(
        run.shard(0),
        format!("{REVIEW_A}\n{REVIEW_B}\n\n{REVIEW_C}\n")
    );
    assert_eq!(run.metrics()["drops"]["near_duplicate"], 1);
    // A stricter threshold, or near-duplicate search off: kept.
    for params in [
        json!({"format": "lines", "near_dup_threshold": 0.9}),
        json!({"format": "lines", "near_dup": false}),
    ] {
        let (run, _ws) = run_files(&[("docs.txt", text.as_bytes())], params);
        run.result.as_ref().unwrap();
        assert_eq!(run.metrics()["documents_out"], 3);
    }
}

#[test]
fn format_rules_override_detection() {
    // Detected as paragraphs; the rule says lines.
    let text = format!("{REVIEW_A}\n\n{REVIEW_B}\n{REVIEW_C}\n");
    let (run, _ws) = run_files(
        &[("data/reviews/docs.txt", text.as_bytes())],
        json!({"formats": {"*/reviews/*": "lines"}}),
    );
    run.result.as_ref().unwrap();
    assert_eq!(run.metrics()["documents_out"], 3);
    assert_eq!(run.metrics()["formats"]["data/reviews/docs.txt"], "lines");
}

#[test]
fn invalid_utf8_lines_are_logged_with_file_and_line() {
    let mut bytes = format!("{REVIEW_A}\n").into_bytes();
    bytes.extend_from_slice(b"\xFF\xFE broken\n");
    bytes.extend_from_slice(format!("{REVIEW_B}\n").as_bytes());
    let (run, _ws) = run_files(&[("d/bad.txt", &bytes)], json!({"format": "lines"}));
    run.result.as_ref().unwrap();
    assert_eq!(run.metrics()["invalid_utf8_lines"], 1);
    assert_eq!(run.metrics()["documents_out"], 2);
    assert!(
        run.log_text().contains("d/bad.txt:2: invalid UTF-8"),
        "{}",
        run.log_text()
    );
}

#[test]
fn an_empty_result_is_an_error_that_says_why() {
    let text = format!("短句。\n也很短。\n{REVIEW_A}\n{REVIEW_A}\n");
    let (run, _ws) = run_files(
        &[("docs.txt", text.as_bytes())],
        json!({"format": "lines", "min_doc_chars": 40}),
    );
    let e = run.result.unwrap_err().to_string();
    // (Duplicates are looked for among the documents that pass the filters only.)
    assert!(
        e.contains("all 4 documents were dropped: 4 too short (min_doc_chars = 40"),
        "{e}"
    );

    let (run, _ws) = run_files(&[("empty.txt", b"\n\n")], json!({}));
    let e = run.result.unwrap_err().to_string();
    assert!(e.contains("hold no documents"), "{e}");

    let (run, _ws) = run_files(&[("bad.txt", b"\xFF\n\xFE\n")], json!({}));
    let e = run.result.unwrap_err().to_string();
    assert!(e.contains("2 lines were not valid UTF-8"), "{e}");

    let run = run_on(Path::new("/"), &[], json!({}));
    assert!(
        run.result
            .unwrap_err()
            .to_string()
            .contains("no input files")
    );
}

#[test]
fn a_missing_input_names_the_file() {
    let run = run_on(
        Path::new("/"),
        &[PathBuf::from("/nonexistent/corpus.txt")],
        json!({}),
    );
    let e = format!("{:#}", run.result.unwrap_err());
    assert!(e.contains("/nonexistent/corpus.txt"), "{e}");
}

/// Many distinct documents: numbered, with varied wording.
fn many_docs(n: usize) -> String {
    let subjects = [
        "小王",
        "老李",
        "我的邻居",
        "那位老师",
        "一个学生",
        "这家公司",
    ];
    let verbs = ["买了", "看到了", "写了", "修好了", "借走了"];
    let objects = ["一辆自行车", "两本小说", "三张地图", "一台旧电脑", "几盆花"];
    let mut s = String::new();
    for i in 0..n {
        s.push_str(&format!(
            "第{i}天，{}在{}号街{}{}。后来他把它送给了编号{}的朋友，大家都很高兴。\n",
            subjects[i % 6],
            i * 37 % 101,
            verbs[i / 6 % 5],
            objects[i / 30 % 5],
            i * 7919 % 100_003
        ));
    }
    s
}

#[test]
fn shards_split_at_document_boundaries_and_join_to_the_unsharded_output() {
    let text = many_docs(300);
    let (one, _ws) = run_files(&[("docs.txt", text.as_bytes())], json!({"format": "lines"}));
    one.result.as_ref().unwrap();
    let (many, _ws) = run_files(
        &[("docs.txt", text.as_bytes())],
        json!({"format": "lines", "shard_bytes": 4096}),
    );
    many.result.as_ref().unwrap();
    let shards = many.shards();
    assert!(shards.len() > 3, "{} shards", shards.len());
    assert_eq!(many.metrics()["shards"], shards.len());
    for s in &shards {
        assert!(!s.starts_with('\n') && s.ends_with("。\n"));
        assert!(!s.ends_with("\n\n"));
    }
    assert_eq!(shards.join("\n"), one.shard(0));
}

#[test]
fn output_does_not_depend_on_the_number_of_threads() {
    let mut text = many_docs(5000);
    // Duplicates far apart, across block boundaries.
    text.push_str(&many_docs(50));
    let ws = tempfile::tempdir().unwrap();
    let p = ws.path().join("docs.txt");
    fs::write(&p, &text).unwrap();
    let outputs: Vec<(String, String)> = [1, 3]
        .into_iter()
        .map(|threads| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let run = pool.install(|| run_on(ws.path(), std::slice::from_ref(&p), json!({})));
            run.result.as_ref().unwrap();
            (
                run.shard(0),
                fs::read_to_string(run.out.join("metrics.json")).unwrap(),
            )
        })
        .collect();
    assert_eq!(outputs[0], outputs[1]);
    let m: Value = serde_json::from_str(&outputs[0].1).unwrap();
    assert_eq!(m["drops"]["duplicate"], 50);
    assert_eq!(m["documents_out"], 5000);
}

/// The repository's own fixture corpus (datasets/fixtures/corpus).
#[test]
fn the_fixture_corpus_cleans_as_documented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().unwrap();
    let mut inputs: Vec<PathBuf> = [
        "lines/docs.txt",
        "paragraphs/paragraphs.txt",
        "wiki/wiki.txt",
    ]
    .iter()
    .map(|f| root.join("datasets/fixtures/corpus").join(f))
    .collect();
    inputs.retain(|p| p.exists());
    if inputs.len() < 3 {
        eprintln!("note: fixture corpus incomplete, test skipped");
        return;
    }
    let run = run_on(&root, &inputs, json!({}));
    run.result.as_ref().unwrap();
    let m = run.metrics();
    assert_eq!(
        m["formats"],
        json!({
            "datasets/fixtures/corpus/lines/docs.txt": "lines",
            "datasets/fixtures/corpus/paragraphs/paragraphs.txt": "paragraphs",
            "datasets/fixtures/corpus/wiki/wiki.txt": "wiki",
        })
    );
    assert!(m["drops"]["duplicate"].as_u64().unwrap() >= 1, "{m}");
    assert!(m["drops"]["near_duplicate"].as_u64().unwrap() >= 1, "{m}");
    assert_eq!(m["invalid_utf8_lines"], 0);
    let out = run.shard(0);
    for bad in [
        "<br", "&nbsp;", "&amp;", "１", "Ａ", "\u{200B}", "\u{3000}", "歷史", "國",
    ] {
        assert!(!out.contains(bad), "{bad:?} left in the output");
    }
    // Every line is a sentence of bounded length, documents separated by one blank line.
    assert!(!out.contains("\n\n\n"));
    for line in out.lines() {
        assert!(line.chars().count() <= 256);
        assert!(line.is_empty() || line.chars().count() >= 2);
    }
}

/// The real corpus, when present: a wiki and a paragraphs file (a few seconds even unoptimised).
#[test]
fn real_corpus_sample_when_present() {
    let data = std::env::var_os("PIPELINE_DATA_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets"));
    let files: Vec<PathBuf> = [
        "corpus/zhwiki_sample/zhwiki_AA_wiki_00.txt",
        "corpus/misc/news_zh_1.txt",
    ]
    .iter()
    .map(|f| data.join(f))
    .collect();
    if !files.iter().all(|f| f.exists()) {
        eprintln!(
            "note: {} not found, real-corpus test skipped",
            data.display()
        );
        return;
    }
    let run = run_on(&data, &files, json!({}));
    run.result.as_ref().unwrap();
    let m = run.metrics();
    assert_eq!(
        m["formats"]["corpus/zhwiki_sample/zhwiki_AA_wiki_00.txt"],
        "wiki"
    );
    assert_eq!(m["formats"]["corpus/misc/news_zh_1.txt"], "paragraphs");
    assert!(m["documents_out"].as_u64().unwrap() >= 60, "{m}");
    let out = run.shard(0);
    assert!(out.contains("数学是利用符号语言研究数量"));
    assert!(!out.contains("數學"));
    assert!(!out.contains("<doc"));
}

/// The whole shared corpus (about 4 s in the test profile, so not run by default:
/// `cargo test -p stage-clean -- --ignored`): every file read in the format its README gives.
#[test]
#[ignore]
fn whole_real_corpus_when_present() {
    let data = std::env::var_os("PIPELINE_DATA_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets"));
    let mut files: Vec<PathBuf> = glob::glob(&data.join("corpus/*/*.txt").to_string_lossy())
        .map(|p| p.flatten().collect())
        .unwrap_or_default();
    files.retain(|p| !p.ends_with("SOURCE.txt"));
    if files.is_empty() {
        eprintln!(
            "note: {} not found, real-corpus test skipped",
            data.display()
        );
        return;
    }
    let run = run_on(&data, &files, json!({}));
    run.result.as_ref().unwrap();
    let m = run.metrics();
    for (file, format) in m["formats"].as_object().unwrap() {
        let expected = if file.contains("zhwiki_sample") {
            "wiki"
        } else if file.contains("four_classic_novels")
            || file.contains("wiki_mrc_contexts")
            || file.ends_with("news_zh_1.txt")
        {
            "paragraphs"
        } else {
            "lines"
        };
        assert_eq!(format, expected, "{file}");
    }
    assert!(m["drops"]["duplicate"].as_u64().unwrap() > 10_000, "{m}");
    assert!(m["drops"]["near_duplicate"].as_u64().unwrap() > 0, "{m}");
    assert!(m["documents_out"].as_u64().unwrap() > 30_000, "{m}");
}
