//! `pipeline predict`: a fine-tuned model on texts given on the command line or in a TSV.
//!
//! - a sentence-pair classifier on one pair (printed like albert_zh's similarity.py) or a TSV of
//!   `text_a \t text_b [\t gold]`;
//! - a single-text classifier on one text or a TSV of `text [\t gold]`;
//! - a tagger (NER) on one text or a file of one text per line: the entities with their
//!   character spans (`start..end`, 0-based, end exclusive, in characters of the text as given)
//!   and types;
//! - a span model (CMRC 2018), a C3 model or a `choice` model: see [`reading`];
//! - a sentence-pair regressor (`sts_b`, `pair_regression`): the score; see [`regression`].
//!
//! A TSV gets a progress bar and an output TSV (or JSON lines), with the accuracy when it has
//! gold labels.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use stage_finetune::api::{
    ClassPrediction, Input, Prediction, PredictionShape, Predictor, TagPrediction,
};

use crate::global::Global;
use crate::model_source::{ModelSource, model_dir};

mod input;
mod reading;
mod regression;

use input::{Lines, excerpt};

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  pipeline predict --stage finetune_lcqmc \"我喜欢妈妈做的汤\" \"妈妈做的汤我很喜欢喝\"
  pipeline predict --model DIR --input pairs.tsv --output predictions.tsv
  pipeline predict --stage 'finetune_xnli@init=pretrained,share_type=all' --input test.tsv --header --json
  pipeline predict --stage finetune_cmrc2018 --question \"周杰毕业于哪所大学？\" --context \"2005年，周杰毕业于浙江大学。\"
  pipeline predict --stage finetune_cmrc2018 --input cmrc2018/dev.json --json
  pipeline predict --stage finetune_c3 --context \"男：你去哪儿？女：去医院。\" --question \"女的去哪儿？\" --choice 医院 --choice 车站")]
pub struct PredictArgs {
    #[command(flatten)]
    pub source: ModelSource,
    /// text_a and text_b of one pair (one text for a single-text classifier or a tagger).
    #[arg(value_name = "TEXT")]
    pub texts: Vec<String>,
    /// Span extraction and C3: the question.
    #[arg(long, value_name = "Q")]
    pub question: Option<String>,
    /// Span extraction and C3: the context (the passage, or the dialogue's lines joined).
    #[arg(long, value_name = "C")]
    pub context: Option<String>,
    /// C3: one choice (repeat for each, 2 to 4, in order).
    #[arg(long = "choice", value_name = "TEXT")]
    pub choices: Vec<String>,
    /// A file of examples: a TSV of pairs (text_a, text_b, optionally a gold label; accuracy
    /// is then printed), of texts, or of texts to tag; SQuAD v1 JSON for a span model (EM and
    /// F1 printed where it has answers); C3 JSON for a C3 model. `-` reads a TSV or text file
    /// from standard input. At most 1 GiB, 16 MiB a line, 2,000,000 lines.
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Where to write the predictions for --input (default: stdout).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The input's first line is a header.
    #[arg(long)]
    pub header: bool,
    #[arg(long, default_value_t = 64)]
    pub batch_size: usize,
    /// Tokens per row (default 128; 256 for span extraction, the window's length, with the
    /// question cut to a quarter of it and windows overlapping by up to 64 tokens).
    #[arg(long)]
    pub max_seq_length: Option<usize>,
    /// auto, cpu, flex, tch-cpu or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// JSON output (one object; one per line for --input).
    #[arg(long)]
    pub json: bool,
}

/// One input row: the texts (one or two), and the gold label when the file has one.
struct Row {
    line: usize,
    texts: Vec<String>,
    gold: Option<usize>,
}

/// The rows of a TSV: `texts` text columns and an optional gold label after them.
fn read_rows(path: &Path, header: bool, labels: &[String], texts: usize) -> Result<Vec<Row>> {
    let mut input = Lines::open(path)?;
    let path = input.name().to_path_buf();
    let path = path.as_path();
    let mut rows = Vec::new();
    while let Some((n, line)) = input.next_line()? {
        let line = String::from_utf8(line)
            .map_err(|_| anyhow::anyhow!("{}:{n}: not valid UTF-8", path.display()))?;
        let line = line.trim_end_matches(['\r', '\n']);
        if (header && n == 1) || line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split('\t').collect();
        if cols.len() < texts || cols.len() > texts + 1 {
            bail!(
                "{}:{n}: {} tab-separated columns; expected {} and optionally a gold label",
                path.display(),
                cols.len(),
                if texts == 2 {
                    "text_a, text_b"
                } else {
                    "the text"
                }
            );
        }
        if cols[..texts].iter().any(|c| c.trim().is_empty()) {
            bail!("{}:{n}: an empty text", path.display());
        }
        let gold = match cols.get(texts).map(|s| s.trim()) {
            None => None,
            Some(g) => Some(gold_label(path, n, g, header, labels)?),
        };
        rows.push(Row {
            line: n,
            texts: cols[..texts].iter().map(|s| s.to_string()).collect(),
            gold,
        });
    }
    if rows.is_empty() {
        bail!(
            "{} has no {} to predict",
            path.display(),
            if texts == 2 { "pairs" } else { "texts" }
        );
    }
    Ok(rows)
}

/// The id of the gold label `g` of line `n`. The error quotes the label and the model's labels
/// cut to an [`excerpt`]: a 10 MB field is not echoed whole.
fn gold_label(path: &Path, n: usize, g: &str, header: bool, labels: &[String]) -> Result<usize> {
    let known = || excerpt(&labels.join(", "));
    match labels.iter().position(|l| l == g) {
        Some(k) => Ok(k),
        None if n == 1 && !header => bail!(
            "{}:1: the label {:?} is not one the model knows ({}); if the first line is a \
             header, pass --header",
            path.display(),
            excerpt(g),
            known()
        ),
        None => bail!(
            "{}:{n}: the label {:?} is not one the model knows ({})",
            path.display(),
            excerpt(g),
            known()
        ),
    }
}

/// The lines of a file of texts to tag (the first column of a TSV), numbered from 1.
fn read_texts(path: &Path, header: bool) -> Result<Vec<(usize, String)>> {
    let mut input = Lines::open(path)?;
    let path = input.name().to_path_buf();
    let path = path.as_path();
    let mut out = Vec::new();
    while let Some((n, line)) = input.next_line()? {
        let line = String::from_utf8(line)
            .map_err(|_| anyhow::anyhow!("{}:{n}: not valid UTF-8", path.display()))?;
        let text = line
            .trim_end_matches(['\r', '\n'])
            .split('\t')
            .next()
            .unwrap_or("");
        if (header && n == 1) || text.trim().is_empty() {
            continue;
        }
        out.push((n, text.to_string()));
    }
    if out.is_empty() {
        bail!("{} has no texts to predict", path.display());
    }
    Ok(out)
}

pub fn predict(global: &Global, args: &PredictArgs) -> Result<ExitCode> {
    // Before anything is loaded: an empty text is a mistake on the command line (exit 2)
    // whatever the model.
    if let Some(i) = args.texts.iter().position(|t| t.trim().is_empty()) {
        return Err(pipeline_engine::UserError::new(format!(
            "text {} on the command line is empty: give a text to predict",
            i + 1
        ))
        .into());
    }
    // Before the model is loaded: an input that is not a regular file (a FIFO, /dev/zero) is
    // refused at once, not after seconds of loading.
    if let Some(input) = args.input.as_deref().filter(|p| *p != Path::new("-")) {
        pipeline_bounded::open(input)?;
    }
    let dir = model_dir(global, &args.source)?;
    let model = Predictor::load(&dir, &args.device, args.max_seq_length)?;
    // What the model gives decides how its inputs are read and its predictions printed; a
    // classifier's fields, how many texts a row has. The model's kind is never asked: a new
    // kind that gives one of these shapes is predicted here as it is.
    let tagger = match model.predicts() {
        PredictionShape::Answer | PredictionShape::Choice => {
            return reading::predict(global, args, &model);
        }
        PredictionShape::Score => return regression::predict(global, args, &model),
        PredictionShape::Tags => true,
        PredictionShape::Class => false,
    };
    let texts = model.input_fields().len();
    match (&args.texts[..], &args.input) {
        ([], Some(input)) if tagger => tag_file(global, args, &model, input),
        ([], Some(input)) => classify_file(global, args, &model, input, texts),
        ([text], None) if tagger => print_entities(args, &model, text),
        (given, None) if given.len() == texts => print_class(args, &model, given),
        ([], None) if texts == 2 => bail!(
            "give a pair to classify (`pipeline predict --stage finetune_lcqmc \"text a\" \"text b\"`) \
             or a file of pairs (`--input pairs.tsv`)"
        ),
        ([], None) => bail!(
            "give a text (`pipeline predict --model DIR \"这家酒店很好\"`) or a file of texts \
             (`--input texts.tsv`)"
        ),
        (_, Some(_)) => bail!("give either texts or --input FILE, not both"),
        (given, None) if texts == 2 => bail!(
            "give exactly two texts (text_a and text_b), not {}",
            given.len()
        ),
        (given, None) => bail!(
            "this model classifies single texts: give exactly one text, not {}",
            given.len()
        ),
    }
}

/// The input of one example's texts.
fn input_of(texts: Vec<String>) -> Input {
    let mut texts = texts.into_iter();
    match (texts.next(), texts.next()) {
        (Some(a), Some(b)) => Input::pair(a, b),
        (t, _) => Input::text(t.unwrap_or_default()),
    }
}

/// The texts a classifier's prediction echoes, as the columns of its input.
fn echoed(c: &ClassPrediction) -> Vec<&str> {
    [&c.text, &c.text_a, &c.text_b]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect()
}

/// `predictions` as the one shape the model was asked for (`pick` keeps it); another shape is
/// an error saying that `expected` ("a class was") was expected.
fn of_shape<T>(
    predictions: Vec<Prediction>,
    expected: &str,
    pick: impl Fn(Prediction) -> Option<T>,
) -> Result<Vec<T>> {
    predictions
        .into_iter()
        .map(|p| {
            pick(p).ok_or_else(|| {
                anyhow!("the model gave another kind's prediction where {expected} expected")
            })
        })
        .collect()
}

/// The predictions of a classifier (or a tagger) on `inputs`, which it made of its kind.
fn classes(predictions: Vec<Prediction>) -> Result<Vec<ClassPrediction>> {
    of_shape(predictions, "a class was", |p| match p {
        Prediction::Class(c) => Some(c),
        _ => None,
    })
}

fn tags(predictions: Vec<Prediction>) -> Result<Vec<TagPrediction>> {
    of_shape(predictions, "tags were", |p| match p {
        Prediction::Tags(t) => Some(t),
        _ => None,
    })
}

fn print_class(args: &PredictArgs, model: &Predictor, texts: &[String]) -> Result<ExitCode> {
    let Some(c) = classes(model.predict(&[input_of(texts.to_vec())])?)?.pop() else {
        bail!("the model gave no prediction");
    };
    if args.json {
        println!("{}", serde_json::to_value(&c)?);
    } else {
        // Label names come from the model's config.json: escaped and cut for the terminal.
        let name = |l: &str| crate::sanitize::cell(l, crate::sanitize::NAME);
        let probs: Vec<String> = model
            .labels()
            .iter()
            .zip(&c.probabilities)
            .map(|(l, x)| format!("{}: {x:.4}", name(l)))
            .collect();
        let p = c.probabilities.get(c.index).copied().unwrap_or(0.0);
        println!("{}\t(p = {p:.4})", name(&c.label));
        println!("probabilities: {}", probs.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

fn progress_bar(global: &Global, args: &PredictArgs, n: usize, what: &str) -> ProgressBar {
    let bar = if global.quiet || args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(n as u64)
    };
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{bar:30.cyan/blue}} {{pos}}/{{len}} {what} {{per_sec}} ETA {{eta}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

fn output(args: &PredictArgs) -> Result<Box<dyn Write>> {
    Ok(match &args.output {
        Some(path) => Box::new(BufWriter::new(
            File::create(path).with_context(|| format!("cannot write {}", path.display()))?,
        )),
        None => Box::new(BufWriter::new(std::io::stdout())),
    })
}

fn classify_file(
    global: &Global,
    args: &PredictArgs,
    model: &Predictor,
    input: &Path,
    texts: usize,
) -> Result<ExitCode> {
    let labels = model.labels();
    let mut rows = read_rows(input, args.header, labels, texts)?;
    let what = if texts == 2 { "pairs" } else { "texts" };
    let bar = progress_bar(global, args, rows.len(), what);
    let t0 = Instant::now();
    // The texts move into the inputs and come back echoed: a 1 GiB input is held once.
    let inputs: Vec<Input> = rows
        .iter_mut()
        .map(|r| input_of(std::mem::take(&mut r.texts)))
        .collect();
    let predicted = classes(model.predict_with(inputs, args.batch_size, &|n| bar.inc(n as u64))?)?;
    bar.finish_and_clear();
    let seconds = t0.elapsed().as_secs_f64();
    let (mut correct, mut with_gold) = (0usize, 0usize);
    let mut out = output(args)?;
    let columns = if texts == 2 { "text_a\ttext_b" } else { "text" };
    if !args.json {
        let p_cols: Vec<String> = labels.iter().map(|l| format!("p_{l}")).collect();
        writeln!(
            out,
            "line\t{columns}\tgold\tpredicted\t{}",
            p_cols.join("\t")
        )?;
    }
    for (r, c) in rows.iter().zip(&predicted) {
        if let Some(g) = r.gold {
            with_gold += 1;
            correct += usize::from(g == c.index);
        }
        write_class(&mut out, args.json, labels, r, c)?;
    }
    out.flush()?;
    if !global.quiet {
        let acc = if with_gold > 0 {
            format!(
                ", accuracy {:.4} on {with_gold} gold labels",
                correct as f64 / with_gold as f64
            )
        } else {
            String::new()
        };
        eprintln!(
            "{} {what} in {:.2} s ({:.0} {what}/s on {}){acc}",
            rows.len(),
            seconds,
            rows.len() as f64 / seconds.max(1e-9),
            model.device_name()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One row's prediction: a JSON line, or a TSV line of line, texts, gold, predicted and the
/// probabilities.
fn write_class(
    out: &mut dyn Write,
    json_lines: bool,
    labels: &[String],
    r: &Row,
    c: &ClassPrediction,
) -> Result<()> {
    let p = &c.probabilities;
    let texts = echoed(c);
    if json_lines {
        let mut o = match texts[..] {
            [a, b] => json!({"line": r.line, "text_a": a, "text_b": b}),
            _ => json!({"line": r.line, "text": texts.first()}),
        };
        o["gold"] = json!(r.gold.map(|g| &labels[g]));
        o["label"] = json!(c.label);
        o["probabilities"] = json!(p);
        writeln!(out, "{o}")?;
    } else {
        let gold = r.gold.map(|g| labels[g].as_str()).unwrap_or("");
        let ps: Vec<String> = p.iter().map(|x| format!("{x:.6}")).collect();
        let t: Vec<String> = texts.iter().map(|t| t.replace('\t', " ")).collect();
        writeln!(
            out,
            "{}\t{}\t{gold}\t{}\t{}",
            r.line,
            t.join("\t"),
            c.label,
            ps.join("\t")
        )?;
    }
    Ok(())
}

fn print_entities(args: &PredictArgs, model: &Predictor, text: &str) -> Result<ExitCode> {
    let Some(t) = tags(model.predict(&[Input::text(text)])?)?.pop() else {
        bail!("the model gave no prediction");
    };
    if args.json {
        println!("{}", serde_json::to_value(&t)?);
    } else if t.entities.is_empty() {
        println!("no entities");
    } else {
        for e in &t.entities {
            // The tag names come from the model's config.json: escaped for the terminal.
            let kind = crate::sanitize::cell(&e.kind, crate::sanitize::NAME);
            println!(
                "{kind}\t{}..{}\t{}",
                e.start,
                e.end,
                crate::sanitize::line(&e.text)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn tag_file(
    global: &Global,
    args: &PredictArgs,
    model: &Predictor,
    input: &Path,
) -> Result<ExitCode> {
    let lines = read_texts(input, args.header)?;
    let bar = progress_bar(global, args, lines.len(), "texts");
    let n = lines.len();
    let (numbers, inputs): (Vec<usize>, Vec<Input>) =
        lines.into_iter().map(|(n, t)| (n, Input::text(t))).unzip();
    let t0 = Instant::now();
    let tagged = tags(model.predict_with(inputs, args.batch_size, &|n| bar.inc(n as u64))?)?;
    bar.finish_and_clear();
    let mut out = output(args)?;
    if !args.json {
        writeln!(out, "line\ttext\ttags\tentities")?;
    }
    for (line, t) in numbers.iter().zip(&tagged) {
        if args.json {
            let mut o = serde_json::to_value(t)?;
            o["line"] = json!(line);
            writeln!(out, "{o}")?;
        } else {
            let ents: Vec<String> = t
                .entities
                .iter()
                .map(|e| format!("{}:{}..{}:{}", e.kind, e.start, e.end, e.text))
                .collect();
            writeln!(
                out,
                "{line}\t{}\t{}\t{}",
                t.text.replace('\t', " "),
                t.tags.join(" "),
                ents.join(" ")
            )?;
        }
    }
    out.flush()?;
    if !global.quiet {
        let seconds = t0.elapsed().as_secs_f64();
        eprintln!(
            "{n} texts in {seconds:.2} s ({:.0} texts/s on {})",
            n as f64 / seconds.max(1e-9),
            model.device_name()
        );
    }
    Ok(ExitCode::SUCCESS)
}
