"""Real servers, each started once for the tests of this folder (and stopped after them, so that the
model tests that follow have the memory): the main one (aliases, an API key, the GGUF's ChatML
template, one slot and no queue, --deterministic), one with a thinking template and sampling defaults (no
alias), a one-slot server with --queue-wait and --reasoning-format none, a tool-calling one (a Hermes-style
template that renders tools, --deterministic so that a request gives the same tokens whatever shares
its steps, four slots), and Gemma 3 with a turn template. Each is launched on first use of the set it
belongs to, and a set's model loads overlap."""

from __future__ import annotations

from pathlib import Path

import pytest
from server_process import API_KEY, Server
from worker_units import in_shared_servers_unit

TEMPLATES = Path(__file__).with_name("templates")
_LAUNCHED = pytest.StashKey[list]()


def _remember(request, launched: dict) -> None:
    request.config.stash.setdefault(_LAUNCHED, []).extend(launched.values())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report carries the log of any of this folder's servers that has exited: a server that
    died under one test fails every later test with "connection refused", and only its log says why."""
    report = yield
    if report.failed:
        for server in item.config.stash.get(_LAUNCHED, []):
            if server.died and not server.reported:
                server.reported = True
                title = f"server {' '.join(server.args[1:])} exited with {server.proc.returncode}"
                report.sections.append((title, server.output()))
    return report


def pytest_runtest_teardown(item, nextitem):
    """Stop the shared servers after the last test of the modules that use them (tests/worker_units.py runs those
    modules first and together, on one worker under pytest-xdist).

    `scope="package"` lasts the whole session in a folder without `__init__.py`, and this one cannot have
    one (the package would be named `http`, shadowing the standard library's). Left running, its servers
    (about 6 GB) would sit beside the tests that follow.
    """
    if nextitem is not None and in_shared_servers_unit(nextitem):
        return
    for server in item.config.stash.get(_LAUNCHED, []):
        server.stop()


THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if greeting is defined %}[greeting={{ greeting }}]{% endif %}"
    "[effort={{ reasoning_effort }}]"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking %}<think>\n{% endif %}{% endif %}"
)


@pytest.fixture(scope="package")
def thinking_template_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("templates") / "thinking.jinja"
    path.write_text(THINKING_TEMPLATE)
    return path


@pytest.fixture(scope="package")
def servers(request, thinking_template_file):
    """All servers, launched at once; a test waits only for the one it uses."""
    launched = {
        # one slot and no queue: also the server of the busy (429) and disconnect tests. --deterministic: a
        # repeated greedy request gives the same text after its prefix is cached.
        "main": Server(
            "--alias", "main", "--alias", "client-main", "--api-key", API_KEY, "--parallel", "1", "--deterministic",
            api_key=API_KEY,
        ),
        "thinking": Server(
            "--chat-template-file", str(thinking_template_file),
            "--chat-template-kwargs", '{"reasoning_effort": "xhigh", "enable_thinking": true, "greeting": "hello"}',
            "--temp", "1.5", "--top-k", "0", "--top-p", "1", "--min-p", "0", "--n-predict", "3", "--parallel", "2",
        ),
        "queued": Server(
            "--parallel", "1", "--queue-wait", "120", "--reasoning-format", "none",
            "--chat-template-file", str(thinking_template_file),
        ),
        "short_wait": Server("--parallel", "1", "--queue-wait", "1.5"),
    }  # fmt: skip
    for server in launched.values():
        server.launch()
    _remember(request, launched)
    yield launched
    for server in launched.values():
        server.stop()


@pytest.fixture(scope="package")
def tool_servers(request):
    """The tool-calling servers, launched together (only when a tools test runs)."""
    launched = {
        "tools": Server(
            "--chat-template-file", str(TEMPLATES / "hermes_tools.jinja"), "--deterministic", "--parallel", "4"
        ),
        "gemma": Server(
            "-m", "gemma3-270m", "--chat-template-file", str(TEMPLATES / "gemma_turns.jinja"), "--parallel", "2"
        ),
    }  # fmt: skip
    for server in launched.values():
        server.launch()
    _remember(request, launched)
    yield launched
    for server in launched.values():
        server.stop()


@pytest.fixture(scope="package")
def tools_server(tool_servers):
    return tool_servers["tools"].wait_ready()


@pytest.fixture(scope="package")
def gemma_server(tool_servers):
    return tool_servers["gemma"].wait_ready()


@pytest.fixture(scope="package")
def server(servers):
    return servers["main"].wait_ready()


@pytest.fixture(scope="package")
def thinking_server(servers):
    return servers["thinking"].wait_ready()


@pytest.fixture(scope="package")
def queued_server(servers):
    return servers["queued"].wait_ready()


@pytest.fixture(scope="package")
def client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="package")
def short_wait_server(servers):
    return servers["short_wait"].wait_ready()


@pytest.fixture(scope="package")
def client_for():
    import openai

    def make(server):
        return openai.OpenAI(base_url=server.url + "/v1", api_key=server.api_key or "none", max_retries=0, timeout=120)

    return make
