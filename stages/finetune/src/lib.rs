//! The `finetune` stage kind (being written).
