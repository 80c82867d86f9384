"""The `lexi-engine` command line: each command parses options into config dataclasses and calls one function."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """LexiEngine: one GGUF model over an OpenAI-compatible HTTP API."""
