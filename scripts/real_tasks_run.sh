#!/bin/sh
# The issue-22 measurement on the shared data: a short pretraining (share_type all, 300 steps,
# one masking pass), then ChnSentiCorp, SMP2020-EWECT and MSRA NER fine-tuned from it and from
# random init (seed 1), capped for a 2-core budget, with their baselines.
set -e
cd "$(dirname "$0")/.."
BIN=${BIN:-target/debug/pipeline}
exec "$BIN" run \
  finetune_chnsenticorp finetune_smp2020_ewect finetune_msra_ner \
  baseline_chnsenticorp baseline_smp2020_ewect baseline_msra_ner \
  --set data=../shared/datasets \
  --set pretrain_steps=300 --set 'pretrain_save_steps=[100]' --set pretrain.share_type=all \
  --set mask.dupe_factor=1 \
  --set finetune_chnsenticorp.seed=1 --set finetune_smp2020_ewect.seed=1 --set finetune_msra_ner.seed=1 \
  --set chnsenticorp_max_train_examples=3000 --set smp2020_ewect_max_train_examples=3000 \
  --set finetune_epochs=2 "$@"
