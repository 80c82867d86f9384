"""What the routes share: the configs, the model's names and template, and the runtime once loaded.

`prepare_state` runs before the server listens and refuses (ChatTemplateError, GGUFError) anything
that would make it useless: the model file's header and the chat template are checked there. The
weights, the tokenizer and the engine then load on a background thread while /health answers 503.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lexi.chat.template import CHATML_STOP, CHATML_TEMPLATE, ChatTemplate, read_template_file
from lexi.engine.config import EngineConfig
from lexi.http.ops.config import SamplingDefaults, ServerConfig
from lexi.http.ops.cors import CorsPolicy
from lexi.http.ops.drain import Drain
from lexi.http.ops.metrics import Metrics
from lexi.http.ops.names import ModelNames
from lexi.http.responses.store import ResponseStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Runtime:
    """Set once, when loading finished: routes see all of it or none of it."""

    tokenizer: Any  # lexi.gguf.tokenizer.Tokenizer
    engine: Any  # lexi.engine.engine.Engine
    constraints: Any  # lexi.structured.ConstraintCompiler: this vocabulary's compiled constraints


@dataclass(slots=True)
class ServerState:
    config: ServerConfig
    sampling: SamplingDefaults
    engine_config: EngineConfig
    model_path: Path
    names: ModelNames
    template: ChatTemplate
    extra_stop: tuple[str, ...] = ()  # stop strings the template implies (ChatML default on a foreign vocabulary)
    draft_gguf: Any = None  # --spec draft: the draft model's file (lexi.gguf.reader.GGUFFile), its vocabulary checked
    fingerprint: str = ""  # system_fingerprint: this build and this model file
    created: int = field(default_factory=lambda: int(time.time()))
    runtime: Runtime | None = None
    load_error: str | None = None
    cluster: Any = None  # lexi.http.ray_serve.Cluster at the entry to N replicas: /health and /metrics span them
    drain: Drain = field(default_factory=Drain)  # requests still running; set draining on SIGTERM/SIGINT
    # the stored Responses: this process's ResponseStore, or under Ray the one actor every process shares
    responses: Any = None
    metrics: Metrics = field(init=False)
    cors: CorsPolicy = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = Metrics(lambda: self.runtime.engine.stats if self.runtime else None)
        self.cors = CorsPolicy(self.config.allowed_origins)
        if self.responses is None:
            self.responses = ResponseStore(self.config.responses_store)

    @property
    def ready(self) -> bool:
        return self.runtime is not None


def template_for(config: ServerConfig, metadata: dict[str, Any]) -> ChatTemplate:
    """The file's template if given, else the GGUF's, else ChatML; each held to the same checks."""
    tokens = metadata.get("tokenizer.ggml.tokens") or []

    def token(key: str) -> str:
        index = metadata.get(key)
        return tokens[index] if isinstance(index, int) and 0 <= index < len(tokens) else ""

    if config.chat_template_file is not None:
        source, origin = read_template_file(config.chat_template_file), f"file {config.chat_template_file!r}"
    elif "tokenizer.chat_template" in metadata:
        source, origin = metadata["tokenizer.chat_template"], "the GGUF's tokenizer.chat_template"
    else:
        source, origin = CHATML_TEMPLATE, "the ChatML default"
    return ChatTemplate(
        source,
        origin,
        bos_token=token("tokenizer.ggml.bos_token_id"),
        eos_token=token("tokenizer.ggml.eos_token_id"),
        default_kwargs=config.chat_template_kwargs,
    )


def fingerprint(path: Path) -> str:
    """A stable digest of the package version and the model file (name, size, modification time)."""
    try:
        version = importlib.metadata.version("lexi-engine")
    except importlib.metadata.PackageNotFoundError:
        version = "0"
    info = path.stat()
    digest = hashlib.sha256(f"{version}|{path.name}|{info.st_size}|{info.st_mtime_ns}".encode()).hexdigest()
    return f"fp_{digest[:12]}"


def prepare_state(config: ServerConfig, sampling: SamplingDefaults, engine_config: EngineConfig):
    """(state, gguf file): everything checkable before listening. Raises on a bad model file or template."""
    from lexi.gguf.bundled import resolve_model
    from lexi.gguf.reader import read_gguf

    path = resolve_model(config.model)
    gguf_file = read_gguf(path)
    template = template_for(config, gguf_file.metadata)
    _warn_past_trained_context(gguf_file, engine_config.ctx_size)
    tokens = gguf_file.metadata.get("tokenizer.ggml.tokens") or []
    extra_stop = (CHATML_STOP,) if template.source == CHATML_TEMPLATE and CHATML_STOP not in tokens else ()
    draft = None
    if engine_config.spec.model_draft is not None:
        draft = read_draft_model(engine_config.spec.model_draft, gguf_file)
    state = ServerState(
        config=config,
        sampling=sampling,
        engine_config=engine_config,
        model_path=path,
        names=ModelNames.build(config.aliases, path),
        template=template,
        extra_stop=extra_stop,
        fingerprint=fingerprint(path),
        draft_gguf=draft,
    )
    return state, gguf_file


class DraftModelError(ValueError):
    """--model-draft names a file that cannot draft for the served model."""


def read_draft_model(name: str, target):
    """The draft model's GGUF, refused unless its vocabulary is the served model's token for token (a draft is
    token ids: with another vocabulary they would mean other text). Raises DraftModelError."""
    from lexi.gguf.bundled import resolve_model
    from lexi.gguf.errors import GGUFError
    from lexi.gguf.reader import read_gguf

    try:
        draft = read_gguf(resolve_model(name))
    except (GGUFError, OSError, ValueError) as exc:
        raise DraftModelError(str(exc)) from None
    ours = target.metadata.get("tokenizer.ggml.tokens") or []
    theirs = draft.metadata.get("tokenizer.ggml.tokens") or []
    if list(ours) != list(theirs):
        pairs = enumerate(zip(ours, theirs, strict=False))
        differ = next((i for i, (a, b) in pairs if a != b), min(len(ours), len(theirs)))
        raise DraftModelError(
            f"its vocabulary is not the served model's ({len(theirs)} tokens against {len(ours)}, first difference "
            f"at token {differ}): a draft model must share the tokenizer"
        )
    return draft


def _warn_past_trained_context(gguf_file, ctx_size: int) -> None:
    """Served, but said: positions past the trained context are outside what the model learned (llama.cpp warns
    the same way; the file's own RoPE settings are used as they are, nothing extends them)."""
    trained = gguf_file.metadata.get(f"{gguf_file.architecture}.context_length")
    if trained is not None and ctx_size > int(trained):
        log.warning(
            "--ctx-size %d is more than the %d tokens the model was trained on: past position %d its output "
            "is likely to degrade",
            ctx_size, int(trained), int(trained),
        )  # fmt: skip


def load_in_background(state: ServerState, gguf_file, load_config, on_done: Callable[[str | None], None]) -> None:
    """Build tokenizer, model and engine on a thread; `on_done(error)` is called from that thread."""

    def work() -> None:
        try:
            from lexi.chat.constraint_plan import plan_output
            from lexi.chat.response_format import ResponseFormat
            from lexi.engine.engine import Engine
            from lexi.gguf.tokenizer import Tokenizer
            from lexi.model.loader import load_model
            from lexi.model.memory import memory_report
            from lexi.structured import CompilerConfig, ConstraintCompiler, ConstraintVocabulary

            started = time.monotonic()
            tokenizer = Tokenizer.from_gguf(gguf_file)
            constraints = ConstraintCompiler(
                ConstraintVocabulary(tokenizer), CompilerConfig(timeout=state.config.constraint_timeout)
            )
            # the one schema every client may send: compiled while the weights load (seconds on a 262k vocabulary)
            json_object = plan_output(None, "json", ResponseFormat("json_object"), None)
            constraints.prewarm(json_object)
            constraints.prewarm_counted()  # the insides of long strings, walked once for all schemas
            # A tqdm bar over the tensors on a terminal (never with JSON logs); these lines everywhere else.
            size_mb = state.model_path.stat().st_size / 1e6
            log.info("loading %d tensors (%.0f MB) from %s", len(gguf_file.tensors), size_mb, state.model_path)
            weights_started = time.monotonic()
            model = load_model(gguf_file, load_config, progress=state.config.log_format == "text")
            log.info("weights loaded in %.1f s", time.monotonic() - weights_started)
            draft_model = None
            if state.draft_gguf is not None:
                draft_model = load_model(state.draft_gguf, load_config)
                log.info("draft model loaded (%d layers) for --spec draft", draft_model.args.n_layers)
            engine = Engine(model, tokenizer, state.engine_config, draft_model)
            cfg = state.engine_config
            log.info("%s", memory_report(model, engine.runner.kv_cache).line(cfg.parallel, cfg.ctx_size))
            engine.start()
            state.runtime = Runtime(tokenizer, engine, constraints)
            log.info("model %s ready in %.1f s", state.names.public_id, time.monotonic() - started)
            on_done(None)
        except Exception as exc:  # the server cannot become ready: say why and let the caller stop
            log.exception("loading the model failed")
            state.load_error = f"{type(exc).__name__}: {exc}"
            on_done(state.load_error)

    threading.Thread(target=work, name="lexi-load", daemon=True).start()
