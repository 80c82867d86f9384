"""POST /v1/completions: the request parser, the reply shaper (bodies and chunks), the route."""
