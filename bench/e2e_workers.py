"""The measuring processes of bench/e2e.py: llama.cpp, and LexiEngine in-process, each alone in its process.

Each reads one JSON command a line on stdin and answers one JSON line on stdout, so bench/e2e.py can interleave
the repetitions of every engine while each keeps its own environment (threads, OpenMP waiting policy, build).

    python bench/e2e_workers.py llama PATH --threads 2     # llama-cpp-python with its own defaults
    python bench/e2e_workers.py lexi PATH [--deterministic] # lexi.engine.Engine, as `lexi-engine serve` sets up

Commands: {"op": "pp", "prompt": [ids]} -> {"s": seconds to the first token's logits}
          {"op": "tg", "prompt": [id], "n": 128} -> {"s": seconds for n tokens, one at a time}
          {"op": "decode", "prompts": [[ids], ...], "n": 128} -> {"s": seconds for every stream's n tokens}
          {"op": "info"} -> {"vocab": n, ...}; {"op": "memory"} -> {"peak_rss": bytes}; {"op": "quit"}
"""

from __future__ import annotations

import argparse
import json
import sys
import time

CTX = 512 + 128 + 16  # a pp512 prompt, tg128, and room
CTX_ENV = "LEXI_BENCH_CTX"  # bench/e2e.py sets it when its rows need more
STREAMS_ENV = "LEXI_BENCH_STREAMS"  # ... and this to the most streams a row runs
MAX_STREAMS = 16
STREAM_CTX = 16 + 128 + 16  # a decode stream: 16-token prompt + 128 tokens


def context() -> int:
    import os

    return int(os.environ.get(CTX_ENV, CTX))


def streams() -> int:
    import os

    return int(os.environ.get(STREAMS_ENV, MAX_STREAMS))


class LlamaWorker:
    """llama.cpp as its Python users run it: `Llama` for one sequence, a multi-sequence batch for many streams."""

    def __init__(self, path: str, threads: int) -> None:
        import llama_cpp
        import numpy as np

        self.lc, self.np = llama_cpp, np
        self.llm = llama_cpp.Llama(
            path, n_ctx=context(), n_batch=512, n_ubatch=512, n_threads=threads, n_threads_batch=threads, verbose=False
        )
        self.vocab = self.llm.n_vocab()
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = streams() * STREAM_CTX
        params.n_batch = params.n_ubatch = streams() * 16
        params.n_seq_max = streams()
        params.n_threads = params.n_threads_batch = threads
        params.kv_unified = True
        self.multi = llama_cpp.llama_init_from_model(self.llm._model.model, params)
        self.batch = llama_cpp.llama_batch_init(params.n_batch, 0, streams())

    def info(self) -> dict:
        return {"vocab": self.vocab, "version": self.lc.__version__, "path": self.lc.__file__}

    def _argmax(self, ctx, row: int) -> int:
        logits = self.lc.llama_get_logits_ith(ctx, row)
        return int(self.np.ctypeslib.as_array(logits, shape=(self.vocab,)).argmax())

    def _reset(self) -> None:
        self.llm.reset()
        self.lc.llama_memory_clear(self.lc.llama_get_memory(self.llm._ctx.ctx), True)

    def pp(self, prompt: list[int]) -> float:
        self._reset()
        start = time.perf_counter()
        self.llm.eval(prompt)
        self._argmax(self.llm._ctx.ctx, -1)
        return time.perf_counter() - start

    def tg(self, prompt: list[int], n: int) -> float:
        self._reset()
        start = time.perf_counter()
        token = prompt[0]
        for _ in range(n):
            self.llm.eval([token])
            token = self._argmax(self.llm._ctx.ctx, -1)
        return time.perf_counter() - start

    def _decode(self, rows: list[tuple[int, int, int]]) -> None:
        b = self.batch
        for i, (token, pos, seq) in enumerate(rows):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, True
            b.seq_id[i][0] = seq
        b.n_tokens = len(rows)
        if self.lc.llama_decode(self.multi, b) != 0:
            raise RuntimeError("llama_decode failed")

    def decode(self, prompts: list[list[int]], n: int) -> float:
        """The streams' prompts in one batch, then one token per stream a step (its server's continuous batching)."""
        self.lc.llama_memory_clear(self.lc.llama_get_memory(self.multi), True)
        start = time.perf_counter()
        self._decode([(t, p, s) for s, prompt in enumerate(prompts) for p, t in enumerate(prompt)])
        ends = self.np.cumsum([len(p) for p in prompts]) - 1
        tokens = [self._argmax(self.multi, int(e)) for e in ends]
        for step in range(1, n):
            self._decode([(t, len(prompts[s]) + step - 1, s) for s, t in enumerate(tokens)])
            tokens = [self._argmax(self.multi, i) for i in range(len(prompts))]
        return time.perf_counter() - start


class LexiWorker:
    """LexiEngine's engine API in this process (no HTTP): what the server's step loop does, without the SSE."""

    def __init__(self, path: str, deterministic: bool) -> None:
        from lexi.runtime import apply_process_defaults

        apply_process_defaults()  # before torch is imported, as `lexi-engine` does
        import threading

        from lexi.engine.config import EngineConfig
        from lexi.engine.engine import Engine
        from lexi.engine.ngram import SpecConfig
        from lexi.gguf.reader import read_gguf
        from lexi.gguf.tokenizer import Tokenizer
        from lexi.model.loader import LoadConfig, load_model

        f = read_gguf(path)
        loaded = {}

        def load() -> None:
            loaded["model"] = load_model(f, LoadConfig(deterministic=deterministic))

        # As `lexi-engine serve` does: load on a thread that exits, so its OpenMP thread team goes with it and the
        # engine's step thread is the only team left (two live teams on 2 cores throttle libgomp's spinning).
        loader = threading.Thread(target=load)
        loader.start()
        loader.join()
        model = loaded["model"]
        self.vocab = model.args.vocab_size
        # Speculation off, as in the serve rows (bench/e2e.py): llama.cpp decodes a token a step here too.
        config = EngineConfig(parallel=streams(), ctx_size=context(), batch_size=512, spec=SpecConfig("off"))
        self.engine = Engine(model, Tokenizer.from_gguf(f), config)
        self.engine.start()

    def info(self) -> dict:
        import torch

        return {"vocab": self.vocab, "torch": torch.__version__, "threads": torch.get_num_threads()}

    def _generate(self, prompts: list[list[int]], n: int) -> float:
        import asyncio

        from lexi.engine.request import GenerationRequest
        from lexi.engine.sampling import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)

        async def one(prompt):
            got = 0
            async for delta in self.engine.generate(GenerationRequest(prompt, params)):
                got += len(delta.token_ids)
            if got != n:
                raise RuntimeError(f"asked for {n} tokens, got {got}")

        async def every():
            await asyncio.gather(*(one(p) for p in prompts))

        start = time.perf_counter()
        asyncio.run(every())
        return time.perf_counter() - start

    def pp(self, prompt: list[int]) -> float:
        return self._generate([prompt], 1)

    def tg(self, prompt: list[int], n: int) -> float:
        return self._generate([prompt], n)

    def decode(self, prompts: list[list[int]], n: int) -> float:
        return self._generate(prompts, n)


def peak_rss() -> int:
    """This process's peak resident set (VmHWM), bytes: mapped file pages it touched count, as they do for every
    engine here."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def serve(worker) -> None:
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "quit":
            break
        if op == "info":
            out = worker.info()
        elif op == "memory":
            out = {"peak_rss": peak_rss()}
        elif op == "pp":
            out = {"s": worker.pp(cmd["prompt"])}
        elif op == "tg":
            out = {"s": worker.tg(cmd["prompt"], cmd["n"])}
        elif op == "decode":
            out = {"s": worker.decode(cmd["prompts"], cmd["n"])}
        else:
            raise ValueError(f"unknown op {op!r}")
        print(json.dumps(out), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engine", choices=["llama", "lexi"])
    parser.add_argument("path")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--deterministic", action="store_true")
    args = parser.parse_args()
    if args.engine == "llama":
        worker = LlamaWorker(args.path, args.threads)
    else:
        worker = LexiWorker(args.path, args.deterministic)
    print(json.dumps({"ready": True}), flush=True)
    serve(worker)


if __name__ == "__main__":
    main()
