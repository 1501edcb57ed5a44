//! `pipeline predict` for a sentence-pair regressor (`sts_b`, `pair_regression`): two texts
//! print the predicted score (`--json`: `{"text_a", "text_b", "score"}`); `--input FILE` takes
//! a TSV of `text_a \t text_b [\t gold score]` and writes `line, text_a, text_b, gold,
//! predicted` (or JSON lines), with Pearson's and Spearman's correlation when it has gold
//! scores. Encoding and decoding are the finetune stage's own (its `pair_regression` kind).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Result, bail};
use pipeline_tasks::ScoredPairExample;
use pipeline_tasks::correlation::RegressionMetrics;
use serde_json::json;
use stage_finetune::api::{Input, Prediction, Predictor};

use super::input::{Lines, excerpt};
use super::{PredictArgs, of_shape, output, progress_bar};
use crate::global::Global;

/// A regressor on a pair or a file of pairs.
pub fn predict(global: &Global, args: &PredictArgs, model: &Predictor) -> Result<ExitCode> {
    match (&args.texts[..], &args.input) {
        ([a, b], None) => print_score(args, model, a, b),
        ([], Some(input)) => score_file(global, args, model, input),
        (_, Some(_)) => bail!("give either texts or --input FILE, not both"),
        (given, None) => bail!(
            "this model scores sentence pairs: give exactly two texts (text_a and text_b), \
             not {}, or a file of pairs (`--input pairs.tsv`)",
            given.len()
        ),
    }
}

/// The predicted scores of `pairs` (the gold, if any, is not looked at), in order.
fn scores(
    model: &Predictor,
    pairs: &[ScoredPairExample],
    batch_size: usize,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<f32>> {
    let inputs = pairs
        .iter()
        .map(|p| Input::pair(p.text_a.as_str(), p.text_b.as_str()))
        .collect();
    let predictions = model.predict_with(inputs, batch_size, progress)?;
    of_shape(predictions, "a score was", |p| match p {
        Prediction::Score(s) => Some(s.score),
        _ => None,
    })
}

fn pair(a: &str, b: &str, score: f32, line: usize) -> ScoredPairExample {
    ScoredPairExample {
        text_a: a.to_string(),
        text_b: b.to_string(),
        score,
        file: 0,
        line,
    }
}

fn print_score(args: &PredictArgs, model: &Predictor, a: &str, b: &str) -> Result<ExitCode> {
    let s = scores(model, &[pair(a, b, f32::NAN, 0)], 1, &|_| {})?;
    let Some(&score) = s.first() else {
        bail!("the model gave no score");
    };
    if args.json {
        println!("{}", json!({"text_a": a, "text_b": b, "score": score}));
    } else {
        println!("{score:.4}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The pairs of a TSV and whether each has a gold score (a third column).
fn read_pairs(path: &Path, header: bool) -> Result<(Vec<ScoredPairExample>, Vec<bool>)> {
    let mut input = Lines::open(path)?;
    let name = input.name().display().to_string();
    let (mut pairs, mut has_gold) = (Vec::new(), Vec::new());
    while let Some((n, line)) = input.next_line()? {
        let line =
            String::from_utf8(line).map_err(|_| anyhow::anyhow!("{name}:{n}: not valid UTF-8"))?;
        let line = line.trim_end_matches(['\r', '\n']);
        if (header && n == 1) || line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split('\t').map(str::trim).collect();
        let (a, b, gold) = match cols[..] {
            [a, b] => (a, b, None),
            [a, b, g] => (a, b, Some(g)),
            _ => bail!(
                "{name}:{n}: {} tab-separated columns; expected text_a, text_b and optionally \
                 a gold score",
                cols.len()
            ),
        };
        if a.is_empty() || b.is_empty() {
            bail!("{name}:{n}: an empty text");
        }
        let score = match gold.map(str::parse::<f32>) {
            None => f32::NAN,
            Some(Ok(s)) if s.is_finite() => s,
            Some(_) if n == 1 && !header => bail!(
                "{name}:1: the score {:?} is not a number; if the first line is a header, pass \
                 --header",
                excerpt(gold.unwrap_or(""))
            ),
            Some(_) => bail!(
                "{name}:{n}: the score {:?} is not a number",
                excerpt(gold.unwrap_or(""))
            ),
        };
        pairs.push(pair(a, b, score, n));
        has_gold.push(gold.is_some());
    }
    if pairs.is_empty() {
        bail!("{name} has no pairs to score");
    }
    Ok((pairs, has_gold))
}

fn score_file(
    global: &Global,
    args: &PredictArgs,
    model: &Predictor,
    input: &Path,
) -> Result<ExitCode> {
    let (pairs, has_gold) = read_pairs(input, args.header)?;
    let bar = progress_bar(global, args, pairs.len(), "pairs");
    let t0 = Instant::now();
    let predicted = scores(model, &pairs, args.batch_size, &|n| bar.inc(n as u64))?;
    bar.finish_and_clear();
    let seconds = t0.elapsed().as_secs_f64();
    let mut out = output(args)?;
    if !args.json {
        writeln!(out, "line\ttext_a\ttext_b\tgold\tpredicted")?;
    }
    let (mut gold, mut with_gold) = (Vec::new(), Vec::new());
    for ((e, &g), &p) in pairs.iter().zip(&has_gold).zip(&predicted) {
        if g {
            gold.push(f64::from(e.score));
            with_gold.push(f64::from(p));
        }
        let shown = g.then_some(e.score);
        if args.json {
            let o = json!({"line": e.line, "text_a": e.text_a, "text_b": e.text_b,
                           "gold": shown, "score": p});
            writeln!(out, "{o}")?;
        } else {
            let cell = |t: &str| t.replace('\t', " ");
            let gold = shown.map(|s| s.to_string()).unwrap_or_default();
            writeln!(
                out,
                "{}\t{}\t{}\t{gold}\t{p:.6}",
                e.line,
                cell(&e.text_a),
                cell(&e.text_b)
            )?;
        }
    }
    out.flush()?;
    if !global.quiet {
        eprintln!(
            "{} pairs in {seconds:.2} s ({:.0} pairs/s on {}){}",
            pairs.len(),
            pairs.len() as f64 / seconds.max(1e-9),
            model.device_name(),
            correlations(&gold, &with_gold)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `, Pearson 0.8123, Spearman 0.8011 on 1500 gold scores`, or nothing without gold.
fn correlations(gold: &[f64], predicted: &[f64]) -> String {
    if gold.is_empty() {
        return String::new();
    }
    let m = RegressionMetrics::of(gold, predicted);
    let show = |x: Option<f64>| x.map_or("undefined".into(), |v| format!("{v:.4}"));
    format!(
        ", Pearson {}, Spearman {} on {} gold scores",
        show(m.pearson),
        show(m.spearman),
        m.examples
    )
}
