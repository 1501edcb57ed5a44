//! Untrusted data files (SECURITY.md: data files are not trusted), each through the smallest
//! stage that reads it: a `baseline` stage (`methods: [majority]`, so the reader is most of
//! its work) on task files copied from `datasets/fixtures`, the `clean` stage on a corpus, the
//! `vocab` stage on a vocabulary. Every case asserts the exit code and a message naming the
//! file (and line, where there is one), runs under the suite's address-space limit, and ends
//! with `verify` clean and nothing outside the workspace changed ([`Case::finish`]).

use super::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/datasets/fixtures");

fn fixture(rel: &str) -> Vec<u8> {
    std::fs::read(Path::new(FIXTURES).join(rel)).unwrap()
}

/// A baseline stage `b` on `d/train.tsv`, `d/dev.tsv`, `d/test.tsv` (ChnSentiCorp's layout,
/// `label \t text_a` under a header), with no bad row allowed unless `extra` says otherwise.
fn single_text_case(train: &[u8], extra: &str) -> Case {
    let c = Case::new(&format!(
        "stages:\n  b:\n    kind: baseline\n    inputs: [\"d/*\"]\n    params:\n      task: chnsenticorp\n      train: d/train.tsv\n      dev: d/dev.tsv\n      test: d/test.tsv\n      methods: [majority]\n{extra}"
    ));
    c.ws.write("d/train.tsv", train);
    c.ws.write("d/dev.tsv", fixture("chnsenticorp/dev.tsv"));
    c.ws.write("d/test.tsv", fixture("chnsenticorp/test.tsv"));
    c
}

const NO_BAD_ROWS: &str = "      max_bad_fraction: 0\n";

/// The fixture's train file with `row` (a data line, no line end) inserted as line 3.
fn train_with_row(row: &[u8]) -> Vec<u8> {
    let text = fixture("chnsenticorp/train.tsv");
    let mut lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    lines.insert(2, row);
    lines.join(&b'\n')
}

/// Runs `b` and asserts it fails (exit 1) naming `d/train.tsv:3` and `needle`.
fn bad_row_fails(row: &[u8], needle: &str) {
    let c = single_text_case(&train_with_row(row), NO_BAD_ROWS);
    let out = c.expect(&["run"], 1, "d/train.tsv:3");
    expect(&out, 1, needle);
    c.finish();
}

fn metrics(c: &Case) -> Value {
    let v = c.ws.json(&["status"], 0);
    let dir = PathBuf::from(stage_json(&v, "b")["artifact"].as_str().unwrap());
    serde_json::from_slice(&std::fs::read(dir.join("metrics.json")).unwrap()).unwrap()
}

/// What the baselines found, without their timings.
fn results(c: &Case) -> Value {
    let mut m = metrics(c)["baselines"].clone();
    for b in m.as_array_mut().unwrap() {
        b.as_object_mut().unwrap().remove("seconds");
    }
    m
}

#[test]
fn data_tsv_invalid_utf8_row_names_its_line() {
    bad_row_fails(b"0\t\xff\xfe\xfd broken", "UTF-8");
}

#[test]
fn data_tsv_wrong_column_count_names_its_line() {
    bad_row_fails(b"0\tone\ttwo\tthree", "column");
    bad_row_fails(b"just one column", "column");
}

#[test]
fn data_tsv_unknown_label_names_its_line() {
    bad_row_fails(b"7\t\xe5\xa5\xbd", "label");
    bad_row_fails(b"\x00\t\xe5\xa5\xbd", "label");
}

#[test]
fn data_tsv_nul_bytes_in_a_text_are_text() {
    let c = single_text_case(&train_with_row(b"1\ta\x00b\x00c"), NO_BAD_ROWS);
    c.run(&["run"]).expect_code(0);
    c.finish();
}

#[test]
fn data_tsv_bad_rows_within_the_allowed_fraction_are_skipped_and_counted() {
    let c = single_text_case(&train_with_row(b"0\t\xff"), "      max_bad_fraction: 0.5\n");
    c.run(&["run"]).expect_code(0);
    let m = metrics(&c).to_string();
    assert!(m.contains("invalid_utf8"), "{m}");
    c.finish();
}

#[test]
fn data_tsv_crlf_and_a_bom_read_as_plain_lines() {
    let plain = single_text_case(&fixture("chnsenticorp/train.tsv"), NO_BAD_ROWS);
    plain.run(&["run"]).expect_code(0);
    let want = results(&plain);
    plain.finish();
    let crlf: Vec<u8> = String::from_utf8(fixture("chnsenticorp/train.tsv"))
        .unwrap()
        .replace('\n', "\r\n")
        .into_bytes();
    let mut bom = b"\xEF\xBB\xBF".to_vec();
    bom.extend(&crlf);
    for train in [crlf, bom] {
        let c = single_text_case(&train, NO_BAD_ROWS);
        c.run(&["run"]).expect_code(0);
        assert_eq!(results(&c), want);
        c.finish();
    }
}

#[test]
fn data_tsv_one_huge_line_is_read_in_bounded_memory() {
    // 16 MB of text in one row: memory is the line, not a multiple of the file per copy.
    let mut row = b"1\t".to_vec();
    row.extend("好".repeat(16 << 20 >> 2).as_bytes());
    let c = single_text_case(&train_with_row(&row), NO_BAD_ROWS);
    let t0 = Instant::now();
    c.run(&["run"]).expect_code(0);
    assert!(t0.elapsed() < Duration::from_secs(40), "{:?}", t0.elapsed());
    c.finish();
}

#[test]
fn data_tsv_a_million_tiny_rows_are_read_in_bounded_memory() {
    let mut train = b"label\ttext_a\n".to_vec();
    for i in 0..1_000_000 {
        train.extend(if i % 2 == 0 { b"0\tx\n" } else { b"1\ty\n" });
    }
    let c = single_text_case(&train, NO_BAD_ROWS);
    let t0 = Instant::now();
    c.run(&["run"]).expect_code(0);
    assert!(t0.elapsed() < Duration::from_secs(40), "{:?}", t0.elapsed());
    assert_eq!(metrics(&c)["protocol"]["train"]["examples"], 1_000_000);
    c.finish();
}

#[test]
fn data_tsv_header_only_or_empty_file_is_refused() {
    for train in [&b"label\ttext_a\n"[..], b""] {
        let c = single_text_case(train, NO_BAD_ROWS);
        c.expect(&["run"], 1, "d/train.tsv");
        c.finish();
    }
}

#[test]
fn data_tsv_directory_in_place_of_a_file_is_refused() {
    let c = single_text_case(b"", NO_BAD_ROWS);
    std::fs::remove_file(c.ws.path("d/train.tsv")).unwrap();
    std::fs::create_dir_all(c.ws.path("d/train.tsv/inside")).unwrap();
    c.expect(&["run"], 1, "d/train.tsv");
    c.finish();
}

/// A baseline stage `b` on a reading-comprehension file `d/dev.json` of `task`.
fn reading_case(task: &str, json: &[u8]) -> Case {
    let c = Case::new(&format!(
        "stages:\n  b:\n    kind: baseline\n    inputs: [d/dev.json]\n    params:\n      task: {task}\n      train: d/dev.json\n      dev_fraction: 0.2\n      test_fraction: 0.2\n"
    ));
    c.ws.write("d/dev.json", json);
    c
}

#[test]
fn data_squad_deeply_nested_json_is_refused_with_its_position() {
    let deep = format!(
        "{{\"version\": \"v1\", \"data\": [{}{}]}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let c = reading_case("cmrc2018", deep.as_bytes());
    let out = c.expect(&["run"], 1, "d/dev.json");
    expect(&out, 1, "line 1");
    c.finish();
}

#[test]
fn data_squad_wrong_types_are_refused_naming_the_file() {
    for json in [
        r#"{"data": 5}"#,
        r#"{"data": [{"paragraphs": "not a list"}]}"#,
        r#"{"data": [{"paragraphs": [{"context": 3, "qas": []}]}]}"#,
        r#"{"data": [{"paragraphs": [{"context": "上海", "qas": [{"id": "q", "question": "哪里", "answers": [{"text": "上海", "answer_start": "zero"}]}]}]}]}"#,
        r#"[1, 2, 3]"#,
    ] {
        let c = reading_case("cmrc2018", json.as_bytes());
        c.expect(&["run"], 1, "d/dev.json");
        c.finish();
    }
}

#[test]
fn data_squad_huge_file_is_streamed() {
    // 40 MB of whitespace before the data: read as a stream, not held whole.
    let mut json = b"{\"version\": \"v1\",".to_vec();
    json.extend(vec![b' '; 40 << 20]);
    json.extend(&fixture("cmrc2018/dev.json")[1..]);
    let c = reading_case("cmrc2018", &json);
    c.run(&["run"]).expect_code(0);
    c.finish();
}

#[test]
fn data_squad_truncated_file_names_its_position() {
    let full = fixture("cmrc2018/dev.json");
    let c = reading_case("cmrc2018", &full[..full.len() / 2]);
    c.expect(&["run"], 1, "d/dev.json");
    c.finish();
}

#[test]
fn data_c3_deeply_nested_and_wrong_types_are_refused() {
    let deep = format!("[{}{}]", "[".repeat(100_000), "]".repeat(100_000));
    for json in [
        deep.as_str(),
        r#"{"not": "a list"}"#,
        r#"[[["男：你好"], [{"question": "问", "choice": "not a list", "answer": "x"}], "0-0"]]"#,
        r#"[[["男：你好"], [{"question": "问", "choice": ["甲", "乙"], "answer": "丙"}], "0-0"]]"#,
        r#"[[5, 6, 7]]"#,
    ] {
        let c = reading_case("c3", json.as_bytes());
        c.expect(&["run"], 1, "d/dev.json");
        c.finish();
    }
}

/// `clean` on `corpus/x.txt` (one document per line).
fn corpus_case(corpus: &[u8]) -> Case {
    let c = Case::new(
        "stages:\n  clean:\n    kind: clean\n    inputs: [\"corpus/*.txt\"]\n    params: {format: lines}\n",
    );
    c.ws.write("corpus/x.txt", corpus);
    c
}

#[test]
fn data_corpus_with_one_50_mb_line_is_cleaned_in_bounded_memory() {
    let mut corpus = fixture("corpus/lines/docs.txt");
    corpus.extend("这是一个很长的句子。".repeat((50 << 20) / 30).as_bytes());
    corpus.push(b'\n');
    let c = corpus_case(&corpus);
    let t0 = Instant::now();
    c.run(&["run"]).expect_code(0);
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
    c.finish();
}

#[test]
fn data_corpus_invalid_utf8_and_nul_lines_are_counted_not_fatal() {
    let mut corpus = fixture("corpus/lines/docs.txt");
    corpus.extend(b"\xff\xfe not text\n\x00\x00\x00\n");
    let c = corpus_case(&corpus);
    c.run(&["run"]).expect_code(0);
    c.finish();
}

/// `clean` on the fixture corpus, then `vocab` adopting `vocab.txt`.
fn vocab_case(vocab: &[u8]) -> Case {
    let c = Case::new(
        "stages:\n  clean:\n    kind: clean\n    inputs: [\"corpus/*.txt\"]\n    params: {format: lines}\n  vocab:\n    kind: vocab\n    deps: [clean]\n    inputs: [vocab.txt]\n    params: {source: file, file: vocab.txt}\n",
    );
    c.ws.write("corpus/x.txt", fixture("corpus/lines/docs.txt"));
    c.ws.write("vocab.txt", vocab);
    c
}

#[test]
fn data_vocab_with_a_100_kb_token_is_adopted_whole() {
    let mut vocab = fixture("vocab/vocab.txt");
    let token = "长".repeat(100_000 / 3);
    vocab.extend(token.as_bytes());
    vocab.push(b'\n');
    let c = vocab_case(&vocab);
    let out = c.run(&["run", "--json"]);
    out.expect_code(0);
    let dir = PathBuf::from(
        stage_json(&out.json(), "vocab")["artifact"]
            .as_str()
            .unwrap(),
    );
    let adopted = std::fs::read_to_string(dir.join("vocab.txt")).unwrap();
    assert_eq!(adopted.lines().last(), Some(token.as_str()));
    c.finish();
}

#[test]
fn data_vocab_invalid_utf8_or_empty_is_refused() {
    let mut bad = fixture("vocab/vocab.txt");
    bad.extend(b"\xff\xfe\n");
    for vocab in [bad, Vec::new()] {
        let c = vocab_case(&vocab);
        c.expect(&["run"], 1, "vocab.txt");
        c.finish();
    }
}

/// A baseline stage `b` with `params` (flow mapping text) on files written into `d/`.
fn files_case(params: &str, files: &[(&str, Vec<u8>)]) -> Case {
    let c = Case::new(&format!(
        "stages:\n  b:\n    kind: baseline\n    inputs: [\"d/*\"]\n    params: {{{params}}}\n"
    ));
    for (name, bytes) in files {
        c.ws.write(&format!("d/{name}"), bytes);
    }
    c
}

/// `bytes` with line `n` (from 1) replaced by `line`.
fn with_line(bytes: Vec<u8>, n: usize, line: &str) -> Vec<u8> {
    let text = String::from_utf8(bytes).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[n - 1] = line;
    format!("{}\n", lines.join("\n")).into_bytes()
}

#[test]
fn data_pair_tsv_with_a_header_where_none_is_expected_names_line_1() {
    let mut train = b"text_a\ttext_b\tlabel\n".to_vec();
    train.extend(fixture("lcqmc/dev.tsv"));
    let c = files_case(
        "task: lcqmc, train: d/train.tsv, dev_fraction: 0.1, test: d/test.tsv, methods: [majority]",
        &[
            ("train.tsv", train),
            ("test.tsv", fixture("lcqmc/test.tsv")),
        ],
    );
    c.expect(&["run"], 1, "d/train.tsv:1: looks like a header");
    c.finish();
}

#[test]
fn data_tagging_row_with_fewer_tags_than_characters_names_its_line() {
    let train = with_line(
        fixture("msra_ner/dev.tsv"),
        3,
        "今 天 天 气 很 好 。\tO O O O O O",
    );
    let c = files_case(
        "task: msra_ner, train: d/train.tsv, dev_fraction: 0.1, test: d/test.tsv, max_bad_fraction: 0",
        &[
            ("train.tsv", train),
            ("test.tsv", fixture("msra_ner/test.tsv")),
        ],
    );
    c.expect(
        &["run"],
        1,
        "d/train.tsv:3 tag_count: 7 characters but 6 tags",
    );
    c.finish();
}

#[test]
fn data_choice_jsonl_bad_lines_name_their_line() {
    let choice = |train: Vec<u8>| {
        files_case(
            "task: choice, train: d/train.jsonl, dev_fraction: 0.1, test: d/test.jsonl, max_bad_fraction: 0",
            &[
                ("train.jsonl", train),
                ("test.jsonl", fixture("choice/test.jsonl")),
            ],
        )
    };
    for (line, needle) in [
        (
            r#"{"prompt": "x", "choices": ["#,
            "d/train.jsonl:3 invalid_json",
        ),
        (
            r#"{"prompt": "x", "choices": ["a", "b", "c"], "answer": 0}"#,
            "d/train.jsonl:3: 3 choices, but d/train.jsonl:1 has 4",
        ),
        (
            r#"{"prompt": "x", "choices": ["a", "b", "c", "d"], "answer": 9}"#,
            "d/train.jsonl:3",
        ),
        (
            r#"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]"#,
            "d/train.jsonl:3",
        ),
    ] {
        let c = choice(with_line(fixture("choice/train.jsonl"), 3, line));
        c.expect(&["run"], 1, needle);
        c.finish();
    }
}
