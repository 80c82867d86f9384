"""The one error type of `lexi.gguf`: every refusal names the file and what is wrong with it."""

from __future__ import annotations


class GGUFError(ValueError):
    """A GGUF file (or model name) that cannot be used, with one message saying why.

    A ValueError so that callers validating user input (the CLI, the server's startup) can treat it
    like any other bad argument; the message is meant to be shown to a person as it is.
    """
