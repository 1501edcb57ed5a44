//! `pipeline predict`: a fine-tuned sentence-pair classifier on one pair (printed like albert_zh's
//! similarity.py), or on a TSV of pairs (a progress bar, an output TSV, accuracy when the input
//! has gold labels).

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use pipeline_albert::device::{DeviceChoice, resolve};
use pipeline_albert::parallel::DataParallel;
use serde_json::json;
use stage_finetune::encode::Encoded;
use stage_finetune::predict::{PairClassifier, argmax, pair_probabilities};

use crate::args::{Cli, PredictArgs};
use crate::model::model_dir;

/// One input row: the texts, and the gold label when the file has a third column.
struct Row {
    line: usize,
    a: String,
    b: String,
    gold: Option<usize>,
}

fn read_rows(path: &Path, header: bool, labels: &[String]) -> Result<Vec<Row>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut rows = Vec::new();
    for (i, line) in BufReader::new(file).split(b'\n').enumerate() {
        let n = i + 1;
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        let line = String::from_utf8(line)
            .map_err(|_| anyhow::anyhow!("{}:{n}: not valid UTF-8", path.display()))?;
        let line = line.trim_end_matches(['\r', '\n']);
        if (header && n == 1) || line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split('\t').collect();
        if cols.len() < 2 || cols.len() > 3 {
            bail!(
                "{}:{n}: {} tab-separated columns; expected text_a, text_b and optionally a gold label",
                path.display(),
                cols.len()
            );
        }
        if cols[0].trim().is_empty() || cols[1].trim().is_empty() {
            bail!("{}:{n}: an empty text", path.display());
        }
        let gold = match cols.get(2).map(|s| s.trim()) {
            None => None,
            Some(g) => match labels.iter().position(|l| l == g) {
                Some(k) => Some(k),
                None if n == 1 && !header => bail!(
                    "{}:1: the label {g:?} is not one the model knows ({}); if the first line is a \
                     header, pass --header",
                    path.display(),
                    labels.join(", ")
                ),
                None => bail!(
                    "{}:{n}: the label {g:?} is not one the model knows ({})",
                    path.display(),
                    labels.join(", ")
                ),
            },
        };
        rows.push(Row {
            line: n,
            a: cols[0].to_string(),
            b: cols[1].to_string(),
            gold,
        });
    }
    if rows.is_empty() {
        bail!("{} has no pairs to predict", path.display());
    }
    Ok(rows)
}

pub fn predict(cli: &Cli, args: &PredictArgs) -> Result<ExitCode> {
    let dir = model_dir(cli, &args.source)?;
    let device = resolve(DeviceChoice::parse(&args.device).map_err(anyhow::Error::msg)?)
        .map_err(anyhow::Error::msg)?;
    let clf = PairClassifier::load(&dir, args.max_seq_length, &device.device)?;
    let workers = DataParallel::for_device(&device.device);
    match (&args.texts[..], &args.input) {
        ([a, b], None) => {
            let enc = clf.encoder.encode(a, b);
            let p = pair_probabilities(&clf.model, &[enc], 1, &workers, &device.device, &|_| {})
                .pop()
                .unwrap_or_default();
            let k = argmax(&p);
            if args.json {
                let probs: serde_json::Map<String, serde_json::Value> = clf
                    .labels
                    .iter()
                    .zip(&p)
                    .map(|(l, x)| (l.clone(), json!(x)))
                    .collect();
                println!(
                    "{}",
                    json!({"text_a": a, "text_b": b, "label": clf.labels[k], "probabilities": probs})
                );
            } else {
                let probs: Vec<String> = clf
                    .labels
                    .iter()
                    .zip(&p)
                    .map(|(l, x)| format!("{l}: {x:.4}"))
                    .collect();
                println!("{}\t(p = {:.4})", clf.labels[k], p[k]);
                println!("probabilities: {}", probs.join(", "));
            }
            Ok(ExitCode::SUCCESS)
        }
        ([], Some(input)) => {
            let rows = read_rows(input, args.header, &clf.labels)?;
            let bar = if cli.quiet || args.json {
                ProgressBar::hidden()
            } else {
                ProgressBar::new(rows.len() as u64)
            };
            bar.set_style(
                ProgressStyle::with_template(
                    "{bar:30.cyan/blue} {pos}/{len} pairs {per_sec} ETA {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            let t0 = Instant::now();
            let encoded: Vec<Encoded> = rows
                .iter()
                .map(|r| clf.encoder.encode(&r.a, &r.b))
                .collect();
            let probs = pair_probabilities(
                &clf.model,
                &encoded,
                args.batch_size,
                &workers,
                &device.device,
                &|n| bar.inc(n as u64),
            );
            bar.finish_and_clear();
            let seconds = t0.elapsed().as_secs_f64();
            let mut correct = 0usize;
            let mut with_gold = 0usize;
            let mut out: Box<dyn Write> = match &args.output {
                Some(path) => Box::new(BufWriter::new(
                    File::create(path)
                        .with_context(|| format!("cannot write {}", path.display()))?,
                )),
                None => Box::new(BufWriter::new(std::io::stdout())),
            };
            let p_cols: Vec<String> = clf.labels.iter().map(|l| format!("p_{l}")).collect();
            if !args.json {
                writeln!(
                    out,
                    "line\ttext_a\ttext_b\tgold\tpredicted\t{}",
                    p_cols.join("\t")
                )?;
            }
            for (r, p) in rows.iter().zip(&probs) {
                let k = argmax(p);
                if let Some(g) = r.gold {
                    with_gold += 1;
                    correct += usize::from(g == k);
                }
                let gold = r.gold.map(|g| clf.labels[g].as_str()).unwrap_or("");
                if args.json {
                    writeln!(
                        out,
                        "{}",
                        json!({"line": r.line, "text_a": r.a, "text_b": r.b, "gold": r.gold.map(|g| &clf.labels[g]),
                               "label": clf.labels[k], "probabilities": p})
                    )?;
                } else {
                    let ps: Vec<String> = p.iter().map(|x| format!("{x:.6}")).collect();
                    writeln!(
                        out,
                        "{}\t{}\t{}\t{gold}\t{}\t{}",
                        r.line,
                        r.a.replace('\t', " "),
                        r.b.replace('\t', " "),
                        clf.labels[k],
                        ps.join("\t")
                    )?;
                }
            }
            out.flush()?;
            if !cli.quiet {
                let acc = if with_gold > 0 {
                    format!(
                        ", accuracy {:.4} on {with_gold} gold labels",
                        correct as f64 / with_gold as f64
                    )
                } else {
                    String::new()
                };
                eprintln!(
                    "{} pairs in {:.2} s ({:.0} pairs/s on {}){acc}",
                    rows.len(),
                    seconds,
                    rows.len() as f64 / seconds.max(1e-9),
                    device.name
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        ([], None) => bail!(
            "give a pair to classify (`pipeline predict --stage finetune_lcqmc \"text a\" \"text b\"`) \
             or a file of pairs (`--input pairs.tsv`)"
        ),
        (_, Some(_)) => bail!("give either two texts or --input FILE, not both"),
        (texts, None) => bail!(
            "give exactly two texts (text_a and text_b), not {}",
            texts.len()
        ),
    }
}
