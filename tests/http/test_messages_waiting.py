"""A message that waits for a slot, over the real server: a busy server is Anthropic's 529 overloaded_error,
and a streamed message begins at once and pings while it waits (then ends overloaded, or runs once a slot
frees), as Anthropic's streams do.
"""

from __future__ import annotations

import threading
import time

import anthropic
import pytest
from test_messages import HI, events_of
from test_streaming import _stream_until_first_token

LONG = {
    "messages": [{"role": "user", "content": "Tell me a long story."}],
    "max_tokens": 2000,
    "temperature": 0,
    "ignore_eos": True,
}


def wait_free(server) -> None:
    deadline = time.monotonic() + 5.0
    while server.metric("lexi_slots_busy") != 0:
        assert time.monotonic() < deadline, "the slot was not given back"
        time.sleep(0.05)


def test_a_busy_server_answers_a_message_529_overloaded(short_wait_server):
    sock = _stream_until_first_token(short_wait_server, LONG)
    try:
        claude = anthropic.Anthropic(base_url=short_wait_server.url, api_key="none", max_retries=0, timeout=60)
        started = time.monotonic()
        with pytest.raises(anthropic.OverloadedError) as caught:
            claude.messages.create(model="SmolLM2-135M-Instruct.Q4_1", max_tokens=2, messages=HI)
        assert time.monotonic() - started >= 1.4  # it waited --queue-wait for a slot first
        assert caught.value.status_code == 529
        assert caught.value.body["error"]["type"] == "overloaded_error"
    finally:
        sock.close()
    wait_free(short_wait_server)


def test_a_waiting_stream_pings_then_ends_with_an_overloaded_error_event(short_wait_server):
    sock = _stream_until_first_token(short_wait_server, LONG)
    try:
        events = events_of(short_wait_server, {"max_tokens": 2, "messages": HI})
    finally:
        sock.close()
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-1] == "error", names
    assert set(names[1:-1]) == {"ping"} and len(names) >= 3, names  # --queue-wait 1.5 s: a ping at 0 s and 1 s
    assert events[-1][1]["error"]["type"] == "overloaded_error"
    wait_free(short_wait_server)


def test_a_queued_stream_pings_until_its_slot_frees_then_runs(queued_server):
    sock = _stream_until_first_token(queued_server, LONG)
    got: dict = {}
    waiter = threading.Thread(
        # greedy, so the 4 tokens are written (sampled, the model sometimes ended its answer after 2)
        target=lambda: got.update(events=events_of(queued_server, {"max_tokens": 4, "messages": HI, "temperature": 0}))
    )
    waiter.start()
    time.sleep(2.5)
    sock.close()  # the slot frees: the queued message takes it
    waiter.join(60)
    names = [name for name, _ in got["events"]]
    first_block = names.index("content_block_start")
    assert names[0] == "message_start" and set(names[1:first_block]) == {"ping"} and first_block >= 3, names
    assert names[-2:] == ["message_delta", "message_stop"]
    start, end = got["events"][0][1]["message"]["usage"], got["events"][-2][1]["usage"]
    assert end["input_tokens"] + end["cache_read_input_tokens"] == start["input_tokens"]
    assert got["events"][-2][1]["delta"]["stop_reason"] == "max_tokens" and end["output_tokens"] == 4
    wait_free(queued_server)
