"""Log lines in one of two formats (`--log-format`): text for a person at a terminal, JSON for a collector.

Every record goes through the root logger's one handler on stderr (stdout keeps the server's few
status lines), so the access log, the engine's logs and Tornado's own share a format. In JSON each
line is one object: `time`, `level`, `logger`, `message`, and for an answered request `request_id`,
`method`, `path`, `route`, `status`, `latency_ms`, `prompt_tokens`, `completion_tokens`.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

LOG_FORMATS = ("text", "json")
ACCESS_LOGGER = "lexi.access"
REQUEST_ID_HEADER = "X-Request-Id"
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_SANE_ID = re.compile(r"^[A-Za-z0-9._:/+=~-]{1,128}$")


class JsonFormatter(logging.Formatter):
    """One JSON object a line; fields passed as `extra={"fields": {...}}` are merged in at the top level."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        entry: dict[str, Any] = {
            "time": stamp,
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(log_format: str, level: int = logging.INFO) -> None:
    """Give the root logger exactly one stderr handler in `log_format` (the CLI calls this once)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"--log-format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(_TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def pick_request_id(sent: str | None) -> str:
    """The client's `X-Request-Id` when it is sane (so its logs and ours join on it), else a fresh id.

    Sane: 1-128 characters of letters, digits and `._:/+=~-`, which covers UUIDs, ULIDs and the ids
    proxies write, and keeps anything that could forge a log line or a header out.
    """
    if sent is not None and _SANE_ID.match(sent):
        return sent
    return f"req_{uuid.uuid4().hex}"


def access_level(status: int) -> int:
    """A 503 while the model loads or the server drains is expected, not a fault; other 5xx are errors."""
    if status < 400 or status == 503:
        return logging.INFO
    return logging.WARNING if status < 500 else logging.ERROR


def log_access(
    *,
    request_id: str,
    method: str,
    path: str,
    remote_ip: str | None,
    route: str,
    status: int,
    latency_s: float,
    tokens: tuple[int, int] | None,
    drafts: tuple[int, int] | None = None,
) -> None:
    """One line per answered request: text for people, the same facts as fields for JSON. `drafts`: speculation's
    (proposed, taken) draft tokens, when any was checked."""
    latency_ms = round(1000.0 * latency_s, 2)
    fields = {
        "request_id": request_id,
        "method": method,
        "path": path,
        "route": route,
        "status": status,
        "latency_ms": latency_ms,
        "prompt_tokens": tokens[0] if tokens else None,
        "completion_tokens": tokens[1] if tokens else None,
        "remote_ip": remote_ip,
        "draft_proposed": drafts[0] if drafts else None,
        "draft_taken": drafts[1] if drafts else None,
    }
    usage = f" tokens={tokens[0]}+{tokens[1]}" if tokens else ""
    usage += f" drafts={drafts[1]}/{drafts[0]}" if drafts else ""
    message = f"{status} {method} {path} ({remote_ip}) {latency_ms:.2f}ms id={request_id}{usage}"
    logging.getLogger(ACCESS_LOGGER).log(access_level(status), message, extra={"fields": fields})
