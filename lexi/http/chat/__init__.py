"""POST /v1/chat/completions: the request parser, the reply shaper (bodies and chunks), the route."""
