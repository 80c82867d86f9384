"""`serve --replicas N` refuses what one server refuses, before Ray starts; plain `serve` never imports Ray."""

from __future__ import annotations

import subprocess
import sys

import pytest
from server_process import run_refused


@pytest.mark.parametrize(
    "args, says",
    [
        (("--replicas", "2", "--chat-template-file", "/nonexistent/chat.jinja"), "--chat-template-file"),
        (("--replicas", "2", "-m", "/nonexistent/model.gguf"), "model.gguf"),
        (("--replicas", "2", "--alias", "a", "--alias", "a"), "--alias"),
        (("--replicas", "2", "--port", "0"), "--port"),
        (("--ray-address", "auto",), "--ray-address"),
        (("--replicas", "0",), "--replicas"),
    ],
)  # fmt: skip
def test_refused_before_ray_starts(args, says):
    code, output, opened = run_refused(*args)
    assert code != 0 and says in output, output
    assert not opened
    assert "Ray instance" not in output and "on Ray Serve" not in output, output  # refused before ray.init


def test_plain_serve_never_imports_ray():
    code = (
        "import sys, lexi.cli, lexi.http.tornado.app, lexi.http.tornado.server, lexi.http.routes;"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith(('ray.', 'starlette'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
