"""Chat templates: checked once before the server listens, rendered in jinja2's immutable sandbox.

A template is code that came with a downloaded file (or from the operator), so it runs in
`ImmutableSandboxedEnvironment`: no attribute starting with `_`, no mutation of lists/dicts passed in,
no loader (so `{% include %}`/`{% import %}` cannot reach files). It gets only the helpers published
templates call: `raise_exception`, `strftime_now` and a `tojson` that accepts HF's keyword options.
The same size/encoding/syntax rules hold for a `--chat-template-file` and for the template embedded
in the GGUF, so a bad template is refused at startup rather than on the first request.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.meta
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_TEMPLATE_BYTES = 256 * 1024

# The default for a model whose GGUF has no template (HF's ChatML default).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
CHATML_STOP = "<|im_end|>"

# Variables the server itself supplies; a client or operator may not set them through kwargs.
RESERVED_KWARGS = frozenset({"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
# A template "has a thinking switch" when its source reads one of these.
THINKING_VARIABLES = ("enable_thinking", "reasoning_effort")
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
# gpt-oss knows three levels ("Reasoning: low|medium|high" in its system message) and always reasons: the others
# become the nearest it knows, and "none" cannot be honoured.
HARMONY_EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}


class ChatTemplateError(ValueError):
    """The template cannot be used: the message says which template and why."""


class TemplateRenderError(ValueError):
    """Rendering failed for this conversation (raise_exception, a bad variable): the request's fault."""


class ThinkingUnsupported(ValueError):
    """reasoning_effort asks for thinking that the template has no switch for (HTTP 501)."""


def _raise_exception(message: str) -> None:
    raise TemplateRenderError(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None, sort_keys=False) -> str:
    # Not jinja2's htmlsafe tojson: templates build prompts, not HTML, and HF's helper takes these options.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols], undefined=jinja2.Undefined
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def read_template_file(path: str | os.PathLike[str]) -> str:
    """The text of a template file, refused (ChatTemplateError) if unreadable, too big, not UTF-8 or empty."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_TEMPLATE_BYTES + 1)
    except OSError as exc:
        raise ChatTemplateError(
            f"chat template file {os.fspath(path)!r} is unreadable: {exc.strerror or exc}"
        ) from None
    if len(data) > MAX_TEMPLATE_BYTES:
        raise ChatTemplateError(f"chat template file {os.fspath(path)!r} is over {MAX_TEMPLATE_BYTES} bytes (256 KiB)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ChatTemplateError(
            f"chat template file {os.fspath(path)!r} is not valid UTF-8 (byte {exc.start})"
        ) from None
    return text


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """A parsed template plus what rendering needs from the model (BOS/EOS text) and server defaults."""

    source: str
    origin: str  # where it came from, for messages: a file path, "GGUF tokenizer.chat_template", "ChatML default"
    bos_token: str = ""
    eos_token: str = ""
    default_kwargs: Mapping[str, Any] = field(default_factory=dict)
    _compiled: jinja2.Template | None = field(default=None, repr=False, compare=False)
    renders_tools: bool = field(default=False, init=False)  # the template reads `tools`: it renders them itself

    def __post_init__(self) -> None:
        if len(self.source.encode("utf-8")) > MAX_TEMPLATE_BYTES:
            raise ChatTemplateError(f"chat template from {self.origin} is over {MAX_TEMPLATE_BYTES} bytes (256 KiB)")
        if not self.source.strip():
            raise ChatTemplateError(f"chat template from {self.origin} is empty")
        check_template_kwargs(self.default_kwargs, "--chat-template-kwargs")
        env = _environment()
        try:
            tree = env.parse(self.source)
        except TemplateError as exc:
            line = f" (line {exc.lineno})" if getattr(exc, "lineno", None) else ""
            raise ChatTemplateError(f"chat template from {self.origin} does not parse{line}: {exc.message}") from None
        object.__setattr__(self, "default_kwargs", dict(self.default_kwargs))
        object.__setattr__(self, "_compiled", env.from_string(tree))
        object.__setattr__(self, "renders_tools", "tools" in jinja2.meta.find_undeclared_variables(tree))
        if self.harmony and self.default_kwargs.get("reasoning_effort") == "none":
            raise ChatTemplateError(
                f"--chat-template-kwargs reasoning_effort 'none': the harmony template from {self.origin} always "
                "reasons (its levels are low, medium and high)"
            )

    @property
    def takes_parts(self) -> bool:
        """The template tells a string content from a list of parts (`content is string`): it gets the parts as
        sent. A test of something else (gpt-oss's `param_spec.type is not string`) does not count."""
        return re.search(r"content(?:'\]|\"\])?\s+is\s+(not\s+)?string\b", self.source) is not None

    @property
    def harmony(self) -> bool:
        """The template writes gpt-oss's harmony frame (`<|start|>ROLE<|channel|>...<|message|>`): the output is
        read by channel (lexi/chat/harmony.py)."""
        return all(token in self.source for token in ("<|start|>", "<|channel|>", "<|message|>"))

    @property
    def call_form(self) -> str:
        """The tool-call form the template teaches: "harmony" for a harmony template, "function" when it shows
        `<function=`, else "json"."""
        if self.harmony:
            return "harmony"
        return "function" if "<function=" in self.source else "json"

    @property
    def has_thinking_switch(self) -> bool:
        return any(name in self.source for name in THINKING_VARIABLES)

    def variables(self, kwargs: Mapping[str, Any] | None = None, reasoning_effort: str | None = None) -> dict[str, Any]:
        """Template variables: server defaults, then the request's kwargs, then its reasoning_effort.

        reasoning_effort comes last because it is the request's explicit choice: on a template with a
        thinking switch it sets both `enable_thinking` and `reasoning_effort`; on one without, any level
        but "none" is refused (ThinkingUnsupported) since the engine does not invent reasoning. A harmony
        template gets the level, from either source, as gpt-oss knows it (HARMONY_EFFORTS), and "none" is refused.
        """
        merged = dict(self.default_kwargs)
        if kwargs:
            check_template_kwargs(kwargs, "chat_template_kwargs")
            merged.update(kwargs)
        if reasoning_effort is not None:
            if reasoning_effort not in REASONING_EFFORTS:
                message = f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}"
                raise TemplateVariablesError("reasoning_effort", message)
            if self.has_thinking_switch:
                merged["enable_thinking"] = reasoning_effort != "none"
                merged["reasoning_effort"] = reasoning_effort
            elif reasoning_effort != "none":
                raise ThinkingUnsupported(
                    f"reasoning_effort {reasoning_effort!r} needs a chat template with a thinking switch; "
                    f"the template from {self.origin} has none"
                )
        if self.harmony and merged.get("reasoning_effort") == "none":
            raise ThinkingUnsupported(
                f"reasoning_effort 'none': the harmony template from {self.origin} always reasons "
                "(its levels are low, medium and high)"
            )
        if self.harmony and merged.get("reasoning_effort") in HARMONY_EFFORTS:
            merged["reasoning_effort"] = HARMONY_EFFORTS[merged["reasoning_effort"]]
        return merged

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        kwargs: Mapping[str, Any] | None = None,
        reasoning_effort: str | None = None,
    ) -> str:
        """The prompt text for `messages`; TemplateRenderError if the template refuses the conversation."""
        variables = self.variables(kwargs, reasoning_effort)
        variables.update(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )
        if tools:
            variables["tools"] = list(tools)
        assert self._compiled is not None
        try:
            return self._compiled.render(**variables)
        except TemplateRenderError:
            raise
        except SecurityError as exc:
            raise TemplateRenderError(f"chat template from {self.origin} tried an unsafe operation: {exc}") from None
        except (TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            raise TemplateRenderError(f"chat template from {self.origin} failed to render: {exc}") from None


class TemplateVariablesError(ValueError):
    """Template variables the request may not pass (`param`: chat_template_kwargs or reasoning_effort): the
    request's fault, raised on purpose, unlike a ValueError from a bug while rendering."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def check_template_kwargs(kwargs: Mapping[str, Any], where: str) -> None:
    """Template variables must be a JSON object of JSON values, never a server-supplied name."""
    if not isinstance(kwargs, Mapping):
        raise TemplateVariablesError(where, f"{where} must be a JSON object")
    for key, value in kwargs.items():
        if not isinstance(key, str):
            raise TemplateVariablesError(where, f"{where} keys must be strings")
        if key in RESERVED_KWARGS:
            raise TemplateVariablesError(where, f"{where} may not set the reserved variable {key!r}")
        if key in ("enable_thinking",) and not isinstance(value, bool):
            raise TemplateVariablesError(where, f"{where}.{key} must be a boolean")
        if key == "reasoning_effort" and value not in REASONING_EFFORTS:
            raise TemplateVariablesError(
                where, f"{where}.reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}"
            )
        if not _is_json_scalar(value):
            raise TemplateVariablesError(
                where, f"{where}.{key} must be a JSON scalar (string, number, boolean or null)"
            )


def _is_json_scalar(value: Any) -> bool:
    if value is None or isinstance(value, bool | str | int):
        return True
    return isinstance(value, float) and value == value and value not in (float("inf"), float("-inf"))
