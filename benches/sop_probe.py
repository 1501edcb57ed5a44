#!/usr/bin/env python3
"""How much of sentence-order prediction a shortcut gets right: a rule that reads nothing but
whether each segment starts or ends with sentence-final punctuation.

    .venv-torch/bin/python benches/sop_probe.py .pipeline/artifacts/mask/<hash> \\
        ../shared/datasets/vocab/vocab.txt

The rule is a lookup table (four yes/no features -> the label most training pairs with them
have), fitted on the mask artifact's training shards and scored on its eval shard. 50 % means
the segments' edges say nothing of their order; what a pretrained model scores above this
rule is what it learned of the text. Measured 2026-11-30 on experiment.yaml's corpus at
`dupe_factor: 1` (stages/mask/src/pairs.rs says what each figure decided): 54.6 % unpacked,
51.0 % packed before A and B were kept inside one document, 66.4 % with trimming at the outer
ends only, 53.95 % as `mask` now cuts and trims. Needs pyarrow (`scripts/setup-python.sh`).
"""
import collections
import glob
import sys

import pyarrow.ipc as ipc

CLS, SEP = 101, 102
FINAL_MARKS = ('。', '！', '？', '!', '?', '…', '；', ';', '」', '”', '"')


def pairs(path):
    """Each instance's segments A and B (original ids, masking undone) and its order label."""
    with open(path, 'rb') as f:
        reader = ipc.open_file(f)
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i).to_pydict()
            for ids, positions, originals, label in zip(
                    batch['input_ids'], batch['masked_positions'], batch['masked_ids'],
                    batch['sentence_order_label']):
                ids = list(ids)
                for p, o in zip(positions, originals):
                    ids[p] = o
                sep = ids.index(SEP)
                a, b = ids[1:sep], ids[sep + 1:-1]
                if a and b:
                    yield a, b, label


def main():
    artifact, vocab_path = sys.argv[1], sys.argv[2]
    vocab = [line.rstrip('\n') for line in open(vocab_path, encoding='utf-8')]
    final = {i for i, token in enumerate(vocab) if token in FINAL_MARKS}

    def features(a, b):
        return (a[-1] in final, b[-1] in final, a[0] in final, b[0] in final)

    table = collections.defaultdict(collections.Counter)
    for shard in sorted(glob.glob(f'{artifact}/shard-*.arrow')):
        for a, b, label in pairs(shard):
            table[features(a, b)][label] += 1
    rule = {k: counts.most_common(1)[0][0] for k, counts in table.items()}
    right = total = 0
    for eval_shard in sorted(glob.glob(f'{artifact}/eval-*.arrow')):
        for a, b, label in pairs(eval_shard):
            total += 1
            right += rule.get(features(a, b), 0) == label
    print(f'punctuation-only SOP rule: {right / total:.4f} of {total} eval pairs')


if __name__ == '__main__':
    main()
