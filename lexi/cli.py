"""The `lexi-engine` command line: each command parses options into config dataclasses and calls one function."""

from __future__ import annotations

import click

from lexi.cli_options import LOAD_OPTIONS, json_object, load_config, load_options


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """LexiEngine: one GGUF model over an OpenAI-compatible HTTP API."""
    # OpenMP settings for this process only (lexi/runtime.py); every command imports torch lazily, after this.
    from lexi.runtime import apply_process_defaults

    apply_process_defaults()


@main.command("serve")
@click.option("-m", "--model", "model_name", default=None, help="A GGUF path or a bundled model name (default model).")
@click.option("--alias", multiple=True, help="HTTP model name; repeatable. The first is the public id.")
@click.option("--chat-template-file", default=None, help="A Jinja chat template replacing the GGUF's.")
@click.option("--chat-template-kwargs", callback=json_object, help="JSON object of default template variables.")
@click.option("--reasoning-format", type=click.Choice(["auto", "none"]), default="auto", show_default=True)
@click.option("--temp", type=click.FloatRange(0, 2), default=None, help="Default temperature (0-2).")
@click.option("--top-p", type=click.FloatRange(0, 1), default=None, help="Default top_p (0-1).")
@click.option("--top-k", type=click.IntRange(0, 100000), default=None, help="Default top_k (0-100000).")
@click.option("--min-p", type=click.FloatRange(0, 1), default=None, help="Default min_p (0-1).")
@click.option("--n-predict", type=click.IntRange(1, 131072), default=None, help="Default max_tokens (1-131072).")
@click.option(
    "--queue-wait",
    type=click.FloatRange(0, 86400),
    default=0.0,
    show_default=True,
    help="Seconds a request waits for a free slot before 429 inference_busy (529 overloaded_error on /v1/messages).",
)
@click.option(
    "--spec",
    type=click.Choice(["off", "ngram", "draft"]),
    default="ngram",
    show_default=True,
    help="Speculative decoding: ngram proposes the continuation of the last tokens' earlier occurrence in the "
    "prompt + output, draft what --model-draft writes; checked in one step (output unchanged).",
)
@click.option(
    "--spec-max", type=click.IntRange(1, 64), default=8, show_default=True, help="Tokens proposed at most per step."
)
@click.option(
    "--spec-min-match",
    type=click.IntRange(1, 8),
    default=2,
    show_default=True,
    help="Shortest suffix whose earlier occurrence --spec ngram trusts.",
)
@click.option(
    "--model-draft",
    default=None,
    help="With --spec draft: a smaller GGUF (path or bundled name) with the served model's vocabulary that "
    "proposes the drafts.",
)
@click.option(
    "--spec-p-min",
    type=click.FloatRange(0.0, 1.0),
    default=0.8,
    show_default=True,
    help="--spec draft: a draft stops before a token the draft model gives less probability than this.",
)
@click.option(
    "--constraint-timeout",
    type=click.FloatRange(0.1, 3600),
    default=10.0,
    show_default=True,
    help="Seconds a request with tools or a JSON schema waits for its output constraint to compile.",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--parallel", type=click.IntRange(1, 256), default=4, show_default=True, help="Slots.")
@click.option("--ctx-size", type=click.IntRange(16, 1 << 20), default=4096, show_default=True, help="Tokens per slot.")
@click.option("--batch-size", type=click.IntRange(1, 1 << 16), default=512, show_default=True)
@load_options
@click.option("--api-key", multiple=True, help="Bearer key required on every route but /health; repeatable.")
@click.option("--api-key-file", default=None, help="A file of keys, one a line.")
@click.option(
    "--allowed-origins",
    multiple=True,
    metavar="ORIGIN[,ORIGIN...]",
    help="Browser origins allowed by CORS (scheme://host[:port], or * for any); repeatable or comma-separated.",
)
@click.option(
    "--shutdown-timeout",
    type=click.FloatRange(0, 3600),
    default=30.0,
    show_default=True,
    help="On SIGTERM/SIGINT, seconds running requests get to finish before they are stopped.",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Access and engine logs on stderr: text lines, or one JSON object a line.",
)
@click.option(
    "--responses-store",
    type=click.IntRange(0, 1_000_000),
    default=1024,
    show_default=True,
    help="Responses kept in memory for previous_response_id and GET/DELETE /v1/responses/{id} (least recently "
    "used out); 0 keeps none.",
)
@click.option(
    "--replicas",
    type=click.IntRange(1, 1024),
    default=1,
    show_default=True,
    help="Copies of the model, each with its own engine; above 1 they run on Ray Serve (pip install '.[ray]').",
)
@click.option(
    "--ray-address",
    default=None,
    help="Join this Ray cluster (e.g. auto, or ray://head:10001) instead of starting one; with --replicas > 1.",
)
def serve_command(**opts) -> None:
    """Serve one model over the OpenAI-compatible HTTP API."""
    from lexi.http.ops.logs import configure_logging

    configure_logging(opts["log_format"])
    config, sampling, engine = _serve_configs(opts, _api_keys(opts))
    _check_replica_options(config, opts)
    raise SystemExit(_run_serve(config, sampling, engine, opts))


def _api_keys(opts) -> tuple[str, ...]:
    """--api-key's keys and --api-key-file's; a file that cannot be read, or holds none, is a usage error."""
    from lexi.http.ops.auth import read_key_file

    keys = tuple(opts["api_key"])
    if opts["api_key_file"] is None:
        return keys
    try:
        keys += read_key_file(opts["api_key_file"])
    except (OSError, UnicodeDecodeError) as exc:
        message = f"cannot read {opts['api_key_file']!r}: {exc}"
        raise click.BadParameter(message, param_hint="--api-key-file") from None
    if not keys:
        raise click.BadParameter("the file holds no key", param_hint="--api-key-file")
    return keys


def _serve_configs(opts, keys: tuple[str, ...]):
    """(ServerConfig, SamplingDefaults, EngineConfig) of the options; a field out of range is a usage error."""
    from lexi.engine.config import EngineConfig
    from lexi.engine.ngram import SpecConfig
    from lexi.http.ops.config import SamplingDefaults, ServerConfig

    try:
        config = ServerConfig(
            model=opts["model_name"],
            aliases=opts["alias"],
            chat_template_file=opts["chat_template_file"],
            chat_template_kwargs=opts["chat_template_kwargs"],
            reasoning_format=opts["reasoning_format"],
            host=opts["host"],
            port=opts["port"],
            api_keys=keys,
            constraint_timeout=opts["constraint_timeout"],
            allowed_origins=opts["allowed_origins"],
            shutdown_timeout=opts["shutdown_timeout"],
            log_format=opts["log_format"],
            responses_store=opts["responses_store"],
        )
        sampling = SamplingDefaults(
            temp=opts["temp"],
            top_p=opts["top_p"],
            top_k=opts["top_k"],
            min_p=opts["min_p"],
            n_predict=opts["n_predict"],
        )
        spec = SpecConfig(
            opts["spec"], opts["spec_max"], opts["spec_min_match"], opts["model_draft"], opts["spec_p_min"]
        )
        engine = EngineConfig(
            parallel=opts["parallel"],
            ctx_size=opts["ctx_size"],
            batch_size=opts["batch_size"],
            queue_wait=opts["queue_wait"],
            spec=spec,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    return config, sampling, engine


def _check_replica_options(config, opts) -> None:
    """--ray-address and --port 0 make sense only with, or only without, --replicas N > 1."""
    replicas = opts["replicas"]
    if replicas == 1 and opts["ray_address"] is not None:
        raise click.BadParameter("is used with --replicas N > 1", param_hint="--ray-address")
    if replicas > 1 and config.port == 0:
        raise click.BadParameter(
            "must name a port with --replicas N > 1 (Ray Serve's proxy listens on it)", param_hint="--port"
        )


def _run_serve(config, sampling, engine, opts) -> int:
    """Serve until shut down (Tornado, or Ray Serve with --replicas N > 1): the exit code. What cannot be served
    is a usage error naming its option."""
    from lexi.chat.template import ChatTemplateError
    from lexi.gguf.errors import GGUFError
    from lexi.http.state import DraftModelError
    from lexi.http.tornado.server import ListenError, serve

    def load():  # imports torch: only after the model file and the template have passed their checks
        return load_config(**{key: opts[key] for key in LOAD_OPTIONS})

    try:
        if opts["replicas"] > 1:
            return _serve_replicas(config, sampling, engine, opts)
        return serve(config, sampling, engine, load)
    except ChatTemplateError as exc:
        if config.chat_template_file is not None:
            raise click.BadParameter(str(exc), param_hint="--chat-template-file") from None
        raise click.ClickException(str(exc)) from None
    except GGUFError as exc:  # before anything listens: the file -m names cannot be served
        raise click.BadParameter(str(exc), param_hint="'-m' / '--model'") from None
    except DraftModelError as exc:
        raise click.BadParameter(str(exc), param_hint="--model-draft") from None
    except ListenError as exc:
        raise click.BadParameter(exc.message, param_hint=exc.option) from None


def _serve_replicas(config, sampling, engine, opts) -> int:
    """`serve --replicas N`: Ray Serve is imported only here, and only when it is installed."""
    import os

    # Read when Ray is imported: by default Ray folds log lines of one pattern from several replicas into one
    # "[repeated Nx across cluster]" line, which would drop the replicas' access lines.
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    try:
        from lexi.http.ray_serve.serve import RayJoinError, serve_replicas
    except ImportError as exc:
        message = f"--replicas above 1 needs Ray Serve: pip install 'lexi-engine[ray]' ({exc})"
        raise click.BadParameter(message, param_hint="--replicas") from None
    load = {key: opts[key] for key in LOAD_OPTIONS}
    try:
        return serve_replicas(config, sampling, engine, load, opts["replicas"], opts["ray_address"])
    except RayJoinError as exc:
        raise click.BadParameter(str(exc), param_hint="--ray-address") from None


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
@click.option(
    "--n-predict", type=click.IntRange(1, 131072), default=128, show_default=True, help="Tokens to generate at most."
)
@click.option(
    "--temp", type=click.FloatRange(0.0, 2.0), default=0.8, show_default=True, help="Temperature; 0 is greedy."
)
@click.option("--top-k", type=click.IntRange(min=0), default=40, show_default=True, help="0 = off.")
@click.option("--top-p", type=click.FloatRange(0.0, 1.0), default=0.95, show_default=True, help="1 = off.")
@click.option("--min-p", type=click.FloatRange(0.0, 1.0), default=0.05, show_default=True, help="0 = off.")
@click.option("--seed", type=int, default=None, help="Same seed and prompt give the same text.")
@load_options
@click.option("--json", "as_json", is_flag=True, help='Print {"prompt_tokens", "tokens", "text"} as one JSON object.')
def generate_command(**opts) -> None:
    """Continue one prompt with the model and print the text (no server)."""
    load = load_config(**{key: opts[key] for key in LOAD_OPTIONS})
    tokenizer, model, gen, params = _generator(opts, load)
    _print_generation(tokenizer, model, gen, params, opts["prompt"], opts["as_json"])


def _generator(opts, load):
    """(tokenizer, model, GenerateConfig, SamplingParams) of the options; a file that cannot be served is a usage
    error naming -m, a value out of range one naming the value."""
    from lexi.engine.sampling import SamplingParams
    from lexi.gguf.bundled import resolve_model
    from lexi.gguf.errors import GGUFError
    from lexi.gguf.reader import read_gguf
    from lexi.gguf.tokenizer import Tokenizer
    from lexi.model.generate import GenerateConfig
    from lexi.model.loader import load_model

    try:
        gen = GenerateConfig(n_predict=opts["n_predict"])
        params = SamplingParams(
            temperature=opts["temp"], top_k=opts["top_k"], top_p=opts["top_p"], min_p=opts["min_p"],
            seed=opts["seed"], max_tokens=opts["n_predict"],
        )  # fmt: skip
        f = read_gguf(resolve_model(opts["model_name"]))
        tokenizer = Tokenizer.from_gguf(f)
        model = load_model(f, load, progress=not opts["as_json"])
    except GGUFError as exc:
        raise click.BadParameter(str(exc), param_hint="'-m' / '--model'") from None
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    return tokenizer, model, gen, params


def _print_generation(tokenizer, model, gen, params, prompt: str, as_json: bool) -> None:
    """The text as it comes, or with --json one object of the prompt's tokens, the tokens and the text at the end."""
    import json
    import sys

    from lexi.engine.sampler import Sampler, SamplerState
    from lexi.model.generate import generate_tokens

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
