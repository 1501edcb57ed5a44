#!/usr/bin/env python3
"""Writes the single-text and tagging fixtures under datasets/fixtures (synthetic sentences made
from templates written for this project; nothing is copied from the benchmarks). Seeded, so
running it again gives the same files."""
import json, os, random

R = random.Random(20261125)
ROOT = os.path.join(os.path.dirname(__file__), "..", "datasets", "fixtures")

THINGS = ["酒店", "房间", "早餐", "服务", "这本书", "手机", "电脑", "饭菜", "商场", "位置", "环境", "价格"]
GOOD = ["很好", "非常干净", "特别舒服", "真不错", "很满意", "值得推荐", "很方便", "让人开心"]
BAD = ["太差了", "很旧", "不太好", "让人失望", "非常吵", "太贵了", "很不方便", "服务态度差"]
TAILS = ["，下次还会来。", "，朋友也这么说。", "。", "，总的来说就是这样。", "，我不会再来了。", "！"]


def review(pos):
    a, b = R.sample(THINGS, 2)
    w = GOOD if pos else BAD
    tail = R.choice(TAILS[:4] if pos else TAILS[2:])
    return f"{a}{R.choice(w)}，{b}也{R.choice(w)}{tail}"


def write(path, header, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        if header:
            f.write(header + "\n")
        for r in rows:
            f.write("\t".join(r) + "\n")


def sentiment():
    seen = set()
    def rows(n):
        out = []
        while len(out) < n:
            pos = len(out) % 2
            t = review(pos)
            if t not in seen:
                seen.add(t)
                out.append((str(pos), t))
        return out
    for split, n in [("train", 120), ("dev", 30), ("test", 30)]:
        write(f"{ROOT}/chnsenticorp/{split}.tsv", "label\ttext_a", rows(n))


EMO = {
    "0": ["今天去上班", "下午开会", "晚上看书", "周末在家"],
    "1": ["气死我了", "太过分了", "真让人生气", "吵死了"],
    "2": ["太开心了", "好高兴啊", "真快乐", "笑死我了"],
    "3": ["好难过", "心里很难受", "想哭", "真难过"],
    "4": ["好害怕", "怕死我了", "不敢出门", "真可怕"],
    "5": ["没想到", "太意外了", "居然是真的", "居然这样"],
}
SUBJ = ["同事", "妈妈", "老师", "朋友", "邻居", "我"]


def emotion():
    seen = set()
    def rows(n):
        out = []
        while len(out) < n:
            k = str(len(out) % 6)
            t = f"{R.choice(SUBJ)}说{R.choice(EMO[k])}，{R.choice(SUBJ)}也{R.choice(EMO[k])}"
            if t not in seen:
                seen.add(t)
                out.append((k, t))
        return out
    for split, n in [("train", 120), ("dev", 30), ("test", 30)]:
        write(f"{ROOT}/smp2020_ewect/{split}.tsv", "label\ttext_a", rows(n))


PER = ["王明", "张红", "小林", "老王", "大山", "陈静"]
LOC = ["北京", "上海", "广东", "西湖", "中山", "东山"]
ORG = ["人民银行", "图书馆", "公安局", "电视台", "中山大学"]
FRAMES = [
    ["P", "在", "L", "工作"],
    ["P", "昨天到了", "L"],
    ["O", "在", "L", "开会"],
    ["P", "说", "O", "很好"],
    ["今天天气很好"],
    ["L", "的", "O", "发布了消息"],
    ["P", "用", "#iPhone", "给", "P", "打电话"],
]


def tagged(frame):
    chars, tags = [], []
    for part in frame:
        if part in ("P", "L", "O") and len(part) == 1:
            name = R.choice({"P": PER, "L": LOC, "O": ORG}[part])
            t = {"P": "PER", "L": "LOC", "O": "ORG"}[part]
            for i, c in enumerate(name):
                chars.append(c)
                tags.append(("B-" if i == 0 else "I-") + t)
        elif part.startswith("#"):
            # A Latin run kept as one unit: the tokenizer splits it into word pieces.
            chars.append(part[1:])
            tags.append("O")
        else:
            for c in part:
                chars.append(c)
                tags.append("O")
    return chars, tags


def sentences(n, long_every=0):
    out = []
    for i in range(n):
        k = 1 if not long_every or i % long_every else 8
        chars, tags = [], []
        for _ in range(k):
            c, t = tagged(R.choice(FRAMES))
            if chars:
                chars.append("，"); tags.append("O")
            chars += c; tags += t
        chars.append("。"); tags.append("O")
        out.append((chars, tags))
    return out


def ner():
    for split, n in [("dev", 100), ("test", 40)]:
        rows = [(" ".join(c), " ".join(t)) for c, t in sentences(n, long_every=10)]
        write(f"{ROOT}/msra_ner/{split}.tsv", "text_a\tlabel", rows)
    for split, n in [("train", 60), ("test", 20)]:
        with open(f"{ROOT}/conll_ner/{split}.txt", "w", encoding="utf-8") as f:
            for c, t in sentences(n):
                for a, b in zip(c, t):
                    f.write(f"{a} {b}\n")
                f.write("\n")


if __name__ == "__main__":
    os.makedirs(f"{ROOT}/conll_ner", exist_ok=True)
    sentiment(); emotion(); ner()
