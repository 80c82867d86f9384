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


@main.command("generate")
@click.option(
    "-m",
    "--model",
    "model_name",
    default=None,
    help="A GGUF path or a bundled model name (default: the default model).",
)
@click.option("--prompt", required=True, help="The text to continue (special tokens written in it are parsed).")
@click.option("--n-predict", type=int, default=128, show_default=True, help="Tokens to generate at most.")
@click.option("--temp", type=float, default=0.8, show_default=True, help="Temperature; 0 is greedy.")
@click.option("--top-k", type=int, default=40, show_default=True, help="0 = off.")
@click.option("--top-p", type=float, default=0.95, show_default=True, help="1 = off.")
@click.option("--min-p", type=float, default=0.05, show_default=True, help="0 = off.")
@click.option("--seed", type=int, default=None, help="Same seed and prompt give the same text.")
@click.option(
    "--dtype", type=click.Choice(["auto", "float32", "bfloat16", "float16"]), default="auto", show_default=True
)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--json", "as_json", is_flag=True, help='Print {"prompt_tokens", "tokens", "text"} as one JSON object.')
def generate_command(model_name, prompt, n_predict, temp, top_k, top_p, min_p, seed, dtype, device, as_json) -> None:
    """Continue one prompt with the model and print the text (no server)."""
    import json
    import sys

    from lexi.engine.sampler import Sampler, SamplerState
    from lexi.engine.sampling import SamplingParams
    from lexi.gguf.bundled import resolve_model
    from lexi.gguf.errors import GGUFError
    from lexi.gguf.reader import read_gguf
    from lexi.gguf.tokenizer import Tokenizer
    from lexi.model.generate import GenerateConfig, generate_tokens
    from lexi.model.loader import LoadConfig, load_model

    try:
        load = LoadConfig(dtype=dtype, device=device)
        gen = GenerateConfig(n_predict=n_predict)
        params = SamplingParams(
            temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed, max_tokens=max(n_predict, 1)
        )
        f = read_gguf(resolve_model(model_name))
        tokenizer = Tokenizer.from_gguf(f)
        model = load_model(f, load, progress=not as_json)
    except (GGUFError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    sampler, state = Sampler(model.args.vocab_size), SamplerState(params)

    def pick(logits, history):
        return sampler.sample(logits[None], [state], [history])[0].token_id

    prompt_ids = tokenizer.encode(prompt)
    tokens = []
    detok = tokenizer.detokenizer()
    try:
        for token in generate_tokens(model, prompt_ids, pick, gen, tokenizer.eog_ids):
            tokens.append(token)
            if not as_json:
                sys.stdout.write(detok.feed(token))
                sys.stdout.flush()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if as_json:
        text = tokenizer.decode(tokens)
        click.echo(json.dumps({"prompt_tokens": prompt_ids, "tokens": tokens, "text": text}, ensure_ascii=False))
    else:
        click.echo(detok.finish())
