"""The ONNX model's single-sequence latency and peak memory on one core (benches/onnx.sh).

Subcommands:
  make-model DIR            a random-weight albert_tiny_zh-sized classifier (H 312, E 128,
                            4 layers, 12 heads, intermediate 1248, vocabulary 21128) as a
                            model directory (config.json + model.safetensors in transformers'
                            names) for `pipeline model export --to onnx`; random weights time
                            the same as trained ones.
  quantize IN OUT           onnxruntime's int8 dynamic quantisation of IN (weights int8,
                            activations quantised per call).
  time MODEL [--seq N] [--runs N]
                            one process, one intra-op thread: median/p90 latency of one
                            sequence of N tokens over the runs (after warm-up), and the
                            process's peak RSS (ru_maxrss), with what it was before the
                            model was loaded (Python, numpy and onnxruntime's libraries) and
                            once it was; one JSON line.
  feed MODEL OUT [--seq N]  the inputs `time` feeds (the same values) and the outputs this
                            host's onnxruntime gives for them, with `time`'s session options,
                            as JSON for benches/onnx_host (the model hosted without Python),
                            which runs the same inputs and checks its outputs against these.

Needs numpy and onnxruntime (and onnx for quantize); nothing else.
"""

import json
import os
import resource
import struct
import sys
import time

import numpy as np

TINY = dict(vocab_size=21128, embedding_size=128, hidden_size=312, num_hidden_layers=4,
            num_attention_heads=12, intermediate_size=1248, max_position_embeddings=512,
            type_vocab_size=2)


def tiny_config():
    """config.json as `pipeline` writes a fine-tuned classifier's (albert_zh's `gelu` is the
    tanh approximation, transformers' `gelu_new`)."""
    c = dict(TINY)
    c.update({
        "architectures": ["AlbertForSequenceClassification"], "model_type": "albert",
        "num_hidden_groups": 1, "inner_group_num": 1, "hidden_act": "gelu_new",
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
        "initializer_range": 0.02, "layer_norm_eps": 1e-12,
        "position_embedding_type": "absolute", "pad_token_id": 0,
        "share_type": "all", "ln_type": "postln",
        "id2label": {"0": "negative", "1": "positive"},
        "label2id": {"negative": 0, "positive": 1},
    })
    return c


def tiny_tensors(rng):
    """The classifier's tensors, transformers' names and PyTorch's [out, in] linear layout."""
    v, e, h, i = (TINY[k] for k in ("vocab_size", "embedding_size", "hidden_size",
                                    "intermediate_size"))
    normal = lambda *shape: rng.normal(0.0, 0.02, shape).astype(np.float32)
    t = {
        "albert.embeddings.word_embeddings.weight": normal(v, e),
        "albert.embeddings.position_embeddings.weight": normal(TINY["max_position_embeddings"], e),
        "albert.embeddings.token_type_embeddings.weight": normal(2, e),
        "albert.embeddings.LayerNorm.weight": np.ones(e, np.float32),
        "albert.embeddings.LayerNorm.bias": np.zeros(e, np.float32),
        "albert.encoder.embedding_hidden_mapping_in.weight": normal(h, e),
        "albert.encoder.embedding_hidden_mapping_in.bias": np.zeros(h, np.float32),
        "albert.pooler.weight": normal(h, h),
        "albert.pooler.bias": np.zeros(h, np.float32),
        "classifier.weight": normal(2, h),
        "classifier.bias": np.zeros(2, np.float32),
    }
    layer = "albert.encoder.albert_layer_groups.0.albert_layers.0."
    for name in ("query", "key", "value", "dense"):
        t[f"{layer}attention.{name}.weight"] = normal(h, h)
        t[f"{layer}attention.{name}.bias"] = np.zeros(h, np.float32)
    for name, shape in (("attention.LayerNorm", h), ("full_layer_layer_norm", h)):
        t[f"{layer}{name}.weight"] = np.ones(shape, np.float32)
        t[f"{layer}{name}.bias"] = np.zeros(shape, np.float32)
    t[f"{layer}ffn.weight"] = normal(i, h)
    t[f"{layer}ffn.bias"] = np.zeros(i, np.float32)
    t[f"{layer}ffn_output.weight"] = normal(h, i)
    t[f"{layer}ffn_output.bias"] = np.zeros(h, np.float32)
    return t


def write_safetensors(path, tensors):
    """The safetensors format: an 8-byte little-endian header length, a JSON header of
    dtype/shape/offsets, then the data."""
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for blob in blobs:
            f.write(blob)


def make_model(out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(tiny_config(), f, indent=2)
    write_safetensors(os.path.join(out, "model.safetensors"),
                      tiny_tensors(np.random.default_rng(0)))


def quantize(src, dst):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    quantize_dynamic(src, dst, weight_type=QuantType.QInt8)


def peak_rss_mb():
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def session(model):
    """One intra-op and one inter-op thread, sequential, every graph optimisation: the
    settings benches/onnx_host uses too."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def make_feed(seq):
    """One sequence of `seq` random token ids, all attended, one segment."""
    rng = np.random.default_rng(1)
    return {
        "input_ids": rng.integers(0, TINY["vocab_size"], (1, seq), dtype=np.int64),
        "attention_mask": np.ones((1, seq), np.int64),
        "token_type_ids": np.zeros((1, seq), np.int64),
    }


def write_feed(model, out, seq):
    sess = session(model)
    feed = make_feed(seq)
    outputs = sess.run(None, feed)
    with open(out, "w") as f:
        json.dump({
            "inputs": {name: value.reshape(-1).tolist() for name, value in feed.items()},
            "outputs": {o.name: value.astype(np.float64).reshape(-1).tolist()
                        for o, value in zip(sess.get_outputs(), outputs)},
            "seq": seq,
        }, f)


def time_model(model, seq, runs):
    import onnxruntime as ort
    before = peak_rss_mb()
    sess = session(model)
    loaded = peak_rss_mb()
    feed = make_feed(seq)
    for _ in range(10):
        sess.run(None, feed)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        sess.run(None, feed)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    print(json.dumps({
        "host": "python (onnxruntime module)", "file": os.path.basename(model), "seq": seq, "runs": runs, "threads": 1,
        "median_ms": round(times[len(times) // 2], 3),
        "p90_ms": round(times[int(len(times) * 0.9)], 3),
        "min_ms": round(times[0], 3),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "rss_before_model_mb": round(before, 1),
        "peak_rss_after_load_mb": round(loaded, 1),
        "onnxruntime": ort.__version__,
    }))


def main(argv):
    if len(argv) >= 2 and argv[0] == "make-model":
        make_model(argv[1])
    elif len(argv) >= 3 and argv[0] == "quantize":
        quantize(argv[1], argv[2])
    elif len(argv) >= 2 and argv[0] == "time":
        seq = int(argv[argv.index("--seq") + 1]) if "--seq" in argv else 128
        runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 200
        time_model(argv[1], seq, runs)
    elif len(argv) >= 3 and argv[0] == "feed":
        seq = int(argv[argv.index("--seq") + 1]) if "--seq" in argv else 128
        write_feed(argv[1], argv[2], seq)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
