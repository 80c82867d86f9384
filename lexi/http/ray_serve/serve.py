"""Scale-out: the same routes on N replicas behind Ray Serve (`lexi-engine serve --replicas N`, N > 1).

Ray Serve is the router: it runs the replicas, places each request on one, restarts a replica that dies,
and spreads unchanged over a Ray cluster. Two deployments make one application:

- `LexiReplica` (N of them): the model loaded once and its own engine with --parallel slots. Ray gives
  each at most --parallel requests at once (`max_ongoing_requests`, which Ray enforces strictly: a replica
  that is full turns a request away and Ray places it on another), so a request never waits on a busy
  replica while another has a free slot.
- `LexiIngress` (one, no CPU of its own): receives Ray Serve's Starlette requests and adapts them to
  lexi.http.routes. It answers what needs no model (/health, /metrics, /v1/models, CORS preflights,
  unknown routes) itself and forwards the rest to a replica. It also keeps --queue-wait and the 429 of one
  server over the whole deployment: a generation request takes one of the N x --parallel slots, or waits
  up to --queue-wait for one, or is answered 429 `inference_busy` in OpenAI's shape.

/health and /metrics speak for every replica: each reports to a small `Board` actor (created by the
command) every `REPORT_S` seconds once its model is loaded; /health is 200 once every replica has, and
/metrics merges every replica's series with a `replica` label. Stored Responses live in one more actor
that the ingress and every replica share (lexi.http.ray_serve.store), so a continuation may land on any replica.
A replica that dies mid-request fails that request with an error the client can read (a 503 body, or a
last error frame on a stream), and Ray starts another. This module is the command; the deployments are in
lexi.http.ray_serve.deployments (the only module that sees Starlette), the board and the slots in
lexi.http.ray_serve.board.
Only `serve --replicas N` with N > 1 imports any of them.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
from typing import Any

import ray
from ray import serve

from lexi.engine.config import EngineConfig
from lexi.http.ops.config import SamplingDefaults, ServerConfig
from lexi.http.ray_serve.board import Board
from lexi.http.ray_serve.deployments import LexiIngress, LexiReplica, ReplicaSettings
from lexi.http.ray_serve.store import ResponsesActor
from lexi.http.state import prepare_state
from lexi.http.tornado.server import url_host

APP_NAME = "lexi"


class RayJoinError(Exception):
    """--ray-address names a cluster this process cannot join; says what Ray said and what usually helps."""

    def __init__(self, address: str, cause: BaseException) -> None:
        said = str(cause).strip().splitlines()[-1] if str(cause).strip() else type(cause).__name__
        super().__init__(
            f"cannot join the Ray cluster at {address}: {said}. A cluster with token authentication needs "
            "RAY_AUTH_MODE=token and its token (~/.ray/auth_token or RAY_AUTH_TOKEN) in this environment"
        )


def _share(cores: int | None, replicas: int) -> int:
    """A replica's CPUs (and torch threads) on a CPU cluster: an equal share of the cluster's, at least one."""
    return max(1, (cores or os.cpu_count() or 1) // replicas)


def serve_replicas(
    config: ServerConfig,
    sampling: SamplingDefaults,
    engine_config: EngineConfig,
    load: dict[str, str],
    replicas: int,
    ray_address: str | None,
) -> int:
    """Check what one server checks, start or join Ray, deploy the replicas, serve until SIGINT/SIGTERM.

    Raises (ChatTemplateError, GGUFError) before Ray starts on a bad model file or template, RayJoinError
    when the cluster at `ray_address` cannot be joined.
    """
    state, _ = prepare_state(config, sampling, engine_config)  # the same refusals as one server, before Ray
    stopped = threading.Event()  # from here on a signal stops the service cleanly, Ray's processes included
    _on_signals(stopped)
    temp_dir = _start_ray(ray_address, config.log_format == "json")
    _on_signals(stopped)  # again: ray.init installs its own SIGTERM handler, which would exit 15 at once
    try:
        code = _run_application(state.names.public_id, config, sampling, engine_config, load, replicas, stopped)
    finally:
        ray.shutdown()
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
    print("lexi-engine: stopped", flush=True)
    return code


def _start_ray(ray_address: str | None, json_logs: bool) -> str | None:
    """Start Ray in a temporary folder (returned, for the caller to remove), or join the cluster at `ray_address`
    (None returned); RayJoinError when it cannot be joined."""
    ray_logs = {"logging_config": ray.LoggingConfig(encoding="JSON")} if json_logs else {}
    if ray_address is None:
        temp_dir = tempfile.mkdtemp(prefix="ray-lexi-")
        ray.init(_temp_dir=temp_dir, include_dashboard=False, namespace=APP_NAME, log_to_driver=True, **ray_logs)
        return temp_dir
    try:
        ray.init(address=ray_address, namespace=APP_NAME, log_to_driver=True, **ray_logs)
    except (ConnectionError, RuntimeError) as exc:  # nothing there, or a token the cluster refuses
        raise RayJoinError(ray_address, exc) from None
    return None


def _run_application(
    public_id: str,
    config: ServerConfig,
    sampling: SamplingDefaults,
    engine_config: EngineConfig,
    load: dict[str, str],
    replicas: int,
    stopped: threading.Event,
) -> int:
    """Deploy the board, the Responses store, the replicas and the ingress; serve until `stopped`; take the
    application down. The exit status: 1 when a replica's model failed to load, else 0."""
    gpus, threads, actor_options = _placement(load["device"], replicas)
    board_name = f"lexi-board-{os.getpid()}"
    board = Board.options(name=board_name).remote()
    responses_name = f"lexi-responses-{os.getpid()}"
    # held until the service stops: a named actor lives while a handle to it does (the others look it up)
    responses = ResponsesActor.options(name=responses_name).remote(config.responses_store)  # noqa: F841
    device = "cuda" if gpus else "cpu"
    settings = ReplicaSettings(
        config, sampling, engine_config, load["dtype"], device, replicas, board_name, load["deterministic"],
        load["kernels"], load["activations"], responses_name,
    )  # fmt: skip
    quiet = {"enable_access_log": False, "encoding": "JSON" if config.log_format == "json" else "TEXT"}
    model, ingress = _deployments(config, engine_config, replicas, actor_options, quiet)
    serve.start(http_options={"host": config.host, "port": config.port}, logging_config=quiet)
    where = f"http://{url_host(config.host)}:{config.port}"
    share = "1 GPU" if gpus else f"{threads} CPU thread(s)"
    print(f"lexi-engine: {replicas} replicas of {public_id} on Ray Serve ({share} each)", flush=True)
    serve.run(ingress.bind(settings, model.bind(settings)), name=APP_NAME, route_prefix="/")
    print(f"lexi-engine: listening on {where} (model {public_id})", flush=True)
    code = _watch(board, replicas, stopped)
    print("lexi-engine: shutting down the replicas", flush=True)
    # Deleting the application first waits out each replica's graceful shutdown (--shutdown-timeout);
    # serve.shutdown() alone stopped the replicas under their running requests.
    serve.delete(APP_NAME)
    serve.shutdown()
    return code


def _placement(device_option: str, replicas: int) -> tuple[bool, int, dict[str, Any]]:
    """(on GPUs, a replica's CPU threads, its Ray actor options): a GPU each where --device asks for CUDA or the
    cluster has one (--device auto), else an equal share of the cluster's CPUs."""
    resources = ray.cluster_resources()
    gpus = device_option == "cuda" or (device_option == "auto" and resources.get("GPU", 0) >= 1)
    threads = _share(int(resources.get("CPU", 0)) or None, replicas)
    actor_options: dict[str, Any] = {
        "num_cpus": 1 if gpus else threads,
        "runtime_env": {"env_vars": {"OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE"}},
    }
    if gpus:
        actor_options["num_gpus"] = 1
    return gpus, threads, actor_options


def _deployments(
    config: ServerConfig,
    engine_config: EngineConfig,
    replicas: int,
    actor_options: dict[str, Any],
    quiet: dict[str, Any],
):
    """The replicas' deployment (each at most --parallel requests at once) and the ingress's (no CPU of its own)."""
    model = serve.deployment(
        LexiReplica,
        name="LexiReplica",
        num_replicas=replicas,
        max_ongoing_requests=engine_config.parallel,
        ray_actor_options=actor_options,
        graceful_shutdown_timeout_s=config.shutdown_timeout,
        health_check_period_s=5.0,
        logging_config=quiet,
    )
    ingress = serve.deployment(
        LexiIngress,
        name="LexiIngress",
        num_replicas=1,
        max_ongoing_requests=100_000,  # it only waits: admission is its own (Admission)
        ray_actor_options={"num_cpus": 0},
        graceful_shutdown_timeout_s=config.shutdown_timeout,
        logging_config=quiet,
    )
    return model, ingress


def _on_signals(stopped: threading.Event) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())


def _watch(board, replicas: int, stopped: threading.Event) -> int:
    """Until `stopped` (SIGINT/SIGTERM): say when every replica is ready; a replica whose model failed to load
    stops the service (exit status 1, as one server does) rather than have Ray restart it in a loop."""
    ready = False
    while not stopped.wait(0.5):
        if ready:
            continue
        failures = ray.get(board.failures.remote())
        if failures:
            error = next(iter(failures.values()))
            print(f"lexi-engine: the model failed to load on a replica: {error}", file=sys.stderr, flush=True)
            return 1
        if len(ray.get(board.live.remote())) >= replicas:
            print(f"lexi-engine: {replicas} replicas ready", flush=True)
            ready = True
    return 0
