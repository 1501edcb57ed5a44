//! `pipeline predict` for the reading-comprehension models and multiple choice:
//!
//! - a span model (CMRC 2018, SQuAD): `--question Q --context C` prints the answer, its
//!   character offsets in the context (`start..end`, 0-based, end exclusive, as SQuAD's
//!   `answer_start` counts) and its probability (softmax over the n-best candidates) and score
//!   (start + end logit); `--input FILE` takes a SQuAD v1 JSON file (questions without answers
//!   are fine) and prints one line per question, with EM and F1 when it has answers;
//! - a C3 model: `--context C --question Q --choice A --choice B [...]` (2 to 4 choices, in
//!   order) prints the chosen option, its index and the probabilities; `--input FILE` takes
//!   C3's JSON, with the accuracy;
//! - a multiple-choice model of the JSONL `choice` task: `--question PROMPT --choice A …`.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, bail};
use pipeline_tasks::SpanMetricsBlock;
use pipeline_tasks::c3::{C3_CHOICES, read_c3};
use pipeline_tasks::cmrc_eval::{self, GoldQuestion};
use pipeline_tasks::squad::read_squad_questions;
use serde_json::json;
use stage_finetune::api::{
    AnswerPrediction, ChoicePrediction, Input, Prediction, PredictionShape, Predictor,
};

use super::{PredictArgs, of_shape, output, progress_bar};
use crate::global::Global;

/// Span, C3 and choice models.
pub fn predict(global: &Global, args: &PredictArgs, model: &Predictor) -> Result<ExitCode> {
    let kind = model.kind();
    if !args.texts.is_empty() {
        bail!(
            "this is a {} model: give {} (or --input FILE), not positional texts",
            kind,
            usage(model)
        );
    }
    let given = args.question.is_some() || args.context.is_some() || !args.choices.is_empty();
    let answers = model.predicts() == PredictionShape::Answer;
    match (answers, &args.input, given) {
        (_, Some(_), true) => bail!("give either {} or --input FILE, not both", usage(model)),
        (true, Some(input), _) => answer_file(global, args, model, input),
        (true, None, _) => answer_one(args, model),
        (false, Some(input), _) if with_context(model) => choose_file(global, args, model, input),
        (false, Some(_), _) => bail!(
            "--input takes C3 JSON for a C3 model; for a `choice` model give --question and \
             --choice on the command line"
        ),
        (false, None, _) => choose_one(args, model),
    }
}

/// Whether a choice model's questions are on a context (a C3 model), not a prompt alone (a
/// `choice` model): the model's fields say.
fn with_context(model: &Predictor) -> bool {
    model.input_fields().contains(&"context")
}

/// The flags a model's one question is given with.
fn usage(model: &Predictor) -> &'static str {
    match (model.predicts(), with_context(model)) {
        (PredictionShape::Answer, _) => "--question Q --context C",
        (_, true) => "--context C --question Q --choice A --choice B [...]",
        (_, false) => "--question PROMPT --choice A --choice B [...]",
    }
}

/// A required, non-empty text flag.
fn text<'a>(value: &'a Option<String>, flag: &str, model: &Predictor) -> Result<&'a str> {
    match value.as_deref().map(str::trim) {
        Some(t) if !t.is_empty() => Ok(value.as_deref().unwrap_or(t)),
        Some(_) => bail!("{flag} is empty: give a text"),
        None => bail!("this is a {} model: give {}", model.kind(), usage(model)),
    }
}

/// The answers of span predictions.
fn answers(predictions: Vec<Prediction>) -> Result<Vec<AnswerPrediction>> {
    of_shape(predictions, "an answer was", |p| match p {
        Prediction::Answer(a) => Some(a),
        _ => None,
    })
}

/// The choices of multiple-choice predictions.
fn choices(predictions: Vec<Prediction>) -> Result<Vec<ChoicePrediction>> {
    of_shape(predictions, "a choice was", |p| match p {
        Prediction::Choice(c) => Some(c),
        _ => None,
    })
}

fn answer_one(args: &PredictArgs, model: &Predictor) -> Result<ExitCode> {
    let question = text(&args.question, "--question", model)?;
    let context = text(&args.context, "--context", model)?;
    let Some(a) = answers(model.predict(&[Input::question(context, question.trim())])?)?.pop()
    else {
        bail!("the model gave no answer");
    };
    if args.json {
        println!("{}", serde_json::to_value(&a)?);
    } else {
        match (&a.answer, a.start, a.end) {
            (Some(t), Some(s), Some(e)) => println!(
                "{t}\t{s}..{e}\t(p = {:.4}, score {:.3})",
                a.probability.unwrap_or(0.0),
                a.score.unwrap_or(0.0)
            ),
            _ => println!("no answer (the context has no token)"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn answer_file(
    global: &Global,
    args: &PredictArgs,
    model: &Predictor,
    input: &Path,
) -> Result<ExitCode> {
    let file = read_squad_questions(input)?;
    let bar = progress_bar(global, args, file.examples.len(), "questions");
    let inputs = file
        .examples
        .iter()
        .map(|q| Input::question(&*q.context, q.question.as_str()))
        .collect();
    let predicted = model.predict_with(inputs, args.batch_size, &|n| bar.inc(n as u64))?;
    let predicted = answers(predicted)?;
    bar.finish_and_clear();
    let mut out = output(args)?;
    if !args.json {
        writeln!(out, "id\tquestion\tanswer\tstart\tend\tprobability")?;
    }
    for (q, a) in file.examples.iter().zip(&predicted) {
        if args.json {
            let mut o = serde_json::to_value(a)?;
            o["id"] = json!(q.id);
            o["question"] = json!(q.question);
            writeln!(out, "{o}")?;
        } else {
            let clean = |t: &str| t.replace(['\t', '\n'], " ");
            let show = |x: Option<usize>| x.map(|x| x.to_string()).unwrap_or_default();
            let p = a.probability.map(|p| format!("{p:.6}")).unwrap_or_default();
            let t = a.answer.as_deref().map(clean).unwrap_or_default();
            let (s, e) = (show(a.start), show(a.end));
            writeln!(out, "{}\t{}\t{t}\t{s}\t{e}\t{p}", q.id, clean(&q.question))?;
        }
    }
    out.flush()?;
    let gold: Vec<GoldQuestion> = file
        .examples
        .iter()
        .filter(|q| !q.answers.is_empty())
        .map(|q| GoldQuestion {
            id: q.id.clone(),
            answers: q.answers.iter().map(|a| a.text.clone()).collect(),
        })
        .collect();
    if !global.quiet && !gold.is_empty() {
        let found: HashMap<String, String> = file
            .examples
            .iter()
            .zip(&predicted)
            .filter_map(|(q, a)| Some((q.id.clone(), a.answer.clone()?)))
            .collect();
        let m = SpanMetricsBlock::from_scores(&cmrc_eval::evaluate(&gold, &found));
        eprintln!(
            "{} questions, EM {:.2} F1 {:.2} (CMRC 2018's script, %) on the {} with answers",
            file.examples.len(),
            100.0 * m.exact_match,
            100.0 * m.f1,
            gold.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One choice question from the flags: C3's (context, question, choices) or a `choice`
/// task's (prompt, choices).
fn choice_question(args: &PredictArgs, model: &Predictor) -> Result<Input> {
    let question = text(&args.question, "--question", model)?;
    let context = if with_context(model) {
        Some(text(&args.context, "--context", model)?.to_string())
    } else if args.context.is_some() {
        bail!("a `choice` model takes no --context: its prompt is --question");
    } else {
        None
    };
    let n = args.choices.len();
    if !(2..=C3_CHOICES).contains(&n) || args.choices.iter().any(|c| c.trim().is_empty()) {
        bail!("give 2 to {C3_CHOICES} non-empty --choice options (got {n})");
    }
    let options = args.choices.iter().map(|c| c.trim().to_string()).collect();
    Ok(Input::choice(context, question.trim(), options))
}

fn choose_one(args: &PredictArgs, model: &Predictor) -> Result<ExitCode> {
    let q = choice_question(args, model)?;
    let Some(c) = choices(model.predict(&[q])?)?.pop() else {
        bail!("the model gave no choice");
    };
    if args.json {
        println!("{}", serde_json::to_value(&c)?);
    } else {
        let shown: Vec<String> = c
            .probabilities
            .iter()
            .zip(&c.choices)
            .enumerate()
            .map(|(i, (x, option))| format!("{i} {option}: {x:.4}"))
            .collect();
        let p = c.probabilities.get(c.choice).copied().unwrap_or(0.0);
        println!("{}\t{}\t(p = {p:.4})", c.choice, c.answer);
        println!("probabilities: {}", shown.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

fn choose_file(
    global: &Global,
    args: &PredictArgs,
    model: &Predictor,
    input: &Path,
) -> Result<ExitCode> {
    let file = read_c3(input)?;
    let qs = &file.examples;
    let bar = progress_bar(global, args, qs.len(), "questions");
    let inputs = qs
        .iter()
        .map(|q| {
            let real = q.choices[..q.real_choices].to_vec();
            Input::choice(Some(q.context.clone()), q.question.as_str(), real)
        })
        .collect();
    let predicted = choices(model.predict_with(inputs, args.batch_size, &|n| bar.inc(n as u64))?)?;
    bar.finish_and_clear();
    let mut out = output(args)?;
    if !args.json {
        writeln!(out, "id\tquestion\tgold\tpredicted\tanswer\tprobability")?;
    }
    let mut correct = 0usize;
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (q, c) in qs.iter().zip(&predicted) {
        let k = c.choice;
        correct += usize::from(k == q.answer);
        // C3 reuses document ids across its subsets: number repeats so ids stay unique.
        let n = seen.entry(&q.id).or_default();
        let id = if *n == 0 {
            q.id.clone()
        } else {
            format!("{}~{n}", q.id)
        };
        *n += 1;
        if args.json {
            let o = json!({"id": id, "question": q.question, "gold": q.answer, "choice": k,
                           "answer": c.answer, "probabilities": c.probabilities});
            writeln!(out, "{o}")?;
        } else {
            let clean = |s: &str| s.replace(['\t', '\n'], " ");
            writeln!(
                out,
                "{id}\t{}\t{}\t{k}\t{}\t{:.6}",
                clean(&q.question),
                q.answer,
                clean(&c.answer),
                c.probabilities.get(k).copied().unwrap_or(0.0)
            )?;
        }
    }
    out.flush()?;
    if !global.quiet {
        eprintln!(
            "{} questions, accuracy {:.4}",
            qs.len(),
            correct as f64 / qs.len().max(1) as f64
        );
    }
    Ok(ExitCode::SUCCESS)
}
