//! Class 7 of issue 20: model files (safetensors, `pytorch_model.bin`, `config.json`) are checked
//! against each other before anything is allocated.

use super::*;

const CONFIG: &str = r#"{"model_type": "albert", "architectures": ["AlbertForPreTraining"], "vocab_size": 30, "embedding_size": 4, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 16}"#;

fn model_case(config: &str, weights: &[u8], needle: &str) {
    let c = Case::new(ONE_STAGE);
    c.ws.write("m/config.json", config);
    c.ws.write("m/model.safetensors", weights);
    let out = c.run(&["model", "info", "--model", "m"]);
    assert_ne!(out.code, 0, "{}", out.describe());
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(all.contains(needle), "no {needle:?} in\n{}", out.describe());
    assert!(!all.contains("loads as is"), "{}", out.describe());
    c.finish();
}

#[test]
fn model_five_byte_safetensors_says_what_is_wrong() {
    model_case(CONFIG, b"hello", "not a safetensors file (5 bytes");
}

#[test]
fn model_absurd_vocab_size_is_checked_against_the_weights() {
    let config = CONFIG.replace("\"vocab_size\": 30", "\"vocab_size\": 4000000");
    let weights = safetensors(
        r#"{"albert.embeddings.word_embeddings.weight":{"dtype":"F32","shape":[30,4],"data_offsets":[0,480]}}"#,
        480,
    );
    model_case(&config, &weights, "config.json says vocab_size");
}

#[test]
fn model_header_longer_than_the_file_is_refused() {
    let mut bytes = u64::MAX.to_le_bytes().to_vec();
    bytes.extend(b"{}");
    model_case(CONFIG, &bytes, "not a valid safetensors file");
}

#[test]
fn model_header_that_is_not_json_is_refused() {
    model_case(CONFIG, &safetensors("{{{{", 0), "not valid JSON");
}

#[test]
fn model_tensor_beyond_the_end_is_refused() {
    let weights = safetensors(
        r#"{"albert.embeddings.word_embeddings.weight":{"dtype":"F32","shape":[30,4],"data_offsets":[0,480]}}"#,
        100,
    );
    model_case(CONFIG, &weights, "truncated");
}

#[test]
fn model_tensor_with_a_shape_its_bytes_do_not_hold_is_refused() {
    let weights = safetensors(
        r#"{"a":{"dtype":"F32","shape":[4000000000,4000000000],"data_offsets":[0,16]}}"#,
        16,
    );
    model_case(CONFIG, &weights, "should take");
}

/// The header of a complete safetensors file for [`CONFIG`] (zeros for data), with the named
/// tensors given other shapes (or left out, for an empty shape).
fn tiny_model(changed: &[(&str, &[u64])]) -> Vec<u8> {
    let g = "albert.encoder.albert_layer_groups.0.albert_layers.0";
    let mut tensors: Vec<(String, Vec<u64>)> = vec![
        (
            "albert.embeddings.word_embeddings.weight".into(),
            vec![30, 4],
        ),
        (
            "albert.embeddings.position_embeddings.weight".into(),
            vec![16, 4],
        ),
        (
            "albert.embeddings.token_type_embeddings.weight".into(),
            vec![2, 4],
        ),
        ("albert.embeddings.LayerNorm.weight".into(), vec![4]),
        ("albert.embeddings.LayerNorm.bias".into(), vec![4]),
        (
            "albert.encoder.embedding_hidden_mapping_in.weight".into(),
            vec![8, 4],
        ),
        (
            "albert.encoder.embedding_hidden_mapping_in.bias".into(),
            vec![8],
        ),
    ];
    for w in ["query", "key", "value", "dense"] {
        tensors.push((format!("{g}.attention.{w}.weight"), vec![8, 8]));
        tensors.push((format!("{g}.attention.{w}.bias"), vec![8]));
    }
    tensors.push((format!("{g}.ffn.weight"), vec![16, 8]));
    tensors.push((format!("{g}.ffn.bias"), vec![16]));
    tensors.push((format!("{g}.ffn_output.weight"), vec![8, 16]));
    tensors.push((format!("{g}.ffn_output.bias"), vec![8]));
    for (name, shape) in changed {
        tensors.retain(|(n, _)| !n.ends_with(name));
        if !shape.is_empty() {
            tensors.push((name.to_string(), shape.to_vec()));
        }
    }
    let mut header = serde_json::Map::new();
    let mut at = 0u64;
    for (name, shape) in tensors {
        let bytes = 4 * shape.iter().product::<u64>();
        header.insert(
            name,
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [at, at + bytes]}),
        );
        at += bytes;
    }
    safetensors(&Value::Object(header).to_string(), at as usize)
}

fn config_with(key: &str, value: &str) -> String {
    let mut v: Value = serde_json::from_str(CONFIG).unwrap();
    v[key] = serde_json::from_str(value).unwrap();
    v.to_string()
}

#[test]
fn model_header_without_word_embeddings_is_refused() {
    let weights = tiny_model(&[("word_embeddings.weight", &[])]);
    model_case(
        CONFIG,
        &weights,
        "have no `albert.embeddings.word_embeddings.weight`",
    );
}

#[test]
fn model_absurd_hidden_size_is_checked_against_the_weights() {
    let config = config_with("hidden_size", "65536");
    model_case(&config, &tiny_model(&[]), "hidden_size × hidden_size");
}

#[test]
fn model_absurd_intermediate_size_is_checked_against_the_weights() {
    let config = config_with("intermediate_size", "262144");
    model_case(&config, &tiny_model(&[]), "intermediate_size × hidden_size");
}

#[test]
fn model_absurd_num_hidden_layers_is_checked_against_the_weights() {
    let config = config_with("num_hidden_layers", "1000");
    let config = {
        let mut v: Value = serde_json::from_str(&config).unwrap();
        v["share_type"] = "none".into();
        v.to_string()
    };
    model_case(
        &config,
        &tiny_model(&[]),
        "num_hidden_layers = 1000 with share_type none",
    );
}

#[test]
fn model_absurd_num_attention_heads_is_refused() {
    let config = config_with("num_attention_heads", "1000");
    model_case(
        &config,
        &tiny_model(&[]),
        "not divisible by num_attention_heads",
    );
}

#[test]
fn model_absurd_size_of_a_tensor_the_file_lacks_is_refused() {
    // No position table to compare with: the parameter count the config implies catches it.
    let config = config_with("max_position_embeddings", "131072");
    let weights = tiny_model(&[("position_embeddings.weight", &[])]);
    model_case(&config, &weights, "backbone parameters");
}

#[test]
fn model_pytorch_bin_smaller_than_its_config_is_refused() {
    let c = Case::new(ONE_STAGE);
    c.ws.write("m/config.json", CONFIG);
    c.ws.write("m/pytorch_model.bin", vec![0u8; 1000]);
    let out = c.run(&["model", "info", "--model", "m"]);
    expect(
        &out,
        1,
        "needs at least 1680 bytes of weights, but the file has 1000",
    );
    c.finish();
}

#[test]
fn model_config_json_over_the_size_limit_is_refused_unread() {
    let c = Case::new(ONE_STAGE);
    c.ws.write("m/model.safetensors", tiny_model(&[]));
    // Sparse: 4 GiB read whole would not fit under the address-space limit.
    let f = std::fs::File::create(c.ws.path("m/config.json")).unwrap();
    f.set_len(4 << 30).unwrap();
    let t0 = Instant::now();
    let out = c.run(&["model", "info", "--model", "m"]);
    expect(&out, 1, "larger than 16 MiB");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    c.finish();
}

#[test]
fn model_config_that_is_not_json_is_refused() {
    model_case("{ nope", &safetensors("{}", 0), "not valid JSON");
}
