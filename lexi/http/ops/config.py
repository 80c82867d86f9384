"""What `lexi-engine serve` options decide about the HTTP server, one field per option.

The engine's options live in `lexi.engine.config.EngineConfig` and the loader's in
`lexi.model.loader.LoadConfig`; these two dataclasses hold the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lexi.chat.template import check_template_kwargs
from lexi.http.ops.cors import parse_origins
from lexi.http.ops.logs import LOG_FORMATS
from lexi.http.responses.store import MAX_STORED

REASONING_FORMATS = ("auto", "none")


def _in_range(name: str, value: float, low: float, high: float) -> None:
    if isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{name} must be in [{low:g}, {high:g}], got {value!r}")


@dataclass(frozen=True, slots=True)
class SamplingDefaults:
    """Server-wide defaults for requests that omit the field; None keeps the engine's own default.

    n_predict None means "as many tokens as the context has room for" when a request sets no limit.
    """

    temp: float | None = None  # --temp, 0-2
    top_p: float | None = None  # --top-p, 0-1
    top_k: int | None = None  # --top-k, 0-100000
    min_p: float | None = None  # --min-p, 0-1
    n_predict: int | None = None  # --n-predict, 1-131072

    def __post_init__(self) -> None:
        for name, flag, low, high in (
            ("temp", "--temp", 0, 2),
            ("top_p", "--top-p", 0, 1),
            ("top_k", "--top-k", 0, 100000),
            ("min_p", "--min-p", 0, 1),
            ("n_predict", "--n-predict", 1, 131072),
        ):
            value = getattr(self, name)
            if value is not None:
                _in_range(flag, value, low, high)


@dataclass(frozen=True, slots=True)
class ServerConfig:
    model: str | None = None  # -m: a GGUF path or a bundled model's name; None = the default bundled model
    aliases: tuple[str, ...] = ()  # --alias, repeatable: the first is the public id
    chat_template_file: str | None = None  # --chat-template-file
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)  # --chat-template-kwargs
    reasoning_format: str = "auto"  # --reasoning-format auto|none
    host: str = "127.0.0.1"  # --host
    port: int = 8080  # --port (0 picks a free port)
    api_keys: tuple[str, ...] = ()  # --api-key (repeatable) plus the lines of --api-key-file
    max_body_bytes: int = 8 * 1024 * 1024  # request bodies above this are answered 413
    constraint_timeout: float = 10.0  # --constraint-timeout: seconds to compile a request's output constraint
    allowed_origins: tuple[str, ...] = ()  # --allowed-origins (repeatable, comma lists; * = any): CORS for browsers
    shutdown_timeout: float = 30.0  # --shutdown-timeout: seconds running requests get to finish on SIGTERM/SIGINT
    log_format: str = "text"  # --log-format text|json: the access and engine logs on stderr
    responses_store: int = 1024  # --responses-store: stored Responses kept in memory (LRU); 0 stores none

    def __post_init__(self) -> None:
        if self.reasoning_format not in REASONING_FORMATS:
            raise ValueError(f"--reasoning-format must be one of {', '.join(REASONING_FORMATS)}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port must be in [0, 65535], got {self.port}")
        for alias in self.aliases:
            if not alias or alias != alias.strip():
                raise ValueError(f"--alias must be a non-empty name without surrounding spaces, got {alias!r}")
        if len(set(self.aliases)) != len(self.aliases):
            raise ValueError("--alias names must be distinct")
        if any(not key for key in self.api_keys):
            raise ValueError("--api-key must not be empty")
        check_template_kwargs(self.chat_template_kwargs, "--chat-template-kwargs")
        if not 0.1 <= self.constraint_timeout <= 3600:
            raise ValueError(f"--constraint-timeout must be in [0.1, 3600] seconds, got {self.constraint_timeout}")
        if not 0 <= self.shutdown_timeout <= 3600:
            raise ValueError(f"--shutdown-timeout must be in [0, 3600] seconds, got {self.shutdown_timeout}")
        if self.log_format not in LOG_FORMATS:
            raise ValueError(f"--log-format must be one of {', '.join(LOG_FORMATS)}, got {self.log_format!r}")
        if isinstance(self.responses_store, bool) or not 0 <= self.responses_store <= MAX_STORED:
            raise ValueError(f"--responses-store must be in [0, {MAX_STORED}], got {self.responses_store!r}")
        object.__setattr__(self, "allowed_origins", parse_origins(self.allowed_origins))
        if self.max_body_bytes < 1024:
            raise ValueError(f"max_body_bytes must be at least 1024, got {self.max_body_bytes}")
        object.__setattr__(self, "aliases", tuple(self.aliases))
        object.__setattr__(self, "api_keys", tuple(self.api_keys))
        object.__setattr__(self, "chat_template_kwargs", dict(self.chat_template_kwargs))
