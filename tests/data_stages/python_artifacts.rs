//! The artifacts as Python users open them: the shards with pyarrow and polars, the tokenizer
//! with Hugging Face `tokenizers` (each skipped with a note when python3 lacks the package).

use super::*;

/// Whether `python3` can import every one of `modules`; prints a skip note when not.
fn python_has(modules: &[&str], test: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {}", modules.join(", "))])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!(
            "note: python3 cannot import {}: skipping {test}",
            modules.join(", ")
        );
    }
    ok
}

/// Runs `python3 -c SCRIPT ARGS...`, asserts success and parses the last stdout line as JSON.
fn python_json(script: &str, args: &[&Path]) -> Value {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("starting python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Python check failed\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("python printed no JSON ({e}):\n{stdout}\n{stderr}"))
}

const SHARD_SCRIPT: &str = r#"
import json, sys
import pyarrow as pa
import pyarrow.ipc as ipc

path = sys.argv[1]
reader = ipc.open_file(path)
schema = reader.schema
fields = [[f.name, str(f.type)] for f in schema]
assert schema.field("input_ids").type == pa.list_(pa.int32())
assert schema.field("token_type_ids").type == pa.list_(pa.int8())
meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
t = reader.read_all()
ids = t.column("input_ids").to_pylist()
types = t.column("token_type_ids").to_pylist()
lengths = t.column("length").to_pylist()
pos = t.column("masked_positions").to_pylist()
mids = t.column("masked_ids").to_pylist()
labels = t.column("sentence_order_label").to_pylist()
assert t.column("input_ids").null_count == 0
bad = []
for i in range(t.num_rows):
    if lengths[i] != len(ids[i]) or len(types[i]) != len(ids[i]):
        bad.append((i, "length"))
    if pos[i] != sorted(set(pos[i])) or any(p <= 0 or p >= lengths[i] for p in pos[i]):
        bad.append((i, "positions"))
    if len(mids[i]) != len(pos[i]):
        bad.append((i, "masked_ids"))
    if labels[i] not in (0, 1):
        bad.append((i, "label"))
out = {
    "fields": fields,
    "meta": meta,
    "rows": t.num_rows,
    "batches": reader.num_record_batches,
    "tokens": sum(lengths),
    "max_length": max(lengths),
    "masked": sum(len(p) for p in pos),
    "max_masked": max(len(p) for p in pos),
    "swapped": sum(labels),
    "first_ids": sorted(set(r[0] for r in ids)),
    "last_ids": sorted(set(r[-1] for r in ids)),
    "bad": bad[:10],
}
try:
    import polars as pl
except ImportError:
    out["polars"] = None
else:
    df = pl.read_ipc(path)
    out["polars"] = {
        "height": df.height,
        "columns": df.columns,
        "dtypes": [str(d) for d in df.dtypes],
        "tokens": int(df["length"].sum()),
        "swapped": int(df["sentence_order_label"].cast(pl.Int64).sum()),
    }
print(json.dumps(out))
"#;

#[test]
fn mask_shards_open_in_pyarrow_with_the_documented_schema() {
    if !python_has(&["pyarrow"], "the pyarrow check of the mask shards") {
        return;
    }
    let ws = default_ws();
    let v = ws.run_ok(&["mask", "--set", &format!("data={}", fixtures())]);
    let mask = artifact(&v, "mask");
    let mm = metrics(&mask);
    for split in ["train", "eval"] {
        let m = &mm[split];
        let files: Vec<&str> = m["shards"]
            .as_array()
            .expect("the split's shards")
            .iter()
            .map(|f| f.as_str().expect("a file name"))
            .collect();
        // rows, tokens, masked positions, swapped pairs over the split's shards (training: one
        // a masking pass), against the split's metrics.
        let mut totals = [0u64; 4];
        for file in &files {
            let py = python_json(SHARD_SCRIPT, &[&mask.join(file)]);
            check_shard(file, split, &py);
            for (total, key) in totals
                .iter_mut()
                .zip(["rows", "tokens", "masked", "swapped"])
            {
                *total += u64_of(&py[key]);
            }
        }
        let [rows, tokens, masked, swapped] = totals;
        assert_eq!(json!(rows), m["instances"], "{split}");
        assert_eq!(json!(tokens), m["tokens"], "{split}");
        assert_eq!(json!(masked), m["masked_tokens"], "{split}");
        let swapped = swapped as f64 / rows as f64;
        assert!(
            (swapped - f64_of(&m["sop_swapped_fraction"])).abs() < 1e-4,
            "{split}: {swapped} swapped, metrics say {}",
            m["sop_swapped_fraction"]
        );
    }
}

/// One shard as pyarrow (and polars, where installed) read it: the documented schema and
/// metadata, no row breaking it, `[CLS]` first and `[SEP]` last in every row, the limits kept.
fn check_shard(file: &str, split: &str, py: &Value) {
    assert_eq!(
        py["fields"],
        json!([
            ["input_ids", "list<item: int32>"],
            ["token_type_ids", "list<item: int8>"],
            ["length", "int32"],
            ["masked_positions", "list<item: int32>"],
            ["masked_ids", "list<item: int32>"],
            ["sentence_order_label", "int8"]
        ]),
        "{file}"
    );
    let meta = &py["meta"];
    assert_eq!(meta["format"], "albert-pretraining-instances", "{meta}");
    assert_eq!(meta["version"], "1", "{meta}");
    assert_eq!(meta["max_seq_length"], "128", "{meta}");
    assert_eq!(meta["max_predictions_per_seq"], "20", "{meta}");
    assert_eq!(meta["vocab_size"], "1291", "{meta}");
    assert_eq!(meta["seed"], "12345", "{meta}");
    assert_eq!(py["bad"], json!([]), "{file}: rows breaking the schema");
    assert!(u64_of(&py["max_length"]) <= 128, "{file}: {py}");
    assert!(u64_of(&py["max_masked"]) <= 20, "{file}: {py}");
    assert_eq!(
        py["first_ids"],
        json!([2]),
        "{file}: every row starts with [CLS]"
    );
    assert_eq!(
        py["last_ids"],
        json!([3]),
        "{file}: every row ends with [SEP]"
    );
    if split == "train" {
        // 1,024-row record batches.
        let rows = u64_of(&py["rows"]);
        assert_eq!(u64_of(&py["batches"]), rows.div_ceil(1024), "{file}");
    }
    match &py["polars"] {
        Value::Null => println!("note: polars is not installed: skipped the polars check"),
        pl => {
            assert_eq!(pl["height"], py["rows"], "{file}: polars");
            assert_eq!(pl["tokens"], py["tokens"], "{file}: polars");
            assert_eq!(pl["swapped"], py["swapped"], "{file}: polars");
            assert_eq!(
                pl["dtypes"],
                json!([
                    "List(Int32)",
                    "List(Int8)",
                    "Int32",
                    "List(Int32)",
                    "List(Int32)",
                    "Int8"
                ]),
                "{file}: polars"
            );
        }
    }
}

/// Sentences the tokenizer must handle: full-width forms, English words (whole and as `##`
/// pieces), digits, emoji, characters outside the vocabulary, accents, a literal [MASK].
/// Documents are separated by blank lines; each has one or two sentences.
const TOKENIZER_DOCS: &[&[&str]] = &[
    &["我爱北京天安门。", "今天天气很好，我们去公园散步吧？"],
    &["ＡＬＢＥＲＴ模型在２０１９年发布，效果很好！"],
    &[
        "Hello World! 这是一个 mixed 句子，包含 English words 和数字 12345。",
        "unaffable 和 tokenization 会被切成 ## 片段。",
    ],
    &[
        "表情符号😀很常见👍，也会出现在语料里。",
        "生僻字龘、靐、齉多半是未知字符。",
    ],
    &[
        "Café naïve résumé，全角标点：“你好”！（括号）【方括号】",
        "价格￥９９.５元，电话１３８００１３８０００。",
    ],
    &[
        "WiFi 密码是 abc-123_XYZ，内存 2048 兆，流量 12mb，请勿外传。",
        "这句话里有一个 [MASK] 标记和一个 ＷｉＦｉ。",
    ],
    &[
        "日本語のテキストも少し混ざっている。",
        "한국어 문장도 있습니다。",
    ],
];

const TOKENIZER_SCRIPT: &str = r#"
import json, sys
import pyarrow.ipc as ipc
from tokenizers import Tokenizer

tok = Tokenizer.from_file(sys.argv[1])
corpus = open(sys.argv[2], encoding="utf-8").read()
docs = [d.split("\n") for d in corpus.strip("\n").split("\n\n")]
encoded = [[tok.encode(s, add_special_tokens=False).ids for s in d] for d in docs]
framed = tok.encode(docs[0][0]).ids
t = ipc.open_file(sys.argv[3]).read_all()
rows = [
    {k: t.column(k)[i].as_py() for k in ["input_ids", "token_type_ids", "masked_positions", "masked_ids", "sentence_order_label"]}
    for i in range(t.num_rows)
]
print(json.dumps({"docs": encoded, "framed": framed, "rows": rows}))
"#;

/// Undoes the masking of a shard row and returns its two segments in document order.
fn unmasked_segments(row: &Value, cls: u64, sep: u64) -> (Vec<u64>, Vec<u64>) {
    let ids = |k: &str| -> Vec<u64> {
        row[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    };
    let mut input = ids("input_ids");
    for (p, id) in ids("masked_positions").into_iter().zip(ids("masked_ids")) {
        input[p as usize] = id;
    }
    let types = ids("token_type_ids");
    let a_len = types.iter().filter(|&&t| t == 0).count() - 2;
    assert_eq!(input[0], cls, "row does not start with [CLS]: {row}");
    assert_eq!(
        input[a_len + 1],
        sep,
        "segment A does not end with [SEP]: {row}"
    );
    assert_eq!(
        *input.last().unwrap(),
        sep,
        "row does not end with [SEP]: {row}"
    );
    let a = input[1..=a_len].to_vec();
    let b = input[a_len + 2..input.len() - 1].to_vec();
    if row["sentence_order_label"] == 1 {
        (b, a)
    } else {
        (a, b)
    }
}

#[test]
fn tokenizer_json_artifact_encodes_in_python_as_the_mask_stage_did() {
    if !python_has(
        &["tokenizers", "pyarrow"],
        "the Hugging Face tokenizers check of tokenizer.json",
    ) {
        return;
    }
    // A `cmd` stage named clean hands the sentences to mask untouched (no normalisation), so
    // that the Rust tokenizer sees the full-width forms, emoji and accents themselves.
    let yaml = r#"
stages:
  clean:
    cmd: cp text/docs.txt $PIPELINE_OUT/corpus-00000.txt
    inputs: [text/docs.txt]
  vocab:
    kind: vocab
    deps: [clean]
    inputs: [vocab.txt]
    params: {source: file, file: vocab.txt, lowercase: true}
  mask:
    kind: mask
    deps: [clean, vocab]
    params: {max_seq_length: 256, dupe_factor: 1, eval_fraction: 0, short_seq_prob: 0}
"#;
    let ws = Ws::new(yaml);
    let corpus: String = TOKENIZER_DOCS
        .iter()
        .map(|d| d.join("\n") + "\n")
        .collect::<Vec<_>>()
        .join("\n");
    ws.write("text/docs.txt", &corpus);

    let mut vocabs = vec![PathBuf::from(format!("{}/vocab/vocab.txt", fixtures()))];
    match real_data_root() {
        Some(root) if root.join("vocab/vocab.txt").is_file() => {
            vocabs.push(root.join("vocab/vocab.txt"))
        }
        _ => println!("note: checking the fixture vocabulary only"),
    }
    for vocab_file in &vocabs {
        let vocab_text = read(vocab_file);
        ws.write("vocab.txt", &vocab_text);
        let tokens: Vec<&str> = vocab_text.lines().collect();
        let id = |t: &str| tokens.iter().position(|l| *l == t).unwrap() as u64;
        let (cls, sep, unk) = (id("[CLS]"), id("[SEP]"), id("[UNK]"));
        for lowercase in ["true", "false"] {
            let what = format!("{} lowercase={lowercase}", vocab_file.display());
            let v = ws.run_ok(&["mask", "--set", &format!("vocab.lowercase={lowercase}")]);
            let vocab = artifact(&v, "vocab");
            let mask = artifact(&v, "mask");
            let py = python_json(
                TOKENIZER_SCRIPT,
                &[
                    &vocab.join("tokenizer.json"),
                    &ws.path("text/docs.txt"),
                    &mask.join("shard-00000.arrow"),
                ],
            );
            let docs: Vec<Vec<Vec<u64>>> = serde_json::from_value(py["docs"].clone()).unwrap();
            assert_eq!(docs.len(), TOKENIZER_DOCS.len(), "{what}");
            let rows = py["rows"].as_array().unwrap();
            assert_eq!(rows.len(), docs.len(), "{what}: one instance per document");
            for ((row, sentences), text) in rows.iter().zip(&docs).zip(TOKENIZER_DOCS) {
                let (a, b) = unmasked_segments(row, cls, sep);
                let theirs: Vec<u64> = sentences.concat();
                let ours: Vec<u64> = [a.clone(), b.clone()].concat();
                assert_eq!(ours, theirs, "{what}: {text:?}");
                if let [s1, s2] = &sentences[..] {
                    assert_eq!((&a, &b), (s1, s2), "{what}: segments of {text:?}");
                }
            }
            // [CLS] … [SEP] from the tokenizer.json's post-processor.
            let framed: Vec<u64> = serde_json::from_value(py["framed"].clone()).unwrap();
            assert_eq!(framed, [vec![cls], docs[0][0].clone(), vec![sep]].concat());
            // The cases are exercised: out-of-vocabulary characters, and `##` pieces.
            let all: Vec<u64> = docs.concat().concat();
            assert!(all.contains(&unk), "{what}: no [UNK] at all");
            let pieces = all
                .iter()
                .filter(|&&i| tokens[i as usize].starts_with("##"))
                .count();
            assert!(pieces > 0, "{what}: no ## pieces");
        }
    }
}
