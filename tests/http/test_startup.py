"""Startup refusals: bad options exit 2 naming the option; bad templates are refused before listening."""

from __future__ import annotations

import os
import re
import socket
import subprocess

import gguf
import numpy as np
import pytest
from server_process import LEXI, run_refused

from lexi.chat.template import MAX_TEMPLATE_BYTES


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--temp", "2.5"),
        ("--temp", "-0.1"),
        ("--top-p", "1.01"),
        ("--top-k", "100001"),
        ("--top-k", "-1"),
        ("--min-p", "1.5"),
        ("--n-predict", "0"),
        ("--n-predict", "131073"),
        ("--queue-wait", "-1"),
        ("--responses-store", "-1"),
        ("--responses-store", "1000001"),
        ("--port", "70000"),
        ("--parallel", "0"),
        ("--reasoning-format", "deepseek"),
        ("--chat-template-kwargs", "[1, 2]"),
        ("--chat-template-kwargs", "{not json"),
        ("--chat-template-kwargs", '{"messages": []}'),
        ("--chat-template-kwargs", '{"bos_token": "x"}'),
        ("--chat-template-kwargs", '{"nested": {"a": 1}}'),
    ],
)
def test_out_of_range_option_exits_2_naming_it(option, value):
    code, out, opened = run_refused(option, value)
    assert code == 2, out
    assert option in out or option.lstrip("-").replace("-", "_") in out, out
    assert not opened


def test_triton_kernels_that_cannot_run_are_refused_before_listening():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # a CPU without the interpreter
    code, out, opened = run_refused("--kernels", "triton", env=env)
    assert code == 2 and "--kernels" in out and "TRITON_INTERPRET=1" in out and not opened, out


def test_deterministic_off_the_cpu_is_refused_before_listening():
    code, out, opened = run_refused("--device", "cuda", "--deterministic")
    assert code == 2 and "--deterministic" in out and "--device cpu" in out and not opened, out
    interpreted = {**os.environ, "TRITON_INTERPRET": "1"}
    code, out, opened = run_refused("--kernels", "triton", "--deterministic", env=interpreted)
    assert code == 2 and "--deterministic" in out and "kernels 'triton'" in out and not opened, out


def test_duplicate_alias_refused():
    code, out, opened = run_refused("--alias", "a", "--alias", "a")
    assert code == 2 and "--alias" in out and not opened


def test_empty_api_key_file_refused(tmp_path):
    empty = tmp_path / "keys.txt"
    empty.write_text("\n# no keys here\n")
    code, out, opened = run_refused("--api-key-file", str(empty))
    assert code == 2 and "--api-key-file" in out and not opened


def _bad_template_files(tmp_path):
    latin = tmp_path / "latin1.jinja"
    latin.write_bytes("{{ 'caf\xe9' }}".encode("latin-1"))
    empty = tmp_path / "empty.jinja"
    empty.write_text("")
    big = tmp_path / "big.jinja"
    big.write_text("{{ messages }}" + " " * MAX_TEMPLATE_BYTES)
    syntax = tmp_path / "syntax.jinja"
    syntax.write_text("{% for m in messages %}{{ m.content }")
    unreadable = tmp_path / "unreadable.jinja"
    unreadable.write_text("{{ messages }}")
    unreadable.chmod(0)
    return {
        "missing": (tmp_path / "nope.jinja", "unreadable"),
        "not-a-directory": (latin / "x.jinja", "unreadable"),
        "directory": (tmp_path, "unreadable"),
        "unreadable": (unreadable, "unreadable"),
        "latin1": (latin, "UTF-8"),
        "empty": (empty, "empty"),
        "big": (big, "256 KiB"),
        "syntax": (syntax, "does not parse"),
    }


@pytest.mark.parametrize(
    "case", ["missing", "not-a-directory", "directory", "unreadable", "latin1", "empty", "big", "syntax"]
)
def test_bad_template_file_refused_before_listening(tmp_path, case):
    import os

    path, reason = _bad_template_files(tmp_path)[case]
    if case == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads any file")
    code, out, opened = run_refused("--chat-template-file", str(path))
    assert code != 0, out
    assert reason in out and "--chat-template-file" in out, out
    assert "listening" not in out
    assert not opened


def _gguf_with_template(path, template):
    """A minimal GGUF (header + one tensor): startup reads only the header before refusing."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["<s>", "</s>", "a"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    writer.add_chat_template(template)
    writer.add_tensor("token_embd.weight", np.zeros((3, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("{% if messages %}", "does not parse"),
        ("  \n", "empty"),
        ("x" * (MAX_TEMPLATE_BYTES + 1), "256 KiB"),
    ],
)
def test_bad_embedded_template_refused_before_listening(tmp_path, template, reason):
    model = _gguf_with_template(tmp_path / "tiny.gguf", template)
    code, out, opened = run_refused("-m", str(model))
    assert code != 0, out
    assert reason in out and "tokenizer.chat_template" in out, out
    assert not opened


def test_missing_model_refused(tmp_path):
    code, out, opened = run_refused("-m", str(tmp_path / "absent.gguf"))
    assert code == 2 and "'--model'" in out and "absent.gguf" in out and not opened, out
    (tmp_path / "text.gguf").write_text("not a model")
    code, out, opened = run_refused("-m", str(tmp_path / "text.gguf"))
    assert code == 2 and "'--model'" in out and "not a GGUF file" in out and not opened, out


def test_a_port_in_use_or_a_bad_host_is_a_usage_error_without_a_traceback():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        code, out, _ = run_refused("--port", str(taken.getsockname()[1]))
    assert code == 2 and "--port" in out and "cannot listen on 127.0.0.1" in out and "Traceback" not in out, out
    code, out, _ = run_refused("--host", "999.1.1.1")
    assert code == 2 and "--host" in out and "does not resolve" in out and "Traceback" not in out, out


def output_until_listening(*args: str) -> str:
    """What `serve` prints up to its `listening on` line; then it is stopped."""
    proc = subprocess.Popen(
        [LEXI, "serve", "--port", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines = []
    try:
        while not lines or "listening on" not in lines[-1]:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
    finally:
        proc.kill()
        proc.wait()
    return "".join(lines)


def test_an_ipv6_host_is_printed_as_a_url():
    out = output_until_listening("--host", "::1")
    assert re.search(r"listening on http://\[::1\]:\d+ ", out), out


def test_a_context_past_the_trained_one_is_served_with_a_warning():
    out = output_until_listening("--ctx-size", "16384")  # SmolLM2 was trained on 8192
    assert "--ctx-size 16384 is more than the 8192 tokens the model was trained on" in out, out
    assert "trained on" not in output_until_listening("--ctx-size", "8192")


def test_a_model_that_fails_to_load_stops_the_server_with_the_reason(tmp_path):
    """Header and template are fine, so the server listens; the weights are missing, so loading fails."""
    from lexi.chat.template import CHATML_TEMPLATE

    model = _gguf_with_template(tmp_path / "no-weights.gguf", CHATML_TEMPLATE)
    code, out, _ = run_refused("-m", str(model))
    assert code == 1, out
    assert "listening on" in out and "the model failed to load" in out, out
