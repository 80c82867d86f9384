"""Real servers, each started once per session: the main one (aliases, an API key, the GGUF's ChatML
template, one slot and no queue), one with a thinking template and sampling defaults (no alias), and a
one-slot server with --queue-wait and --reasoning-format none. All are launched together on first
use so their model loads overlap."""

from __future__ import annotations

import pytest
from server_process import API_KEY, Server

THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if greeting is defined %}[greeting={{ greeting }}]{% endif %}"
    "[effort={{ reasoning_effort }}]"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking %}<think>\n{% endif %}{% endif %}"
)


@pytest.fixture(scope="session")
def thinking_template_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("templates") / "thinking.jinja"
    path.write_text(THINKING_TEMPLATE)
    return path


@pytest.fixture(scope="session")
def servers(thinking_template_file):
    """All servers, launched at once; a test waits only for the one it uses."""
    launched = {
        # one slot and no queue: also the server of the busy (429) and disconnect tests
        "main": Server(
            "--alias", "main", "--alias", "client-main", "--api-key", API_KEY, "--parallel", "1", api_key=API_KEY
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
    yield launched
    for server in launched.values():
        server.stop()


@pytest.fixture(scope="session")
def server(servers):
    return servers["main"].wait_ready()


@pytest.fixture(scope="session")
def thinking_server(servers):
    return servers["thinking"].wait_ready()


@pytest.fixture(scope="session")
def queued_server(servers):
    return servers["queued"].wait_ready()


@pytest.fixture(scope="session")
def client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def short_wait_server(servers):
    return servers["short_wait"].wait_ready()


@pytest.fixture(scope="session")
def client_for():
    import openai

    def make(server):
        return openai.OpenAI(base_url=server.url + "/v1", api_key=server.api_key or "none", max_retries=0, timeout=120)

    return make
