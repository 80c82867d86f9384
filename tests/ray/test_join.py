"""`serve --replicas 2 --ray-address ADDRESS` joins a Ray cluster someone else runs: it serves, and on SIGTERM
it takes its application and actors away and leaves the cluster running. A cluster it cannot join is a
usage error naming --ray-address.

The owner's cluster uses Ray's default token authentication; Ray enables it for a joining process only
when told (RAY_AUTH_MODE=token) once the address is explicit, as a user joining such a cluster does."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import openai
import pytest
from replica_server import RayServer
from server_process import run_refused

# The cluster's owner: a Ray driver in its own process that answers "actors" with the named actors alive.
_HOLDER = """
import sys, ray
context = ray.init(num_cpus=2, include_dashboard=False, _temp_dir=sys.argv[1])
print(context.address_info["gcs_address"], flush=True)
for line in sys.stdin:
    named = ray.util.list_named_actors(all_namespaces=True)
    print(sorted(a["name"] for a in named), flush=True)
"""


@pytest.fixture(scope="module")
def cluster():
    with tempfile.TemporaryDirectory(prefix="ray-owner-") as temp_dir:
        holder = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, temp_dir], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            address = holder.stdout.readline().strip()
            assert address, "the cluster's owner did not start"
            yield holder, address
        finally:
            holder.stdin.close()  # its driver ends, and with it the cluster it started
            holder.wait(60)


def named_actors(holder) -> str:
    holder.stdin.write("actors\n")
    holder.stdin.flush()
    return holder.stdout.readline().strip()


def test_a_cluster_that_refuses_the_join_is_a_usage_error(cluster):
    _, address = cluster
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}  # without the token: refused
    code, output, opened = run_refused("--replicas", "2", "--ray-address", address, env=env)
    assert code == 2 and "--ray-address" in output and f"cannot join the Ray cluster at {address}" in output, output
    assert "RAY_AUTH_MODE=token" in output and "Traceback" not in output and not opened, output


def test_joins_a_running_cluster_and_leaves_it_running(cluster, monkeypatch):
    holder, address = cluster
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    server = RayServer("--replicas", "2", "--parallel", "1", "--ray-address", address).launch()
    try:
        server.wait_ready()
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)
        reply = client.completions.create(model=client.models.list().data[0].id, prompt="Hi", max_tokens=4)
        assert reply.usage.completion_tokens == 4
        assert "LexiReplica" in named_actors(holder)  # the replicas run in the cluster the owner started
    finally:
        status, output = server.stop_cleanly()
    assert status == 0 and "lexi-engine: stopped" in output, output[-3000:]
    assert "Started a local Ray instance" not in output  # it joined; it did not start its own
    left = named_actors(holder)  # the owner's cluster is still up and answers, without LexiEngine's actors
    assert "LexiReplica" not in left and "lexi-board" not in left, left
