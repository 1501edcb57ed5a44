//! Timing fine-tuning steps on synthetic batches (`pipeline bench finetune`).
