#!/usr/bin/env python3
"""The Python side of benches/serve.sh: a transformers text-classification pipeline behind
uvicorn/FastAPI, serving a model directory in transformers' format (a `finetune` artifact of
this project: config.json + model.safetensors + vocab.txt + tokenizer.json), with the request
and response shapes of `pipeline serve`; and the random-init `tiny` ALBERT the benchmark
fine-tunes from.

    .venv-torch/bin/python benches/serve_transformers.py serve --model DIR [--port 0]
        [--infer-threads 2] [--threads 1]
    .venv-torch/bin/python benches/serve_transformers.py init-tiny OUT_DIR [--vocab VOCAB]

`serve` prints `http://127.0.0.1:PORT` as its first stdout line once the socket is bound (so
`--port 0` takes a free port, as `pipeline serve --port 0` does), then serves until SIGTERM or
SIGINT:

    POST /predict   {"text": ...} | {"text_a": ..., "text_b": ...} | a JSON array of those
                    -> the same object (or array) with "label" and "probabilities" added
    GET  /health    {"status": "ok"}

How it is run, and why (the server a researcher would write, with the settings that measured
best for it on 2 cores):
- One uvicorn worker, one process: `pipeline serve` is one process too, and two workers on 2
  cores would each hold a model and fight over the same cores.
- Requests run through the model on --infer-threads threads at once (default 2: the cores
  benches/serve.sh pins both servers to), each with its own pipeline and tokenizer over the one
  model (a fast tokenizer shared across threads can fail with "Already borrowed"), while the
  event loop goes on parsing and answering HTTP. A request holding a list of inputs is one
  pipeline call with batch_size = its length.
- torch.set_num_threads(--threads, default 1): one intra-op thread per inference thread, so the
  threads add up to the cores. torch would otherwise size its pool to the machine's cores, not
  the affinity mask. Measured on the 2 shared cores (tiny, 64-character texts, wrk at 16
  connections, alternating, two rounds): 1 inference thread × 2 torch threads gave 12-17
  requests/s with a p99 of seconds (a forward this small waits at every op on its second
  thread, which a busy neighbour holds up), 6 × 2 (FastAPI's thread pool for a plain `def`
  endpoint is of this kind) 91-92, 2 × 1 109, 6 × 1 99-108.
- torch.inference_mode around the pipeline call, the transformers pipeline's own tokenizer
  (the fast tokenizer from tokenizer.json), fp32 as ours.

init-tiny writes albert_zh's `tiny` shape (hidden 312, embedding 128, 4 layers, 12 heads, FFN
1248, GELU, vocabulary 21,128, position 512, full sharing) with transformers' random
initialisation as an AlbertForPreTraining directory (config.json, model.safetensors, vocab.txt,
tokenizer.json), the `init_from` of the benchmark's fine-tuning stages: throughput does not
depend on the weights, only on the shape.
"""

import argparse
import asyncio
import json
import os
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_VOCAB = REPO.parent / "shared" / "datasets" / "vocab" / "vocab.txt"

# albert_zh's albert_tiny_zh (shared/datasets/albert_zh_configs), as crates/albert's `tiny`.
TINY = dict(
    hidden_size=312,
    embedding_size=128,
    num_hidden_layers=4,
    num_attention_heads=12,
    intermediate_size=1248,
    hidden_act="gelu",
    max_position_embeddings=512,
    type_vocab_size=2,
    num_hidden_groups=1,
    inner_group_num=1,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def init_tiny(out: Path, vocab: Path) -> None:
    """A random-init tiny ALBERT (with its pretraining heads: our `init_from` reads those names) with the bert-base-chinese vocabulary and tokenizer."""
    import shutil

    import torch
    from tokenizers import BertWordPieceTokenizer
    from transformers import AlbertConfig, AlbertForPreTraining

    if not vocab.is_file():
        sys.exit(f"init-tiny: no vocabulary at {vocab} (pass --vocab)")
    # BERT's WordPiece over the vocabulary, lower-cased, as albert_zh's tokenizer.
    tokenizer = BertWordPieceTokenizer(str(vocab), lowercase=True)
    torch.manual_seed(0)
    config = AlbertConfig(vocab_size=tokenizer.get_vocab_size(), **TINY)
    model = AlbertForPreTraining(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    shutil.copyfile(vocab, out / "vocab.txt")
    tokenizer.save(str(out / "tokenizer.json"))
    params = sum(p.numel() for p in model.parameters())
    print(f"init-tiny: {out} ({params:,} parameters)", file=sys.stderr)


def load_model(model_dir: Path):
    from transformers import AlbertForSequenceClassification

    model = AlbertForSequenceClassification.from_pretrained(model_dir)
    model.eval()
    return model


def load_pipeline(model_dir: Path, model=None):
    """transformers' text-classification pipeline over `model_dir` (or `model`, loaded from
    it), on the CPU, in fp32, with a tokenizer of its own."""
    from transformers import BertTokenizerFast, pipeline

    model = model if model is not None else load_model(model_dir)
    # tokenizer.json is what our artifact ships; BertTokenizerFast reads it directly (albert_zh
    # models use BERT's WordPiece vocabulary, not ALBERT's SentencePiece one).
    tokenizer = BertTokenizerFast(tokenizer_file=str(model_dir / "tokenizer.json"))
    return pipeline(
        "text-classification",
        model=model,
        tokenizer=tokenizer,
        device="cpu",
        top_k=None,
    )


def pipeline_input(item):
    """One request object as the pipeline's input; a ValueError names the missing field."""
    if not isinstance(item, dict):
        raise ValueError("each input must be a JSON object")
    if "text" in item:
        return item["text"]
    if "text_a" in item and "text_b" in item:
        return {"text": item["text_a"], "text_pair": item["text_b"]}
    raise ValueError('an input needs "text", or "text_a" and "text_b"')


def answer(item, scores, labels):
    """The request object echoed with the label and each class' probability, as ours answers."""
    by_label = {s["label"]: s["score"] for s in scores}
    best = max(scores, key=lambda s: s["score"])
    return {
        **item,
        "label": best["label"],
        "probabilities": {label: by_label[label] for label in labels},
    }


def make_app(model_dir: Path, infer_threads: int):
    import torch
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    model = load_model(model_dir)
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    worker = ThreadPoolExecutor(max_workers=infer_threads, thread_name_prefix="infer")
    local = threading.local()
    app = FastAPI()

    def infer(inputs):
        if not hasattr(local, "clf"):
            local.clf = load_pipeline(model_dir, model)
        with torch.inference_mode():
            return local.clf(inputs, batch_size=len(inputs))

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.post("/predict")
    async def predict(request: Request):
        try:
            body = json.loads(await request.body())
            items = body if isinstance(body, list) else [body]
            if not items:
                raise ValueError("an empty list")
            inputs = [pipeline_input(item) for item in items]
        except ValueError as e:  # JSONDecodeError is one
            return JSONResponse({"error": str(e)}, status_code=400)
        loop = asyncio.get_running_loop()
        scores = await loop.run_in_executor(worker, infer, inputs)
        out = [answer(item, s, labels) for item, s in zip(items, scores)]
        return out if isinstance(body, list) else out[0]

    return app


def serve(a) -> None:
    import torch
    import uvicorn

    # Why: see the module doc (one process pinned to N cores; torch would size its pool to all).
    torch.set_num_threads(a.threads)
    app = make_app(Path(a.model), a.infer_threads)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((a.host, a.port))
    host, port = sock.getsockname()
    print(f"http://{host}:{port}", flush=True)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, workers=1, backlog=2048
    )
    # uvicorn handles SIGTERM/SIGINT: stops accepting, finishes what is in flight.
    uvicorn.Server(config).run(sockets=[sock])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve a model directory over HTTP")
    s.add_argument("--model", required=True, help="a model directory in transformers' format")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=0, help="0: a free port")
    s.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    s.add_argument(
        "--infer-threads", type=int, default=2, help="requests run through the model at once"
    )
    i = sub.add_parser("init-tiny", help="write a random-init tiny ALBERT directory")
    i.add_argument("out")
    i.add_argument("--vocab", default=os.environ.get("SERVE_BENCH_VOCAB", DEFAULT_VOCAB))
    a = p.parse_args()
    if a.cmd == "serve":
        serve(a)
    else:
        init_tiny(Path(a.out), Path(a.vocab))


if __name__ == "__main__":
    main()
