//! ALBERT's ablations as matrix axes, end to end on the fixtures: task text (clean's
//! `add_task_text`), masking (mask's `whole_word`), the SOP objective (pretrain's `sop`) and
//! cross-layer sharing (pretrain's `share_type`) each expand the stages after them, and the
//! report's ablations table has a row per pretraining run and fine-tuning stage, with what it
//! changes against the main run.

mod common;

use common::*;
use serde_json::Value;

fn repo() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

fn yaml() -> String {
    format!(
        r#"vars:
  data: {repo}/datasets/fixtures
stages:
  clean:
    kind: clean
    inputs: ["${{vars.data}}/corpus/*/*.txt", "${{vars.data}}/chnsenticorp/*.tsv"]
    matrix:
      add_task_text: [false, true]
    params:
      format: lines
      formats: {{"*/corpus/paragraphs/*": paragraphs, "*/corpus/wiki/*": wiki}}
      task_text:
        - {{task: chnsenticorp, train: "${{vars.data}}/chnsenticorp/train.tsv",
           dev: "${{vars.data}}/chnsenticorp/dev.tsv", test: "${{vars.data}}/chnsenticorp/test.tsv"}}
  vocab:
    kind: vocab
    deps: [clean]
    inputs: ["${{vars.data}}/vocab/vocab.txt"]
    params: {{source: file, file: "${{vars.data}}/vocab/vocab.txt"}}
  mask:
    kind: mask
    deps: [clean, vocab]
    matrix:
      whole_word: [true, false]
    params: {{max_seq_length: 64, max_predictions_per_seq: 10, dupe_factor: 1, eval_fraction: 0.1}}
  pretrain:
    kind: pretrain
    deps: [mask, vocab]
    matrix:
      sop: [true, false]
    params: {{model: tiny, hidden_size: 32, num_attention_heads: 2, intermediate_size: 64,
             embedding_size: 16, num_hidden_layers: 2, batch_size: 8, steps: 3,
             eval_interval: 3, log_interval: 1}}
  finetune:
    kind: finetune
    deps: [pretrain]
    inputs: ["${{vars.data}}/chnsenticorp/*.tsv"]
    matrix:
      init: [pretrained, random]
    params:
      task: chnsenticorp
      train: ${{vars.data}}/chnsenticorp/train.tsv
      dev: ${{vars.data}}/chnsenticorp/dev.tsv
      test: ${{vars.data}}/chnsenticorp/test.tsv
      epochs: 1
      batch_size: 16
      max_seq_length: 64
  report:
    kind: report
    deps: [clean, pretrain, finetune]
    params: {{publish_dir: "", main_pretrain: "pretrain@add_task_text=false,sop=true,whole_word=true",
             targets: [{{threshold: {{metric: mlm_accuracy, at_least: 0.3}}}}]}}
"#,
        repo = repo()
    )
}

fn json_file(path: impl AsRef<std::path::Path>) -> Value {
    serde_json::from_str(&read(path)).unwrap()
}

#[test]
fn each_ablation_is_a_matrix_axis_and_a_row_of_the_report() {
    let ws = Ws::new(&yaml());
    let v = ws.run_ok(&["report"]);
    let pretrains: Vec<String> = instances(&v)
        .into_iter()
        .filter(|i| i.starts_with("pretrain@"))
        .collect();
    assert_eq!(pretrains.len(), 8, "{pretrains:?}");

    // MLM only: no SOP figure anywhere in the artifact's metrics.
    let mlm_only = "pretrain@add_task_text=false,sop=false,whole_word=true";
    let dir = artifact(&v, mlm_only);
    let m = json_file(dir.join("metrics.json"));
    assert_eq!(m["sop"], false);
    // Its lineage: the shards and the corpus they were cut from.
    assert_eq!(
        m["mask_instance"],
        "mask@add_task_text=false,whole_word=true"
    );
    assert_eq!(m["clean_instance"], "clean@add_task_text=false");
    assert!(m["eval"].get("sop_accuracy").is_none(), "{}", m["eval"]);
    assert!(m["eval"]["mlm_accuracy"].is_number());
    assert!(!read(dir.join("metrics.jsonl")).contains("sop_"));
    // The masking recipe comes from the shards.
    let char_masked = json_file(
        artifact(&v, "pretrain@add_task_text=false,sop=true,whole_word=false").join("metrics.json"),
    );
    assert_eq!(char_masked["masking"]["whole_word"], false);
    assert_eq!(char_masked["sop"], true);
    assert!(char_masked["eval"]["sop_accuracy"].is_number());

    let report = artifact(&v, "report");
    let t = json_file(report.join("ablations.json"));
    let rows = t["rows"].as_array().unwrap();
    assert_eq!(
        rows.len(),
        8,
        "one row per pretraining run (one fine-tuning stage)"
    );
    let row = |pretrain: &str| -> &Value {
        rows.iter()
            .find(|r| r["pretrain"] == pretrain)
            .unwrap_or_else(|| panic!("no row for {pretrain}: {t:#}"))
    };
    let main = row("pretrain@add_task_text=false,sop=true,whole_word=true");
    assert_eq!(main["changes"], "main");
    assert_eq!(main["task_text"], "none");
    assert_eq!(row(mlm_only)["changes"], "SOP");
    assert_eq!(row(mlm_only)["objective"], "MLM only");
    assert_eq!(
        row("pretrain@add_task_text=true,sop=true,whole_word=false")["changes"],
        "masking, task text"
    );
    assert_eq!(
        row("pretrain@add_task_text=true,sop=true,whole_word=true")["task_text"],
        "chnsenticorp"
    );
    for r in rows {
        assert_eq!(r["seeds"], 1);
        assert_eq!(r["random_seeds"], 1);
        assert!(r["effect"].is_number(), "{r}");
        assert_eq!(r["beyond_2sd"], "–", "one seed has no sd");
    }
    let readme = read(report.join("README.md"));
    assert!(readme.contains("## Ablations"), "{readme}");
    assert!(
        readme.contains("Pretraining budget: `pretrain@"),
        "{readme}"
    );
    // The targets paragraph comes first, under the title.
    let second = readme.lines().nth(2).unwrap();
    assert!(
        second.starts_with("**Targets of this experiment, read off the rows of this report (main pretraining run `pretrain@add_task_text=false,sop=true,whole_word=true`: "),
        "{second}"
    );
}
