"""The OpenAI- and Anthropic-compatible HTTP server: API surfaces, the generation layer, operations, transports."""
