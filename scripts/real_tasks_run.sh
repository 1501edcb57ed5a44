#!/bin/sh
# The added task kinds on the shared data, one seed: a short pretraining (share all, 300 steps, one
# masking pass, the default decontaminated corpus), then ChnSentiCorp, SMP2020-EWECT, MSRA NER,
# CMRC 2018 and C3 fine-tuned from it and from random init (2 epochs, train capped for a 2-core
# budget), with their baselines on the same examples. About 50 minutes on 2 cores.
set -e
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/pipeline}
exec "$BIN" run \
  finetune_chnsenticorp finetune_smp2020_ewect finetune_msra_ner finetune_cmrc2018 finetune_c3 \
  baseline_chnsenticorp baseline_smp2020_ewect baseline_msra_ner baseline_cmrc2018 baseline_c3 \
  --set data=../shared/datasets \
  --set pretrain_steps=300 --set 'pretrain_save_steps=[100]' --set pretrain.share_type=all \
  --set mask.dupe_factor=1 --set 'finetune_seeds=[1]' --set finetune_epochs=2 \
  --set chnsenticorp_max_train_examples=3000 --set smp2020_ewect_max_train_examples=3000 \
  --set cmrc2018_max_train_examples=1000 --set c3_max_train_examples=1000 "$@"
