"""The OpenAI-compatible HTTP server over Tornado."""
