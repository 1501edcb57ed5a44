//! `pipeline_tasks::cmrc_eval` against CMRC 2018's official evaluation script itself
//! (ymcui/cmrc2018 `squad-style-data/cmrc2018_evaluate.py`, Python 2), run unmodified under
//! Python 2.7 with nltk 3.4.5 (the last nltk for Python 2, contemporary with the script) on
//! the shared dev set: every gold answer as a prediction, and perturbed predictions (truncated,
//! extended into the context, characters swapped or replaced, case and spacing changed,
//! other spans of the context). F1, EM and the token segmentation must agree on every case, and
//! the corpus figures of the script's `evaluate` to 1e-9.
//!
//! One patch, made by the harness and not to the file: `nltk.word_tokenize` is called with
//! `preserve_line=True`, because its sentence splitter needs nltk's `punkt` model, which is
//! data to download (not here); see `cmrc_eval`'s module doc for what that changes.
//!
//! Needs (else skips with a note): `CMRC2018_EVALUATE` = the path of the official script
//! (it is not vendored: fetch it from github.com/ymcui/cmrc2018), a Python 2.7 with nltk 3.4.5
//! (`CMRC2018_PYTHON`, default `python2`; e.g. `pip install --target DIR nltk==3.4.5` and
//! `PYTHONPATH=DIR`), and `cmrc2018/dev.json` in the shared data.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pipeline_tasks::cmrc_eval::{self, GoldQuestion};
use proptest::prelude::Rng;
use proptest::test_runner::TestRunner;
use serde_json::{Value, json};

/// Imports the official script with word_tokenize patched (see the module doc), then scores
/// each `[answers, prediction]` case, and runs its `evaluate` on the dev file.
const HARNESS: &str = r#"
# -*- coding: utf-8 -*-
import imp, json, sys
import nltk
_word_tokenize = nltk.word_tokenize
nltk.word_tokenize = lambda text: _word_tokenize(text, preserve_line=True)
official = imp.load_source("cmrc2018_evaluate", sys.argv[1])
request = json.load(sys.stdin)
cases = [
    [official.calc_f1_score(answers, pred), official.calc_em_score(answers, pred),
     official.mixed_segmentation(pred, rm_punc=True)]
    for answers, pred in request["cases"]
]
with open(sys.argv[2]) as f:
    gold = json.load(f)
F1, EM, TOTAL, SKIP = official.evaluate(gold, request["predictions"])
sys.stdout.write(json.dumps({"cases": cases, "f1": F1, "em": EM, "total": TOTAL, "skip": SKIP}))
"#;

/// `cmrc2018/dev.json` of the shared data root (`PIPELINE_DATA_ROOT`, else
/// `<repo>/../shared/datasets`).
fn dev_file() -> PathBuf {
    std::env::var_os("PIPELINE_DATA_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets"))
        .join("cmrc2018/dev.json")
}

/// The official script and a Python 2 that can import nltk, or why not.
fn reference() -> Result<(PathBuf, PathBuf), String> {
    let script = std::env::var_os("CMRC2018_EVALUATE")
        .map(PathBuf::from)
        .ok_or("CMRC2018_EVALUATE (the official cmrc2018_evaluate.py) is not set")?;
    if !script.is_file() {
        return Err(format!("{} does not exist", script.display()));
    }
    let py = std::env::var_os("CMRC2018_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| "python2".into());
    let ok = Command::new(&py)
        .args(["-c", "import sys, nltk; assert sys.version_info[0] == 2"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        return Err(format!("{} is not a Python 2 with nltk", py.display()));
    }
    if !dev_file().is_file() {
        return Err(format!("{} is missing", dev_file().display()));
    }
    Ok((py, script))
}

/// The dev questions with their context.
fn dev_questions(dev: &Value) -> Vec<(GoldQuestion, Vec<char>)> {
    let mut out = Vec::new();
    for article in dev["data"].as_array().unwrap() {
        for para in article["paragraphs"].as_array().unwrap() {
            let context: Vec<char> = para["context"].as_str().unwrap().chars().collect();
            for qa in para["qas"].as_array().unwrap() {
                let answers = qa["answers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a["text"].as_str().unwrap().to_string())
                    .collect();
                let id = qa["id"].as_str().unwrap().to_string();
                out.push((GoldQuestion { id, answers }, context.clone()));
            }
        }
    }
    out
}

/// Latin-script fragments that exercise nltk's rules (quotes, clitics, contractions, final
/// periods, commas in and after numbers, brackets, symbols).
const SNIPPETS: &[&str] = &[
    "Mr. Smith's",
    " can't stop",
    "cannot",
    "\"quoted\" text",
    "'a b",
    "(1,000)",
    "3.5%",
    "wow! really?",
    "U.S.A.",
    " wanna go",
    "it's 'tis",
    "e.g., x",
    "etc...",
    "A&B; C@D #1 $5",
    "they'll we're I'm",
    "[x] {y} <z>",
    "a--b",
    "end.",
    "x, y: 9,5",
    "«guillemets»",
    "‘single’",
    "'quote' ",
    "''twice''",
    "gonna gotta gimme lemme",
    "D'ye more'n",
    " 'Twas",
];

/// A perturbed version of `answer`: each kind of mistake a reader makes, drawn from `rng`.
fn perturb(answer: &str, context: &[char], rng: &mut impl Rng) -> String {
    let chars: Vec<char> = answer.chars().collect();
    let n = chars.len();
    let mut pick = |k: usize| (rng.next_u64() % k.max(1) as u64) as usize;
    let start = context
        .windows(n.max(1))
        .position(|w| w == chars.as_slice())
        .unwrap_or(0);
    match pick(10) {
        0 => chars[..n - pick(n).min(n.saturating_sub(1))]
            .iter()
            .collect(),
        1 => chars[pick(n).min(n.saturating_sub(1))..].iter().collect(),
        2 => {
            let (a, b) = (
                start.saturating_sub(pick(6)),
                (start + n + pick(6)).min(context.len()),
            );
            context[a..b.max(a)].iter().collect()
        }
        3 if n >= 2 => {
            let mut c = chars.clone();
            let i = pick(n - 1);
            c.swap(i, i + 1);
            c.into_iter().collect()
        }
        4 => {
            let mut c = chars.clone();
            if n > 0 {
                c[pick(n)] = context[pick(context.len())];
            }
            c.into_iter().collect()
        }
        5 => format!(" {}。", answer.to_uppercase()),
        6 => {
            let a = pick(context.len());
            context[a..(a + 1 + pick(12)).min(context.len())]
                .iter()
                .collect()
        }
        7 => String::new(),
        8 => {
            // English inside the answer: the tokenizer's rules at work.
            let snippet = SNIPPETS[pick(SNIPPETS.len())];
            let at = pick(n + 1);
            let head: String = chars[..at].iter().collect();
            let tail: String = chars[at..].iter().collect();
            format!("{head}{snippet}{tail}")
        }
        _ => format!("{answer} (the {} answer, U.S. etc.)", pick(1000)),
    }
}

fn run_reference(py: &Path, script: &Path, request: &Value) -> Value {
    let mut child = Command::new(py)
        .args(["-c", HARNESS])
        .arg(script)
        .arg(dev_file())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the official script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn em_and_f1_are_the_official_scripts_on_the_dev_set() {
    let (py, script) = match reference() {
        Ok(r) => r,
        Err(why) => {
            eprintln!("skipped the comparison with the official CMRC 2018 script: {why}");
            return;
        }
    };
    let dev: Value = serde_json::from_str(&std::fs::read_to_string(dev_file()).unwrap()).unwrap();
    let questions = dev_questions(&dev);
    let mut rng = TestRunner::deterministic().new_rng();

    // Every gold answer as a prediction, then two perturbations per question.
    let mut cases: Vec<(Vec<String>, String)> = Vec::new();
    for (q, context) in &questions {
        for a in &q.answers {
            cases.push((q.answers.clone(), a.clone()));
        }
        let first = q.answers.first().map_or("", String::as_str);
        for _ in 0..2 {
            cases.push((q.answers.clone(), perturb(first, context, &mut rng)));
        }
    }
    // Corpus figures on one prediction per question, a few left unanswered.
    let predictions: HashMap<String, String> = questions
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 50 != 7)
        .map(|(_, (q, context))| {
            let first = q.answers.first().map_or("", String::as_str);
            (q.id.clone(), perturb(first, context, &mut rng))
        })
        .collect();

    let request = json!({"cases": cases, "predictions": predictions});
    let theirs = run_reference(&py, &script, &request);

    let mut mismatches = Vec::new();
    for (i, (answers, prediction)) in cases.iter().enumerate() {
        let t = &theirs["cases"][i];
        let f1 = cmrc_eval::f1(answers, prediction);
        let em = cmrc_eval::exact_match(answers, prediction);
        let segs = cmrc_eval::mixed_segmentation(prediction, true);
        let same = (f1 - t[0].as_f64().unwrap()).abs() < 1e-12
            && em == (t[1].as_i64().unwrap() == 1)
            && json!(segs) == t[2];
        if !same {
            mismatches.push(format!(
                "{prediction:?} vs {answers:?}: ours f1 {f1} em {em} {segs:?}; official {t}"
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} cases differ, e.g.\n{}",
        mismatches.len(),
        cases.len(),
        mismatches[..mismatches.len().min(10)].join("\n")
    );

    let gold: Vec<GoldQuestion> = questions.into_iter().map(|(q, _)| q).collect();
    let ours = cmrc_eval::evaluate(&gold, &predictions);
    assert!(
        (ours.f1 - theirs["f1"].as_f64().unwrap()).abs() < 1e-9,
        "{ours:?} {theirs}"
    );
    assert!(
        (ours.em - theirs["em"].as_f64().unwrap()).abs() < 1e-9,
        "{ours:?}"
    );
    assert_eq!(ours.total as u64, theirs["total"].as_u64().unwrap());
    assert_eq!(ours.skipped as u64, theirs["skip"].as_u64().unwrap());
    eprintln!(
        "{} cases and the corpus figures (EM {:.3}, F1 {:.3}, {} of {} unanswered) agree with \
         the official script",
        cases.len(),
        ours.em,
        ours.f1,
        ours.skipped,
        ours.total
    );
}
