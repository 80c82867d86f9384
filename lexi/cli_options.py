"""Options more than one `lexi-engine` command shares, and what they parse into (lexi/cli.py's commands)."""

from __future__ import annotations

import click

from lexi.kernels.backend import KERNELS

LOAD_OPTIONS = ("dtype", "device", "deterministic", "kernels", "activations")  # LoadConfig's fields, as options


def load_options(command):
    """--dtype, --device, --deterministic, --kernels, --activations: how the model loads, for serve and generate."""
    options = [
        click.option(
            "--dtype",
            type=click.Choice(["auto", "float32", "bfloat16", "float16"]),
            default="auto",
            show_default=True,
        ),
        click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True),
        click.option(
            "--deterministic",
            is_flag=True,
            help="Greedy output independent of the batch and of prefix-cache hits (slower prefill; CPU).",
        ),
        click.option(
            "--kernels",
            type=click.Choice(KERNELS),
            default="auto",
            show_default=True,
            help="auto: Triton on CUDA, the CPU kernels elsewhere. triton on a CPU needs TRITON_INTERPRET=1 (slow).",
        ),
        click.option(
            "--activations",
            type=click.Choice(["int16", "int8"]),
            default="int16",
            show_default=True,
            help="CPU: a matmul's input as two int8 terms (finer than bfloat16) or one (llama.cpp's; faster prefill).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def load_config(**fields):
    """The LoadConfig of these options, checked against this machine (imports torch): an option that cannot be
    met here (--kernels triton without CUDA or the interpreter, say) is a usage error naming it, exit 2."""
    from lexi.model.loader import LoadConfig, LoadConfigError

    try:
        config = LoadConfig(**fields)
        config.resolve()
    except LoadConfigError as exc:
        raise click.BadParameter(exc.message, param_hint=f"--{exc.field}") from None
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    return config


def json_object(ctx, param, value):
    """A click callback: the option's JSON object as a dict ({} when the option is absent)."""
    import json

    if value is None:
        return {}
    try:
        data = json.loads(value)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise click.BadParameter("must be a JSON object")
    return data
