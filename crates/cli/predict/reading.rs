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
use std::sync::Arc;

use anyhow::{Result, bail};
use pipeline_albert::device::ResolvedDevice;
use pipeline_tasks::TaskKind;
use pipeline_tasks::c3::{C3_CHOICES, C3Example, read_c3};
use pipeline_tasks::squad::{SquadExample, read_squad_questions};
use serde_json::json;
use stage_finetune::kinds::{SpanAnswer, reading_choice, span};
use stage_finetune::predict::{FineTuned, argmax};

use super::{output, progress_bar};
use crate::args::PredictArgs;
use crate::global::Global;

/// Span, C3 and choice models.
pub fn predict(
    global: &Global,
    args: &PredictArgs,
    model: &FineTuned,
    device: &ResolvedDevice,
) -> Result<ExitCode> {
    if !args.texts.is_empty() {
        bail!(
            "this is a {} model: give {} (or --input FILE), not positional texts",
            model.kind,
            usage(model.kind)
        );
    }
    let given = args.question.is_some() || args.context.is_some() || !args.choices.is_empty();
    match (model.kind, &args.input, given) {
        (_, Some(_), true) => bail!(
            "give either {} or --input FILE, not both",
            usage(model.kind)
        ),
        (TaskKind::Span, Some(input), _) => answer_file(global, args, model, device, input),
        (TaskKind::Span, None, _) => answer_one(args, model, device),
        (TaskKind::ReadingChoice, Some(input), _) => {
            choose_file(global, args, model, device, input)
        }
        (TaskKind::Choice, Some(_), _) => bail!(
            "--input takes C3 JSON for a C3 model; for a `choice` model give --question and \
             --choice on the command line"
        ),
        _ => choose_one(args, model, device),
    }
}

fn usage(kind: TaskKind) -> &'static str {
    match kind {
        TaskKind::Span => "--question Q --context C",
        TaskKind::ReadingChoice => "--context C --question Q --choice A --choice B [...]",
        _ => "--question PROMPT --choice A --choice B [...]",
    }
}

/// A required, non-empty text flag.
fn text<'a>(value: &'a Option<String>, flag: &str, kind: TaskKind) -> Result<&'a str> {
    match value.as_deref().map(str::trim) {
        Some(t) if !t.is_empty() => Ok(value.as_deref().unwrap_or(t)),
        Some(_) => bail!("{flag} is empty: give a text"),
        None => bail!("this is a {kind} model: give {}", usage(kind)),
    }
}

fn answer_json(a: &Option<SpanAnswer>) -> serde_json::Value {
    match a {
        Some(a) => json!({"answer": a.text, "start": a.chars.start, "end": a.chars.end,
                          "probability": a.probability, "score": a.score}),
        None => json!({"answer": null}),
    }
}

fn answer_one(args: &PredictArgs, model: &FineTuned, device: &ResolvedDevice) -> Result<ExitCode> {
    let question = text(&args.question, "--question", model.kind)?;
    let context = text(&args.context, "--context", model.kind)?;
    let ex = SquadExample {
        id: "question".into(),
        article: 0,
        context: Arc::from(context),
        question: question.trim().to_string(),
        answers: Vec::new(),
        file: 0,
    };
    let split = span::encode_questions("predict", &[ex], &model.encoder);
    let mut answers = model.predict(&span::Spans, &split, 1, &device.device, &|_| {})?;
    let a = answers.pop().flatten();
    if args.json {
        let mut o = answer_json(&a);
        o["question"] = json!(question);
        println!("{o}");
    } else {
        match &a {
            Some(a) => println!(
                "{}\t{}..{}\t(p = {:.4}, score {:.3})",
                a.text, a.chars.start, a.chars.end, a.probability, a.score
            ),
            None => println!("no answer (the context has no token)"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn answer_file(
    global: &Global,
    args: &PredictArgs,
    model: &FineTuned,
    device: &ResolvedDevice,
    input: &Path,
) -> Result<ExitCode> {
    let file = read_squad_questions(input)?;
    let bar = progress_bar(global, args, file.examples.len(), "questions");
    let split = span::encode_questions("predict", &file.examples, &model.encoder);
    let answers = model.predict(
        &span::Spans,
        &split,
        args.batch_size,
        &device.device,
        &|n| bar.inc(n as u64),
    )?;
    bar.finish_and_clear();
    let mut out = output(args)?;
    if !args.json {
        writeln!(out, "id\tquestion\tanswer\tstart\tend\tprobability")?;
    }
    for (q, a) in file.examples.iter().zip(&answers) {
        if args.json {
            let mut o = answer_json(a);
            o["id"] = json!(q.id);
            o["question"] = json!(q.question);
            writeln!(out, "{o}")?;
        } else {
            let (t, s, e, p) = a.as_ref().map_or(Default::default(), |a| {
                (
                    a.text.replace(['\t', '\n'], " "),
                    a.chars.start.to_string(),
                    a.chars.end.to_string(),
                    format!("{:.6}", a.probability),
                )
            });
            let question = q.question.replace(['\t', '\n'], " ");
            writeln!(out, "{}\t{question}\t{t}\t{s}\t{e}\t{p}", q.id)?;
        }
    }
    out.flush()?;
    let answered = file
        .examples
        .iter()
        .filter(|q| !q.answers.is_empty())
        .count();
    if !global.quiet && answered > 0 {
        let m = span::score_answers(split.features()?, &answers);
        eprintln!(
            "{} questions, EM {:.2} F1 {:.2} (CMRC 2018's script, %) on the {answered} with answers",
            file.examples.len(),
            100.0 * m.exact_match,
            100.0 * m.f1
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One choice question from the flags: C3's (context, question, choices) or a `choice`
/// task's (prompt, choices).
fn choice_question(args: &PredictArgs, model: &FineTuned) -> Result<C3Example> {
    let question = text(&args.question, "--question", model.kind)?;
    let context = if model.kind == TaskKind::ReadingChoice {
        text(&args.context, "--context", model.kind)?.to_string()
    } else if args.context.is_some() {
        bail!("a `choice` model takes no --context: its prompt is --question");
    } else {
        String::new()
    };
    let n = args.choices.len();
    if !(2..=C3_CHOICES).contains(&n) || args.choices.iter().any(|c| c.trim().is_empty()) {
        bail!("give 2 to {C3_CHOICES} non-empty --choice options (got {n})");
    }
    let mut padded: [String; C3_CHOICES] = Default::default();
    for (p, c) in padded.iter_mut().zip(&args.choices) {
        *p = c.trim().to_string();
    }
    Ok(C3Example {
        id: "question".into(),
        document: 0,
        context,
        question: question.trim().to_string(),
        choices: padded,
        real_choices: n,
        answer: 0,
        file: 0,
    })
}

/// Choice probabilities of each question (the padding's 0).
fn choose(
    model: &FineTuned,
    device: &ResolvedDevice,
    questions: &[C3Example],
    batch_size: usize,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<Vec<f32>>> {
    let mut split = reading_choice::encode_questions("predict", questions, &model.encoder);
    if model.kind == TaskKind::Choice {
        // A `choice` model was trained on `[CLS] prompt [SEP] choice [SEP]` of its real
        // choices only.
        split.rows = questions
            .iter()
            .map(|q| {
                q.choices[..q.real_choices]
                    .iter()
                    .map(|c| model.encoder.encode(&q.question, c))
                    .collect()
            })
            .collect();
    }
    Ok(model.predict(
        &reading_choice::ReadingChoices,
        &split,
        batch_size,
        &device.device,
        progress,
    )?)
}

fn choose_one(args: &PredictArgs, model: &FineTuned, device: &ResolvedDevice) -> Result<ExitCode> {
    let q = choice_question(args, model)?;
    let p = choose(model, device, std::slice::from_ref(&q), 1, &|_| {})?
        .pop()
        .unwrap_or_default();
    let k = argmax(&p);
    let chosen = q.choices.get(k).cloned().unwrap_or_default();
    let probs = &p[..q.real_choices.min(p.len())];
    if args.json {
        println!(
            "{}",
            json!({"question": q.question, "choices": &q.choices[..q.real_choices],
                   "choice": k, "answer": chosen, "probabilities": probs})
        );
    } else {
        let shown: Vec<String> = probs
            .iter()
            .enumerate()
            .map(|(i, x)| format!("{i} {}: {x:.4}", q.choices[i]))
            .collect();
        println!(
            "{k}\t{chosen}\t(p = {:.4})",
            probs.get(k).copied().unwrap_or(0.0)
        );
        println!("probabilities: {}", shown.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

fn choose_file(
    global: &Global,
    args: &PredictArgs,
    model: &FineTuned,
    device: &ResolvedDevice,
    input: &Path,
) -> Result<ExitCode> {
    let file = read_c3(input)?;
    let qs = &file.examples;
    let bar = progress_bar(global, args, qs.len(), "questions");
    let probs = choose(model, device, qs, args.batch_size, &|n| bar.inc(n as u64))?;
    bar.finish_and_clear();
    let mut out = output(args)?;
    if !args.json {
        writeln!(out, "id\tquestion\tgold\tpredicted\tanswer\tprobability")?;
    }
    let mut correct = 0usize;
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (q, p) in qs.iter().zip(&probs) {
        let k = argmax(p);
        correct += usize::from(k == q.answer);
        // C3 reuses document ids across its subsets: number repeats so ids stay unique.
        let n = seen.entry(&q.id).or_default();
        let id = if *n == 0 {
            q.id.clone()
        } else {
            format!("{}~{n}", q.id)
        };
        *n += 1;
        let answer = &q.choices[k];
        if args.json {
            let o = json!({"id": id, "question": q.question, "gold": q.answer, "choice": k,
                           "answer": answer, "probabilities": &p[..q.real_choices.min(p.len())]});
            writeln!(out, "{o}")?;
        } else {
            let clean = |s: &str| s.replace(['\t', '\n'], " ");
            writeln!(
                out,
                "{id}\t{}\t{}\t{k}\t{}\t{:.6}",
                clean(&q.question),
                q.answer,
                clean(answer),
                p.get(k).copied().unwrap_or(0.0)
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
