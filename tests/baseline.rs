//! The `baseline` stage through the binary on the bundled fixtures: its metrics on the LCQMC-
//! and XNLI-shaped files, the report's baseline rows (with the data paths written relative to
//! the workspace, though the data var is absolute here), and bad input as file:line errors.

mod common;

use common::*;
use serde_json::Value;

fn repo() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

/// Baselines of both fixture protocols, and a report that reads nothing else.
fn yaml() -> String {
    format!(
        r#"
vars:
  data: {repo}/datasets/fixtures
stages:
  baseline_lcqmc:
    kind: baseline
    inputs: ["${{vars.data}}/lcqmc/*.tsv"]
    params:
      task: lcqmc
      train: ${{vars.data}}/lcqmc/dev.tsv
      dev_fraction: 0.1
      test: ${{vars.data}}/lcqmc/test.tsv
  baseline_xnli:
    kind: baseline
    inputs: ["${{vars.data}}/nli_extra/*/*.tsv", "${{vars.data}}/xnli_zh/*.tsv"]
    params:
      task: xnli
      train:
        - {{path: "${{vars.data}}/nli_extra/cmnli/dev.tsv", format: cmnli}}
        - {{path: "${{vars.data}}/nli_extra/ocnli/dev.tsv", format: ocnli}}
      dev_fraction: 0.1
      eval:
        xnli_dev: ${{vars.data}}/xnli_zh/dev.tsv
        xnli_test: ${{vars.data}}/xnli_zh/test.tsv
      ngram_max: 3
  report:
    kind: report
    deps: [baseline_lcqmc, baseline_xnli]
    params: {{publish_dir: out, bench_dir: ""}}
"#,
        repo = repo()
    )
}

fn baseline<'a>(m: &'a Value, name: &str) -> &'a Value {
    m["baselines"]
        .as_array()
        .and_then(|b| b.iter().find(|x| x["name"] == name))
        .unwrap_or_else(|| panic!("no baseline {name}: {m:#}"))
}

#[test]
fn baselines_run_on_the_fixtures_and_the_report_shows_them_with_relative_paths() {
    let ws = Ws::new(&yaml());
    let v = ws.run_ok(&["report"]);
    let m: Value =
        serde_json::from_str(&read(artifact(&v, "baseline_lcqmc").join("metrics.json"))).unwrap();
    assert_eq!(m["task"], "lcqmc");
    assert_eq!(m["protocol"]["train"]["examples"], 90);
    let names: Vec<&str> = m["baselines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["majority", "overlap", "length", "ngram_lr"]);
    let test = |name: &str| {
        baseline(&m, name)["eval"]["test"]["accuracy"]
            .as_f64()
            .unwrap()
    };
    // The fixture's test set is balanced; its positives are paraphrases sharing most
    // characters, its negatives unrelated questions: overlap separates them.
    assert_eq!(test("majority"), 0.5);
    assert!(test("overlap") >= 0.9, "{m:#}");
    assert_eq!(baseline(&m, "overlap")["eval"]["test"]["examples"], 80);
    assert!(
        baseline(&m, "ngram_lr")["fit"]["features"]
            .as_u64()
            .unwrap()
            > 0
    );

    let x: Value =
        serde_json::from_str(&read(artifact(&v, "baseline_xnli").join("metrics.json"))).unwrap();
    let h = baseline(&x, "hypothesis_lr");
    assert_eq!(h["eval"]["xnli_test"]["examples"], 60);
    assert!(h["eval"]["xnli_dev"]["confusion"]["counts"].is_array());
    assert_eq!(h["fit"]["ngram_max"], 3);

    // The report: baseline rows in both tables, data paths relative to the workspace.
    let lcqmc: Value = serde_json::from_str(&read(ws.path("out/lcqmc.json"))).unwrap();
    let rows = lcqmc["rows"].as_array().unwrap();
    let ours: Vec<&Value> = rows.iter().filter(|r| r["source"] == "baseline").collect();
    assert_eq!(ours.len(), 4, "{lcqmc:#}");
    assert_eq!(ours[1]["train_data"], "lcqmc/dev.tsv");
    let readme = read(ws.path("out/README.md"));
    assert!(
        readme.contains("Baselines (`baseline_lcqmc`): fitted on 90 examples"),
        "{readme}"
    );
    assert!(
        readme.contains("Pair length (characters of both texts"),
        "{readme}"
    );
    for f in ["README.md", "lcqmc.json", "xnli.json", "xnli.csv"] {
        let text = read(ws.path(&format!("out/{f}")));
        // `../../work/main/…` is the relative form of `/work/main/…`; only that may hold it.
        let absolute = text
            .match_indices(repo())
            .any(|(i, _)| !text[..i].ends_with(".."));
        assert!(!absolute, "{f} holds the absolute data path:\n{text}");
    }
    assert!(
        read(ws.path("out/xnli.json")).contains("datasets/fixtures/nli_extra/cmnli/dev.tsv"),
        "the relative path is there instead"
    );
}

#[test]
fn bad_baseline_input_is_a_file_and_line_error() {
    let ws = Ws::new(&yaml().replace("train: ${vars.data}/lcqmc/dev.tsv", "train: bad.tsv"));
    let mut rows: String = (0..20)
        .map(|i| format!("问题{i}\t问题{i}吗\t1\n"))
        .collect();
    rows.push_str("一个\t两个\t7\n");
    ws.write("bad.tsv", rows);
    let out = ws.run(&["run", "baseline_lcqmc"]);
    out.expect_code(1).assert_no_panic();
    assert!(
        out.stdout.contains("bad.tsv:21") && out.stdout.contains("max_bad_fraction"),
        "{}",
        out.describe()
    );

    // Bad params fail before anything runs, at the stage's line in pipeline.yaml.
    let ws = Ws::new(&yaml().replace("ngram_max: 3", "ngram_max: 9"));
    let out = ws.run(&["run", "baseline_xnli"]);
    out.expect_code(2).assert_no_panic();
    assert!(
        out.stderr.contains("pipeline.yaml:13:3")
            && out.stderr.contains("ngram_max = 9 must be between 1 and 4"),
        "{}",
        out.describe()
    );
    let ws = Ws::new(&yaml().replace("ngram_max: 3", "methods: [bow]"));
    let out = ws.run(&["run", "baseline_xnli"]);
    out.expect_code(2).assert_no_panic();
    assert!(out.stderr.contains("unknown method"), "{}", out.describe());
}
