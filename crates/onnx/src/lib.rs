//! A fine-tuned ALBERT written as an ONNX graph that onnxruntime runs.
