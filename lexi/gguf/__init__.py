"""Reading GGUF files: metadata, tensors, tokenizer, reference dequantizers, bundled models."""
