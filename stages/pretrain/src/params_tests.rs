//! The params as written, checked: defaults, the batch params, and the errors that name a bad one.

use super::*;
use serde_json::json;

fn parse(v: Value) -> Result<PretrainParams, String> {
    PretrainParams::parse(v.as_object().unwrap(), Path::new("/tmp")).map_err(|e| e.0)
}

#[test]
fn defaults_and_overrides() {
    let p = parse(json!({"share_type": "ffn", "steps": 100})).unwrap();
    assert_eq!(p.optim.warmup_steps, 10);
    let c = p.model_config(Some(1291)).unwrap();
    assert_eq!(c.vocab_size, 1291);
    assert_eq!(c.share_type, pipeline_albert::ShareType::Ffn);
    assert_eq!(c.hidden_size, 312);
}

#[test]
fn batch_params_give_the_micro_batch_and_the_accumulation() {
    let batching = |v: Value| {
        let p = parse(v)?;
        Ok::<_, String>((p.batch_size, p.grad_accum_steps, p.auto_batch))
    };
    assert_eq!(batching(json!({})), Ok((32, 1, None)));
    assert_eq!(
        batching(json!({"batch_size": 16, "effective_batch_size": 64})),
        Ok((16, 4, None))
    );
    assert_eq!(
        batching(json!({"batch_size": 16, "grad_accum_steps": 3})),
        Ok((16, 3, None))
    );
    // auto: the CPU's 32 rows until a GPU's probe says otherwise, dividing the step's rows.
    let auto = |e| Some(AutoBatch { effective: e });
    assert_eq!(
        batching(json!({"batch_size": "auto"})),
        Ok((32, 1, auto(None)))
    );
    assert_eq!(
        batching(json!({"batch_size": "auto", "effective_batch_size": 256})),
        Ok((32, 8, auto(Some(256))))
    );
    assert_eq!(
        batching(json!({"batch_size": "auto", "effective_batch_size": 24})),
        Ok((8, 3, auto(Some(24))))
    );
    for (v, want) in [
        (
            json!({"batch_size": 32, "effective_batch_size": 100}),
            "effective_batch_size 100 is not a multiple of batch_size 32",
        ),
        (
            json!({"grad_accum_steps": 2, "effective_batch_size": 64}),
            "give one of them",
        ),
        (
            json!({"batch_size": "max"}),
            "must be a number of rows or auto",
        ),
        (
            json!({"effective_batch_size": 0}),
            "effective_batch_size must be at least 1",
        ),
    ] {
        let e = batching(v.clone()).expect_err("refused");
        assert!(e.contains(want), "{v}: {e}");
    }
}

#[test]
fn auto_micro_batches_are_powers_of_two_that_divide_the_step() {
    let free = AutoBatch { effective: None };
    assert_eq!(free.micro_batch(1024), 1024);
    assert_eq!(free.micro_batch(1000), 512, "a power of two");
    assert_eq!(free.cap(), AUTO_BATCH_MAX);
    let fixed = AutoBatch {
        effective: Some(384),
    };
    assert_eq!(
        fixed.micro_batch(1024),
        128,
        "the largest power of two dividing 384"
    );
    assert_eq!(fixed.micro_batch(64), 64);
    assert_eq!(fixed.cap(), 384);
    let p = parse(json!({"batch_size": "auto", "effective_batch_size": 384})).unwrap();
    let found = p.with_micro_batch(128);
    assert_eq!((found.batch_size, found.grad_accum_steps), (128, 3));
    let p = parse(json!({"batch_size": "auto", "grad_accum_steps": 2})).unwrap();
    let found = p.with_micro_batch(512);
    assert_eq!((found.batch_size, found.grad_accum_steps), (512, 2));
}

#[test]
fn bad_params_are_named() {
    for (v, want) in [
        (json!({"batch_size": 0}), "batch_size must be at least 1"),
        (json!({"share_type": "some"}), "unknown share_type"),
        (json!({"steps": 0}), "steps must be at least 1"),
        (json!({"learning_rate": -1.0}), "learning_rate"),
        (json!({"device": "gpu"}), "unknown device"),
        (json!({"precision": "fp8"}), "precision"),
        (json!({"num_attention_heads": 7}), "not divisible"),
        (json!({"model": "tinny"}), "did you mean \"tiny\""),
        (json!({"warmup_steps": 5000, "steps": 10}), "warmup_steps"),
        (json!({"eval_batches": "all"}), "eval_batches must be auto"),
        (json!({"save_steps": 50}), "save_steps must be a list"),
        (json!({"save_steps": [0], "steps": 10}), "from 1 to 9"),
        (json!({"save_steps": [10], "steps": 10}), "the final model"),
    ] {
        let e = match parse(v.clone()) {
            Ok(p) => p.model_config(None).unwrap_err().0,
            Err(e) => e,
        };
        assert!(e.contains(want), "{v}: {e}");
    }
    let p = parse(json!({"steps": 1000})).unwrap();
    // 5 evaluations share 0.08 × 3 × 1000 = 240 batches.
    assert_eq!(p.eval_batches_for(), 48);
    let p = parse(json!({"steps": 60, "save_steps": [40, 20, 40]})).unwrap();
    assert_eq!(p.save_steps, [20, 40]);
    let p = parse(json!({"steps": 60, "eval_batches": 7})).unwrap();
    assert_eq!(p.eval_batches_for(), 7);
    assert!(p.sop, "SOP is trained unless turned off");
    assert!(!parse(json!({"sop": false})).unwrap().sop);
    assert!(
        parse(json!({"sop": "no"}))
            .unwrap_err()
            .contains("sop must be true or false")
    );
    let p = parse(json!({"vocab_size": 100})).unwrap();
    assert!(
        p.model_config(Some(1291))
            .unwrap_err()
            .0
            .contains("1291 tokens")
    );
}
