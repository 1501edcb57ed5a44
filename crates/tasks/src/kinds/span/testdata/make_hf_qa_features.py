# Writes hf_qa_features.json (stdout): the features transformers builds on the run_qa.py path (fast
# tokenizer, truncation only_second, stride, overflowing tokens, and run_qa's labelling loop) for a
# toy WordPiece vocabulary; span_features' parity test compares against them. Run with a Python
# that has transformers and tokenizers (tested with 5.24.0 / 0.23.3):
#   python make_hf_qa_features.py > hf_qa_features.json
import json
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

ctxs = [
    ("光荣和ω-force开发了 Samurai Warriors 3，于2010年在日本发行。它的续作在2011年发行，销量很好。", "谁开发的？", "光荣和ω-force"),
    ("光荣和ω-force开发了 Samurai Warriors 3，于2010年在日本发行。它的续作在2011年发行，销量很好。", "续作哪年发行？", "2011年"),
    ("光荣和ω-force开发了 Samurai Warriors 3，于2010年在日本发行。它的续作在2011年发行，销量很好。", "卖得怎样？", "销量很好"),
    ("北京是中国的首都。", "首都是哪里？", "北京"),
]
chars = sorted(set("".join(c + q for c, q, _ in ctxs)))
vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "samurai", "war", "##rior", "##s", "3", "20", "##10", "##11", "force", "-"]
vocab += [c for c in chars if not c.isascii()]
vocab = list(dict.fromkeys(vocab))
tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
tok.normalizer = normalizers.BertNormalizer(lowercase=True)
tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
tok.post_processor = processors.TemplateProcessing(
    single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
    special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
fast = PreTrainedTokenizerFast(tokenizer_object=tok, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", unk_token="[UNK]")
max_length, stride = 20, 4
out = []
for ctx, q, ans in ctxs:
    start_char = ctx.index(ans); end_char = start_char + len(ans)
    te = fast(q, ctx, truncation="only_second", max_length=max_length, stride=stride,
              return_overflowing_tokens=True, return_offsets_mapping=True, return_token_type_ids=True)
    feats = []
    for i, offsets in enumerate(te["offset_mapping"]):
        input_ids = te["input_ids"][i]; cls_index = input_ids.index(fast.cls_token_id)
        seq = te.sequence_ids(i)
        ts = 0
        while seq[ts] != 1: ts += 1
        tend = len(input_ids) - 1
        while seq[tend] != 1: tend -= 1
        if not (offsets[ts][0] <= start_char and offsets[tend][1] >= end_char):
            sp = ep = cls_index
        else:
            while ts < len(offsets) and offsets[ts][0] <= start_char: ts += 1
            sp = ts - 1
            while offsets[tend][1] >= end_char: tend -= 1
            ep = tend + 1
        feats.append({"input_ids": input_ids, "token_type_ids": te["token_type_ids"][i], "start": sp, "end": ep})
    c = tok.encode(ctx, add_special_tokens=False)
    b = lambda o: len(ctx[:o].encode())
    out.append({"context": ctx, "question_ids": tok.encode(q, add_special_tokens=False).ids,
                "context_ids": c.ids, "context_starts": [b(o[0]) for o in c.offsets],
                "answer": [b(start_char), b(end_char)], "features": feats})
print(json.dumps(out, ensure_ascii=False))
