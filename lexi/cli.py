"""The `lexi-engine` command line: each command parses options into config dataclasses and calls one function."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """LexiEngine: one GGUF model over an OpenAI-compatible HTTP API."""


@main.command("models")
def models_command() -> None:
    """List the bundled models that --model accepts by name."""
    from lexi.gguf.bundled import DEFAULT_MODEL, bundled_models

    for model in bundled_models():
        default = " (default)" if model.name == DEFAULT_MODEL else ""
        if not model.installed:
            where = f"not installed: needs the Python package {model.package}"
        elif model.ready:
            where = str(model.path)
        else:
            where = f"assembled on first use into {model.path}"
        click.echo(f"{model.name}{default}\n    {model.description}\n    {where}")
