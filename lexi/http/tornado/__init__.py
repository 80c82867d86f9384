"""The Tornado transport: one process, `make_app` and the server that runs it."""
