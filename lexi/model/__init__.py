"""The transformer families as PyTorch modules, built from a GGUF file."""
