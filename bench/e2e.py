"""End-to-end throughput: LexiEngine beside llama-cpp-python, same model file, same threads, same run.

llama-bench conventions: pp512 is one 512-token prompt of random tokens processed at once, tg128 is
128 tokens decoded one at a time (batch 1) after a one-token prompt; each is repeated and the
median reported, after one untimed warm-up. Both peers decode greedily and read back the logits of
every step, so neither skips work the other does. LexiEngine is measured through its public API
(`Engine.generate`), so the step loop, sampler and streaming are all in the figure. Repetitions of
the two peers are interleaved, so a busy neighbour on a shared machine slows both alike.

Then aggregate decode throughput with 1, 4 and 8 concurrent sequences (16-token prompts, 128 new
tokens each): for LexiEngine, concurrent `generate` calls; for llama.cpp, one multi-sequence
`llama_batch` per step (its server's continuous batching, without the HTTP layer).

    .venv/bin/python bench/e2e.py [--models smollm2-135m-instruct gemma3-270m] [--reps 5] [--threads 2]

Prints a table and appends it to bench/RESULTS.md with the date, commit and machine.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

# Idle OpenMP workers sleep instead of spinning: on a shared machine spinning threads fight the other
# processes for the cores (measured: 2-thread decode 1.7 s/step spinning vs 0.17 s passive under load 6).
# libgomp reads this once, when torch loads it, so it is set before the import.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from lexi.engine.config import EngineConfig  # noqa: E402
from lexi.engine.engine import Engine  # noqa: E402
from lexi.engine.request import GenerationRequest  # noqa: E402
from lexi.engine.sampling import SamplingParams  # noqa: E402
from lexi.gguf.bundled import resolve_model  # noqa: E402
from lexi.gguf.reader import read_gguf  # noqa: E402
from lexi.gguf.tokenizer import Tokenizer  # noqa: E402
from lexi.model.loader import LoadConfig, load_model  # noqa: E402

PP, TG, CONC_PROMPT = 512, 128, 16
CONCURRENCY = (1, 4, 8)
RESULTS = Path(__file__).with_name("RESULTS.md")


def random_prompt(rng: np.random.Generator, vocab: int, n: int) -> list[int]:
    """Ordinary tokens (ids 1000..vocab/2): no control tokens, and a new prompt every time (no cache hits)."""
    return rng.integers(1000, vocab // 2, size=n).tolist()


class Lexi:
    def __init__(self, path: Path, dtype: str) -> None:
        f = read_gguf(path)
        self.tok = Tokenizer.from_gguf(f)
        self.model = load_model(f, LoadConfig(dtype=dtype))
        self.vocab = self.model.args.vocab_size
        config = EngineConfig(parallel=max(CONCURRENCY), ctx_size=PP + TG + 16, batch_size=PP)
        self.engine = Engine(self.model, self.tok, config)
        self.engine.start()

    def _generate(self, prompts: list[list[int]], max_tokens: int) -> float:
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)

        async def one(p):
            n = 0
            async for delta in self.engine.generate(GenerationRequest(p, params)):
                n += len(delta.token_ids)
            assert n == max_tokens

        async def all_of():
            await asyncio.gather(*(one(p) for p in prompts))

        start = time.perf_counter()
        asyncio.run(all_of())
        return time.perf_counter() - start

    def pp(self, prompt: list[int]) -> float:
        return len(prompt) / self._generate([prompt], 1)

    def tg(self, prompt: list[int]) -> float:
        return TG / self._generate([prompt[:1]], TG)

    def concurrent(self, prompts: list[list[int]]) -> float:
        return len(prompts) * TG / self._generate(prompts, TG)

    def close(self) -> None:
        self.engine.shutdown()


class LlamaCpp:
    def __init__(self, path: Path, threads: int) -> None:
        import llama_cpp

        self.lc = llama_cpp
        self.llm = llama_cpp.Llama(
            str(path), n_ctx=PP + TG + 16, n_batch=PP, n_ubatch=PP, n_threads=threads, n_threads_batch=threads,
            verbose=False,
        )  # fmt: skip
        self.vocab = self.llm.n_vocab()
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = max(CONCURRENCY) * (CONC_PROMPT + TG + 16)
        params.n_batch = params.n_ubatch = max(CONCURRENCY) * CONC_PROMPT
        params.n_seq_max = max(CONCURRENCY)
        params.n_threads = params.n_threads_batch = threads
        params.kv_unified = True
        self.multi = llama_cpp.llama_init_from_model(self.llm._model.model, params)
        self.batch = llama_cpp.llama_batch_init(params.n_batch, 0, params.n_seq_max)

    def _argmax(self, ctx, row: int) -> int:
        logits = self.lc.llama_get_logits_ith(ctx, row)
        return int(np.ctypeslib.as_array(logits, shape=(self.vocab,)).argmax())

    def pp(self, prompt: list[int]) -> float:
        self.llm.reset()
        self.lc.llama_memory_clear(self.lc.llama_get_memory(self.llm._ctx.ctx), True)
        start = time.perf_counter()
        self.llm.eval(prompt)
        self._argmax(self.llm._ctx.ctx, -1)
        return len(prompt) / (time.perf_counter() - start)

    def tg(self, prompt: list[int]) -> float:
        self.llm.reset()
        self.lc.llama_memory_clear(self.lc.llama_get_memory(self.llm._ctx.ctx), True)
        start = time.perf_counter()
        token = prompt[0]
        for _ in range(TG):
            self.llm.eval([token])
            token = self._argmax(self.llm._ctx.ctx, -1)
        return TG / (time.perf_counter() - start)

    def _decode(self, rows: list[tuple[int, int, int]]) -> None:
        """rows of (token, position, sequence); logits wanted for every row."""
        b = self.batch
        for i, (token, pos, seq) in enumerate(rows):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, True
            b.seq_id[i][0] = seq
        b.n_tokens = len(rows)
        if self.lc.llama_decode(self.multi, b) != 0:
            raise RuntimeError("llama_decode failed")

    def concurrent(self, prompts: list[list[int]]) -> float:
        self.lc.llama_memory_clear(self.lc.llama_get_memory(self.multi), True)
        start = time.perf_counter()
        self._decode([(t, p, s) for s, prompt in enumerate(prompts) for p, t in enumerate(prompt)])
        ends = np.cumsum([len(p) for p in prompts]) - 1
        tokens = [self._argmax(self.multi, int(e)) for e in ends]
        for step in range(1, TG):
            self._decode([(t, len(prompts[s]) + step - 1, s) for s, t in enumerate(tokens)])
            tokens = [self._argmax(self.multi, i) for i in range(len(prompts))]
        return len(prompts) * TG / (time.perf_counter() - start)

    def close(self) -> None:
        self.lc.llama_batch_free(self.batch)
        self.lc.llama_free(self.multi)
        self.llm.close()


def measure(name: str, reps: int, threads: int, dtype: str) -> list[tuple[str, float, float]]:
    path = resolve_model(name)
    lexi, peer = Lexi(path, dtype), LlamaCpp(path, threads)
    rng = np.random.default_rng(0)
    vocab = min(lexi.vocab, peer.vocab)
    rows = []
    tests = [("pp512", "pp", PP, 1), ("tg128", "tg", 1, 1)]
    tests += [(f"decode x{n}", "concurrent", CONC_PROMPT, n) for n in CONCURRENCY]
    for label, method, length, n in tests:
        times: dict[str, list[float]] = {"lexi": [], "llama": []}
        for rep in range(reps + 1):  # rep 0 is the warm-up
            for key, impl in (("lexi", lexi), ("llama", peer)):
                prompts = [random_prompt(rng, vocab, length) for _ in range(n)]
                value = getattr(impl, method)(prompts if method == "concurrent" else prompts[0])
                if rep:
                    times[key].append(value)
        rows.append((label, statistics.median(times["lexi"]), statistics.median(times["llama"])))
        print(f"  {name} {label}: lexi {rows[-1][1]:.1f} tok/s, llama.cpp {rows[-1][2]:.1f} tok/s", flush=True)
    lexi.close()
    peer.close()
    return rows


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{cpu}, {os.cpu_count()} cores, {platform.python_version()}, torch {torch.__version__}, load {load:.1f}"


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "lexi"], capture_output=True, text=True).stdout
        return out.stdout.strip() + ("+dirty" if dirty.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2-135m-instruct", "gemma3-270m"])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="auto", help="LexiEngine compute dtype (LoadConfig.dtype)")
    parser.add_argument("--no-append", action="store_true", help="print only; leave bench/RESULTS.md alone")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    llama_version = __import__("llama_cpp").__version__
    table = [
        "| model | test | LexiEngine tok/s | llama.cpp tok/s | ratio |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for name in args.models:
        for label, ours, theirs in measure(name, args.reps, args.threads, args.dtype):
            table.append(f"| {name} | {label} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f}x |")
    header = (
        f"### bench/e2e.py, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}\n\n"
        f"Machine: {machine()}; {args.threads} threads; LexiEngine dtype {args.dtype}, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}; "
        f"llama-cpp-python {llama_version}; median of {args.reps} after a warm-up.\n"
    )
    text = header + "\n" + "\n".join(table) + "\n"
    print("\n" + text)
    if not args.no_append:
        if not RESULTS.exists():
            RESULTS.write_text("# Benchmark results\n\nAppended by the scripts in bench/; newest last.\n\n")
        with RESULTS.open("a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
