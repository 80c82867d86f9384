"""--spec ngram over the real server with the openai client: the same greedy text as a server without it,
fewer engine steps, metrics, the per-request opt-out, and constrained output still valid beside it."""

from __future__ import annotations

import json

import openai
import pytest
from server_process import Server

CODE = (
    "def area(width, height):\n    return width * height\n\n"
    "def perimeter(width, height):\n    return 2 * (width + height)\n\n"
)
COPY = [{"role": "user", "content": "Copy this code exactly, nothing else:\n" + CODE}]


@pytest.fixture(scope="module")
def spec_servers():
    """Both --deterministic (row-independent paths), so their greedy tokens must agree."""
    launched = {
        "on": Server("--alias", "m", "--spec", "ngram", "--spec-max", "8", "--deterministic", "--parallel", "2"),
        "off": Server("--alias", "m", "--spec", "off", "--deterministic", "--parallel", "2"),
    }
    for server in launched.values():
        server.launch()
    yield {name: server.wait_ready() for name, server in launched.items()}
    for server in launched.values():
        server.stop()


def client_of(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


def test_greedy_text_is_the_same_with_fewer_steps(spec_servers):
    on, off = spec_servers["on"], spec_servers["off"]
    answers, steps = {}, {}
    for name, server in (("on", on), ("off", off)):
        before = server.metric("lexi_spec_verify_rows")
        reply = client_of(server).chat.completions.create(model="m", messages=COPY, max_tokens=60, temperature=0)
        answers[name] = (reply.choices[0].message.content, reply.usage.completion_tokens)
        steps[name] = server.metric("lexi_spec_verify_rows") - before
    assert answers["on"] == answers["off"]
    assert steps["off"] == 0 and steps["on"] > 0
    accepted, proposed = on.metric("lexi_spec_accepted_tokens"), on.metric("lexi_spec_proposed_tokens")
    assert 0 < accepted <= proposed


def test_two_copies_at_once_share_the_step_budget(spec_servers):
    """Two sequences decoding together: their drafts share the rows the CPU kernels take on their cheap path (8 rows:
    GEMV_MAX_M), so a step feeds more than their two tokens but never past 8, and what the lookups proposed past that
    is counted as cut; both answers are still the server without speculation's."""
    from concurrent.futures import ThreadPoolExecutor

    on, off = spec_servers["on"], spec_servers["off"]
    want = client_of(off).chat.completions.create(model="m", messages=COPY, max_tokens=60, temperature=0)
    cut = on.metric("lexi_spec_budget_cut_tokens")

    def ask(_):
        return client_of(on).chat.completions.create(model="m", messages=COPY, max_tokens=60, temperature=0)

    with ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(ask, range(2)))
    for reply in replies:
        assert reply.choices[0].message.content == want.choices[0].message.content
    assert 2 < on.metric("lexi_spec_batch_rows_max") <= 8
    assert on.metric("lexi_spec_budget_cut_tokens") > cut  # two 8-token drafts do not fit 8 rows with two tokens


def test_streamed_text_with_speculation_is_the_whole_text(spec_servers):
    c = client_of(spec_servers["on"])
    whole = c.chat.completions.create(model="m", messages=COPY, max_tokens=40, temperature=0)
    pieces = [
        chunk.choices[0].delta.content or ""
        for chunk in c.chat.completions.create(model="m", messages=COPY, max_tokens=40, temperature=0, stream=True)
        if chunk.choices
    ]
    assert "".join(pieces) == whole.choices[0].message.content


def test_a_request_may_opt_out_and_a_bad_value_is_named(spec_servers):
    server = spec_servers["on"]
    c = client_of(server)
    before = server.metric("lexi_spec_verify_rows")
    c.completions.create(
        model="m", prompt=CODE + CODE[:30], max_tokens=30, temperature=0, extra_body={"speculative": False}
    )
    assert server.metric("lexi_spec_verify_rows") == before
    with pytest.raises(openai.BadRequestError) as caught:
        c.chat.completions.create(model="m", messages=COPY, max_tokens=2, extra_body={"speculative": "no"})
    assert caught.value.body["param"] == "speculative"


def test_a_json_answer_is_valid_with_speculation_on(spec_servers):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}}, "required": ["name"]}
    reply = client_of(spec_servers["on"]).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Give a name as JSON."}],
        max_tokens=40,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
    )
    assert isinstance(json.loads(reply.choices[0].message.content)["name"], str)


RECORD = {
    "id": "call_7f3a",
    "status": "ok",
    "items": [{"sku": "A-001", "name": "widget one", "stock": 10}, {"sku": "A-002", "name": "widget two", "stock": 20}],
}
RECORD_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "status": {"type": "string"},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "name": {"type": "string"}, "stock": {"type": "integer"}},
                "required": ["sku", "name", "stock"],
            },
        },
    },
    "required": ["id", "status", "items"],
}
ECHO = [{"role": "user", "content": "Repeat this JSON exactly:\n" + json.dumps(RECORD)}]


def test_constrained_answers_take_drafts_and_keep_their_text(spec_servers):
    """A json_schema answer and a forced tool call echoing JSON from the prompt: drafts are checked against each
    position's own constraint mask, so the text is the text without speculation (both --deterministic), valid,
    in fewer steps."""
    on, off = spec_servers["on"], spec_servers["off"]
    tool = {"type": "function", "function": {"name": "save", "parameters": RECORD_SCHEMA}}
    answer_format = {"type": "json_schema", "json_schema": {"name": "r", "schema": RECORD_SCHEMA}}
    asks = {
        "json_schema": {"response_format": answer_format},
        "forced call": {"tools": [tool], "tool_choice": {"type": "function", "function": {"name": "save"}}},
    }
    for label, extra in asks.items():
        replies, checks = {}, {}
        for name, server in (("on", on), ("off", off)):
            before = server.metric("lexi_spec_accepted_tokens")
            reply = client_of(server).chat.completions.create(
                model="m", messages=ECHO, max_tokens=120, temperature=0, **extra
            )
            replies[name], checks[name] = reply.choices[0], server.metric("lexi_spec_accepted_tokens") - before
        got, want = replies["on"], replies["off"]
        if label == "json_schema":
            assert got.message.content == want.message.content, label
            text = got.message.content
        else:
            assert got.finish_reason == want.finish_reason == "tool_calls", label
            assert [c.function.arguments for c in got.message.tool_calls] == [
                c.function.arguments for c in want.message.tool_calls
            ], label
            text = got.message.tool_calls[0].function.arguments
        parsed = json.loads(text)
        assert set(parsed) == {"id", "status", "items"}, (label, text)
        assert checks["off"] == 0 and checks["on"] > 0, (label, checks)


def test_a_draft_model_server_gives_the_same_text():
    """--spec draft --model-draft: SmolLM2 drafting for itself (no smaller model with its vocabulary is bundled),
    both --deterministic: the text of the server without speculation, checks taking several tokens."""
    server = Server("--alias", "m", "--spec", "draft", "--model-draft", "smollm2-135m-instruct", "--deterministic")
    server.launch()
    try:
        server.wait_ready()
        question = [{"role": "user", "content": "Name three rivers of Europe."}]
        reply = client_of(server).chat.completions.create(model="m", messages=question, max_tokens=40, temperature=0)
        accepted, checks = server.metric("lexi_spec_accepted_tokens"), server.metric("lexi_spec_verify_rows")
        proposed = server.metric("lexi_spec_proposed_tokens")
    finally:
        server.stop()
    off = Server("--alias", "m", "--deterministic")
    off.launch()
    try:
        off.wait_ready()
        want = client_of(off).chat.completions.create(model="m", messages=question, max_tokens=40, temperature=0)
    finally:
        off.stop()
    assert reply.choices[0].message.content == want.choices[0].message.content
    # the draft model is the served model: what it proposes (past --spec-p-min) is what the check takes
    assert checks > 0 and accepted > checks and accepted >= 0.9 * proposed, (checks, accepted, proposed)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--spec", "draft"], "--model-draft"),
        (["--model-draft", "smollm2-135m-instruct"], "--model-draft"),
        (["--spec", "draft", "--model-draft", "gemma3-270m"], "vocabulary"),
        (["--spec", "draft", "--model-draft", "/nonexistent/draft.gguf"], "--model-draft"),
        (["--spec", "draft", "--model-draft", "smollm2-135m-instruct", "--spec-p-min", "1.5"], "--spec-p-min"),
        (["--spec", "ngram", "--spec-p-min", "0.5"], "--spec-p-min"),
    ],
)
def test_a_draft_model_that_cannot_draft_is_refused_before_listening(args, says):
    import subprocess

    from server_process import LEXI

    run = subprocess.run([LEXI, "serve", "--port", "0", *args], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert says in run.stderr and "listening" not in run.stdout, run.stderr


def test_the_access_line_counts_a_requests_drafts(spec_servers):
    import re

    server = spec_servers["on"]
    before = [server.metric(m) for m in ("lexi_spec_proposed_tokens", "lexi_spec_accepted_tokens")]
    client_of(server).chat.completions.create(
        model="m", messages=COPY, max_tokens=40, temperature=0, extra_headers={"X-Request-Id": "spec-access-1"}
    )
    after = [server.metric(m) for m in ("lexi_spec_proposed_tokens", "lexi_spec_accepted_tokens")]
    line = next(line for line in server.output().splitlines() if "id=spec-access-1" in line)
    taken, proposed = map(int, re.search(r" drafts=(\d+)/(\d+)", line).groups())
    assert proposed == after[0] - before[0] > 0 and taken == after[1] - before[1] > 0, line
    off = spec_servers["off"]
    client_of(off).chat.completions.create(
        model="m", messages=COPY, max_tokens=4, temperature=0, extra_headers={"X-Request-Id": "spec-access-2"}
    )
    line = next(line for line in off.output().splitlines() if "id=spec-access-2" in line)
    assert "drafts=" not in line and "tokens=" in line


def test_logprobs_spell_the_text_when_a_stop_string_ends_inside_a_taken_draft(spec_servers):
    """The stop string lies in the copied code, so a taken draft runs through it: the tokens after the cut and the
    stop string's own were accepted but show nothing, so neither they nor their logprobs are sent (chat, streamed
    chat, legacy completions), and the entries are those of the server without speculation."""
    on, off = spec_servers["on"], spec_servers["off"]
    stop = [" (width + h"]  # several whole tokens: the first ones are held back until the string completes
    entries, texts = {}, {}
    for name, server in (("on", on), ("off", off)):
        before = server.metric("lexi_spec_accepted_tokens")
        reply = client_of(server).chat.completions.create(
            model="m", messages=COPY, max_tokens=60, temperature=0, logprobs=True, top_logprobs=2, stop=stop
        )
        choice = reply.choices[0]
        texts[name] = choice.message.content
        entries[name] = [(e.token, e.logprob) for e in choice.logprobs.content]
        assert choice.finish_reason == "stop" and "perimeter" in texts[name], texts[name]
        assert bytes(b for e in choice.logprobs.content for b in e.bytes).decode() == texts[name]
        if name == "on":
            assert server.metric("lexi_spec_accepted_tokens") > before
    assert texts["on"] == texts["off"]
    assert [t for t, _ in entries["on"]] == [t for t, _ in entries["off"]]
    assert [v for _, v in entries["on"]] == pytest.approx([v for _, v in entries["off"]], abs=1e-3)
    c = client_of(on)
    streamed, spelled = "", b""
    for chunk in c.chat.completions.create(
        model="m", messages=COPY, max_tokens=60, temperature=0, logprobs=True, stream=True, stop=stop
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            streamed += chunk.choices[0].delta.content
            spelled += bytes(b for e in chunk.choices[0].logprobs.content for b in e.bytes)
    assert streamed == texts["on"] and spelled.decode() == streamed
    legacy = c.completions.create(
        model="m", prompt=CODE + CODE[:20], max_tokens=60, temperature=0, logprobs=1, stop=stop
    )
    assert legacy.choices[0].finish_reason == "stop" and "perimeter" in legacy.choices[0].text
    assert "".join(legacy.choices[0].logprobs.tokens) == legacy.choices[0].text
