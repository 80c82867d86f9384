"""llama.cpp server extras: /tokenize, /detokenize, /apply-template."""
