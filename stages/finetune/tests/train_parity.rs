//! Fine-tuning checked against transformers step by step (issue 13, section 1): the stage's
//! [`FineTuner`] (micro-batches per core, global-norm clipping, the warmup/decay schedule,
//! AdamW with its no-decay group, as `params.optim_config` sets it up) on a pair classifier
//! built as the stage builds it ([`TaskModel::build`] on a pretrain-style export), and
//! transformers' `AlbertForSequenceClassification` in torch, from the same weights, on the same
//! batches (LCQMC fixture pairs through our `PairEncoder`, `epoch_batches` and `batch_input`),
//! fp32, no dropout. The loss of every step and the final weights must agree. bf16 mixed
//! precision is compared with transformers under `torch.autocast` (libtorch devices only).
//! `ALBERT_TEST_DEVICE` picks our side's device (default `flex`; `tch-cpu` in a `tch` build).
//! Without a Python that has torch and transformers the test trains ours only and says so.

#[path = "../../../tests/fixtures/train_reference.rs"]
mod reference;

use std::path::Path;

use burn::module::Module;
use burn::tensor::Device;
use pipeline_albert::model::MatmulPrecision;
use pipeline_albert::{Activation, AlbertConfig, AlbertForPreTraining, hf};
use pipeline_text::vocab::Vocab;
use reference::{OurStep, Tolerance, bf16_or_skip, compare, job, run_reference, test_device};
use serde_json::{Value, json};
use stage_finetune::TrainParams;
use stage_finetune::data::epoch_batches;
use stage_finetune::encode::{Encoded, PairEncoder, batch_input};
use stage_finetune::task_model::{Source, TaskModel};
use stage_finetune::train::FineTuner;

const STEPS: u64 = 25;

fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/fixtures")
}

/// A model directory as the pretrain stage leaves it (weights, config, vocabulary, tokenizer),
/// with fresh weights of a tiny config over the fixture vocabulary.
fn pretrained_dir(dir: &Path, device: &Device) -> usize {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::copy(fixtures().join("vocab/vocab.txt"), dir.join("vocab.txt")).unwrap();
    let vocab = Vocab::load(&dir.join("vocab.txt")).unwrap();
    let tok = pipeline_text::hf::wordpiece_tokenizer(&vocab, true).unwrap();
    pipeline_text::hf::write_tokenizer_json(&tok, &dir.join("tokenizer.json")).unwrap();
    let mut c = AlbertConfig::named("tiny").unwrap();
    c.vocab_size = vocab.len();
    c.embedding_size = 16;
    c.hidden_size = 32;
    c.num_attention_heads = 4;
    c.intermediate_size = 64;
    c.num_hidden_layers = 2;
    c.max_position_embeddings = 64;
    c.hidden_act = Activation::GeluNew;
    device.seed(17);
    let model = AlbertForPreTraining::new(&c, device);
    hf::save_pretraining(dir, &c, &model.valid()).unwrap();
    c.hidden_size
}

/// LCQMC fixture pairs and labels.
fn pairs() -> (Vec<(String, String)>, Vec<usize>) {
    let text = std::fs::read_to_string(fixtures().join("lcqmc/dev.tsv")).unwrap();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Some((
                (f[0].to_string(), f[1].to_string()),
                f[2].trim().parse::<usize>().ok()?,
            ))
        })
        .unzip()
}

fn tensor_rows<T: burn::tensor::Element>(
    data: burn::tensor::TensorData,
    width: usize,
) -> Vec<Vec<T>> {
    data.convert::<T>()
        .try_to_vec::<T>()
        .unwrap()
        .chunks(width)
        .map(<[T]>::to_vec)
        .collect()
}

/// The padded batch our step feeds the model on `device`, as the reference reads it.
fn batch_json(rows: &[&[Encoded]], labels: &[usize], device: &Device) -> Value {
    let flat: Vec<&Encoded> = rows.iter().flat_map(|r| r.iter()).collect();
    let input = batch_input(&flat, device);
    let [_, s] = input.input_ids.dims();
    json!({
        "input_ids": tensor_rows::<i64>(input.input_ids.into_data(), s),
        "token_type_ids": tensor_rows::<i64>(input.token_type_ids.into_data(), s),
        "attention_mask": tensor_rows::<f32>(input.attention_mask.into_data(), s)
            .iter()
            .map(|r| r.iter().map(|&m| m as i64).collect::<Vec<_>>())
            .collect::<Vec<_>>(),
        "labels": labels,
    })
}

#[test]
fn fine_tuning_a_pair_classifier_follows_transformers() {
    let tol = Tolerance {
        early_loss: 1e-4,
        early_steps: 5,
        loss: 1e-3,
        grad_norm: 1e-3,
        weight_vs_moved: 1e-2,
    };
    check("classify", MatmulPrecision::Fp32, tol);
}

/// bf16 mixed precision against transformers under `torch.autocast` on the CPU.
///
/// Measured (libtorch 2.11, 2 x86 cores, 2026-11-29, the pooler and the classifier in bf16 as
/// autocast runs them, the activations between products in bf16): the first step's loss
/// 2.5e-5 off (bound 1e-4), every step's within 5.0e-4 (bound 5e-3; 3.2e-4 while those
/// activations went back to float32), the final weights within 0.82× how far the reference
/// moved each tensor (bound 5; 1.35× before); with the two in float32, three runs before,
/// 1.5–1.8e-5, 2.9–7.7e-4 and 0.6–1.9×.
/// Unlike pretraining's (stages/pretrain/tests/train_parity.rs) this check does not tell our
/// bf16 path from float32: at a loss of ln 2 both are about as far from autocast's first loss
/// (ours in float32 1.8e-5, in bf16 2.5e-5; 7e-6 apart), so it bounds the drift only;
/// `bf16_finetuning_follows_the_fp32_loss_curve` (src/train.rs) checks that bf16 changes the
/// run. The gradient norms are held to 100 %: at the steps where the loss
/// is flat they are ~0.01, and rounding moves them by tens of percent (10–68 % measured).
#[test]
fn fine_tuning_in_bf16_follows_transformers_under_autocast() {
    if !bf16_or_skip("stage-finetune") {
        return;
    }
    let tol = Tolerance {
        early_loss: 1e-4,
        early_steps: 1,
        loss: 5e-3,
        grad_norm: 1.0,
        weight_vs_moved: 5.0,
    };
    check("classify-bf16", MatmulPrecision::Bf16, tol);
}

/// `STEPS` fine-tuning steps of a pair classifier in `precision` on the device under test,
/// against the reference (under autocast for bf16).
fn check(name: &str, precision: MatmulPrecision, tol: Tolerance) {
    let _serial = reference::one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let device = test_device().autodiff();
    let pre = tmp.path().join("pretrained");
    let hidden = pretrained_dir(&pre, &device);
    let params = json!({
        "init": "pretrained",
        "optimizer": "adamw",
        "learning_rate": 2e-3,
        "warmup_fraction": 0.2,
        "max_grad_norm": 1.0,
        "batch_size": 8,
        "max_seq_length": 32,
        "dropout": 0.0,
        "hidden_dropout": 0.0,
        "seed": 3,
    });
    let p = TrainParams::parse(params.as_object().unwrap(), tmp.path()).unwrap();
    let source = Source {
        dir: pre.clone(),
        pretrain_instance: None,
        imported: None,
        pretraining: None,
    };
    let labels = vec!["0".to_string(), "1".to_string()];
    let (config, model) = TaskModel::build(&source, &p, labels.len(), false, &device).unwrap();
    let (init_dir, ours_dir) = (tmp.path().join("init"), tmp.path().join("ours"));
    model.valid().save(&init_dir, &config, &labels).unwrap();
    let model = model.with_precision(precision);

    let encoder = PairEncoder::load(&pre, p.encoding(usize::MAX)).unwrap();
    let (texts, gold) = pairs();
    let rows: Vec<Vec<Encoded>> = texts
        .iter()
        .map(|(a, b)| vec![encoder.encode(a, b)])
        .collect();
    let lengths: Vec<usize> = rows.iter().map(|r| r[0].ids.len()).collect();
    let batches: Vec<Vec<usize>> = (1..)
        .flat_map(|epoch| epoch_batches(&lengths, p.batch_size, p.seed + epoch, true))
        .take(STEPS as usize)
        .collect();

    let optim = p.optim_config(STEPS);
    let mut tuner = FineTuner::new(model, optim.clone(), device.clone(), hidden, false);
    eprintln!(
        "{name}: {} data-parallel worker(s)",
        tuner.parallel.workers()
    );
    let mut ours = Vec::new();
    let mut steps_json = Vec::new();
    for (k, batch) in batches.iter().enumerate() {
        let x: Vec<&[Encoded]> = batch.iter().map(|&i| &rows[i][..]).collect();
        let y: Vec<usize> = batch.iter().map(|&i| gold[i]).collect();
        steps_json.push(json!([batch_json(&x, &y, &device)]));
        let r = tuner
            .step(k as u64, &x, &y)
            .expect("a sequence classifier trains on classes")
            .read();
        ours.push(OurStep {
            loss: r.loss,
            grad_norm: Some(r.grad_norm),
            lr: optim.lr_at(k as u64),
        });
    }
    tuner
        .model
        .valid()
        .save(&ours_dir, &config, &labels)
        .unwrap();

    let mut job = job("classify", &init_dir, &ours_dir, &optim, steps_json);
    job["precision"] = precision.name().into();
    if let Some(report) = run_reference(&job, tmp.path()) {
        let m = compare(name, &ours, &report, &optim, &tol);
        assert!(m.clipped_steps > 0, "{name}: clipping never acted");
    }
}
