"""LexiEngine: one GGUF model served over an OpenAI-compatible HTTP API."""
