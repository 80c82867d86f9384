"""Paged attention: the reference against dense SDPA, the Triton kernels (interpreter) against the reference.

Every case scatters random per-sequence K/V into a shuffled block pool whose other slots hold NaN, so a
kernel that reads past a sequence's end (lengths end mid-block) or through the wrong block id shows up as
NaN; kernel outputs are NaN-poisoned buffers, so a row or head left unwritten shows up too.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

from lexi.kernels.paged_attention import (
    AttentionMetadata,
    choose_variant,
    paged_attention,
    paged_attention_ref,
    write_kv,
)
from lexi.kernels.paged_attention_decode import choose_num_splits, paged_attention_decode
from lexi.kernels.paged_attention_prefill import paged_attention_prefill

BLOCK_SIZE = 16
WINDOW = 24  # shorter than several contexts below, longer than others
# Max |error| allowed against the fp32 (kernels) or fp64 (reference) answer; observed errors are ~5x lower.
TOL = {torch.float32: 2e-5, torch.float16: 4e-3}
# Decode: lengths 41, 1, 78, 16 (exactly one block) and 201 after this step.
DECODE_CACHED = [40, 0, 77, 15, 200]
# Prefill: a chunk after a prefix ending mid-block, a 70-row chunk (two 64-row query tiles) with no prefix,
# a sequence with no new row this step, a chunk longer than the window, and a single row.
PREFILL_NEW = [20, 70, 0, 33, 1]
PREFILL_CACHED = [17, 0, 50, 90, 5]


@dataclass
class Case:
    q: torch.Tensor  # (T, H, D)
    k_cache: torch.Tensor  # (num_blocks, BLOCK_SIZE, n_kv, D), NaN outside the sequences
    v_cache: torch.Tensor
    meta: AttentionMetadata
    keys: list[torch.Tensor]  # per sequence, dense (L, n_kv, D): what the block pool must yield
    values: list[torch.Tensor]
    cached: list[int]
    scale: float


def make_case(
    new: list[int],
    cached: list[int],
    shape: tuple[int, int, int],
    dtype: torch.dtype,
    q_gain: float = 1.0,
    shuffle: bool = True,
):  # fmt: skip
    """`shuffle` False: blocks in pool order (a lone sequence's are then consecutive), spare blocks after them."""
    group, n_kv, head_dim = shape
    gen = torch.Generator().manual_seed(1234 + 7 * group + n_kv + head_dim + len(new))
    lens = [n + c for n, c in zip(new, cached, strict=True)]
    counts = [-(-length // BLOCK_SIZE) for length in lens]
    pool = sum(counts) + 3  # spare blocks stay NaN
    order = torch.randperm(pool, generator=gen).tolist() if shuffle else list(range(pool))
    tables = [order[sum(counts[:s]) : sum(counts[: s + 1])] for s in range(len(lens))]
    k_cache = torch.full((pool, BLOCK_SIZE, n_kv, head_dim), float("nan"), dtype=dtype)
    v_cache = torch.full_like(k_cache, float("nan"))
    keys = [torch.randn(length, n_kv, head_dim, generator=gen).to(dtype) for length in lens]
    values = [torch.randn(length, n_kv, head_dim, generator=gen).to(dtype) for length in lens]
    # The prefix goes in as an earlier step would have written it, then this step's rows.
    prefix = AttentionMetadata.build(cached, [0] * len(lens), tables, BLOCK_SIZE)
    meta = AttentionMetadata.build(new, cached, tables, BLOCK_SIZE)
    for step, part in ((prefix, lambda t, s: t[: cached[s]]), (meta, lambda t, s: t[cached[s] :])):
        k = torch.cat([part(t, s) for s, t in enumerate(keys)])
        v = torch.cat([part(t, s) for s, t in enumerate(values)])
        write_kv(k, v, k_cache, v_cache, step.slot_mapping)
    q = (q_gain * torch.randn(sum(new), group * n_kv, head_dim, generator=gen)).to(dtype)
    return Case(q, k_cache, v_cache, meta, keys, values, cached, head_dim**-0.5)


def dense_attention(case: Case, window: int, softcap: float, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """fp64 answer from the dense K/V, masks built with tril instead of the positions the code uses; `sinks`:
    gpt-oss's written out, each head's sink logit as one more softmax column, with no value."""
    out = torch.full(case.q.shape, float("nan"), dtype=torch.float64)
    starts = case.meta.query_start_host
    group = case.q.shape[1] // case.k_cache.shape[2]
    for s, (keys, values) in enumerate(zip(case.keys, case.values, strict=True)):
        n, c = starts[s + 1] - starts[s], case.cached[s]
        if n == 0:
            continue
        q = case.q[starts[s] : starts[s + 1]].double().transpose(0, 1)
        k = keys.double().transpose(0, 1).repeat_interleave(group, 0)
        v = values.double().transpose(0, 1).repeat_interleave(group, 0)
        ones = torch.ones(n, c + n, dtype=torch.bool)
        allowed = ones.tril(c)  # row i sees j <= c + i
        if window:
            allowed &= ~ones.tril(c - window)  # ... and not j <= c + i - window
        if sinks is not None:
            z = (q @ k.transpose(1, 2) * case.scale).masked_fill(~allowed, float("-inf"))
            z = torch.cat([z, sinks.double()[:, None, None].expand(-1, n, 1)], dim=-1)
            o = torch.softmax(z, -1)[..., :-1] @ v
        elif softcap:
            z = softcap * torch.tanh(q @ k.transpose(1, 2) * case.scale / softcap)
            o = torch.softmax(z.masked_fill(~allowed, float("-inf")), -1) @ v
        elif c == 0 and not window:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=case.scale)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=case.scale)
        out[starts[s] : starts[s + 1]] = o.transpose(0, 1)
    return out


def max_error(got: torch.Tensor, want: torch.Tensor, what: str) -> float:
    assert not got.isnan().any(), f"{what}: NaN at {got.isnan().nonzero()[:5].tolist()}"
    diff = (got.double() - want.double()).abs()
    worst = divmod(int(diff.argmax()), got.shape[1] * got.shape[2])
    err = float(diff.max())
    print(f"{what}: max |err| {err:.2e} (row {worst[0]}, flat head/dim {worst[1]})")
    return err


def reference32(case: Case, window: int, softcap: float) -> torch.Tensor:
    """The reference on the same (dtype-rounded) inputs in fp32: the yardstick for the kernels."""
    return paged_attention_ref(case.q.float(), case.k_cache.float(), case.v_cache.float(), case.meta,
                               scale=case.scale, sliding_window=window, softcap=softcap)  # fmt: skip


# (GQA group, KV heads, head_dim): group 3 on two KV heads checks the head -> KV head map; 4 x 1 x 256 is gemma3.
SHAPES = [(1, 2, 64), (3, 2, 64), (4, 1, 64), (1, 2, 256), (3, 2, 256), (4, 1, 256)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("window", [0, WINDOW], ids=["full", "window"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "g{}kv{}d{}".format(*s))
def test_reference_matches_dense_sdpa(shape, window, dtype):
    for new, cached in ((PREFILL_NEW, PREFILL_CACHED), ([1] * len(DECODE_CACHED), DECODE_CACHED)):
        case = make_case(new, cached, shape, dtype)
        got = paged_attention_ref(
            case.q, case.k_cache, case.v_cache, case.meta, scale=case.scale, sliding_window=window
        )
        assert got.dtype == dtype
        assert max_error(got, dense_attention(case, window, 0.0), f"ref {dtype} vs sdpa") < TOL[dtype]


@pytest.mark.parametrize("window", [0, WINDOW], ids=["full", "window"])
def test_reference_softcap_matches_dense(window):
    case = make_case(PREFILL_NEW, PREFILL_CACHED, (4, 1, 64), torch.float32, q_gain=6.0)
    got = paged_attention_ref(case.q, case.k_cache, case.v_cache, case.meta, scale=case.scale,
                              sliding_window=window, softcap=5.0)  # fmt: skip
    uncapped = dense_attention(case, window, 0.0)
    assert max_error(got, dense_attention(case, window, 5.0), "ref softcap vs dense") < TOL[torch.float32]
    assert (got.double() - uncapped).abs().max() > 0.05  # the cap really changes these scores


def run_kernel(kernel, case: Case, window: int, softcap: float, **kwargs) -> torch.Tensor:
    out = torch.full_like(case.q, float("nan"))
    got = kernel(case.q, case.k_cache, case.v_cache, case.meta, scale=case.scale, sliding_window=window,
                 softcap=softcap, out=out, **kwargs)  # fmt: skip
    assert got is out and got.dtype == case.q.dtype
    return got


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("window", [0, WINDOW], ids=["full", "window"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "g{}kv{}d{}".format(*s))
def test_decode_kernel_matches_reference(shape, window, dtype):
    case = make_case([1] * len(DECODE_CACHED), DECODE_CACHED, shape, dtype)
    got = run_kernel(paged_attention_decode, case, window, 0.0, num_splits=1)
    assert max_error(got, reference32(case, window, 0.0), f"decode {dtype}") < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("window", [0, WINDOW], ids=["full", "window"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "g{}kv{}d{}".format(*s))
def test_prefill_kernel_matches_reference(shape, window, dtype):
    case = make_case(PREFILL_NEW, PREFILL_CACHED, shape, dtype)
    got = run_kernel(paged_attention_prefill, case, window, 0.0)
    assert max_error(got, reference32(case, window, 0.0), f"prefill {dtype}") < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("window", [0, WINDOW], ids=["full", "window"])
def test_kernels_softcap(window, dtype):
    for kernel, new, cached, kwargs in (
        (paged_attention_decode, [1] * len(DECODE_CACHED), DECODE_CACHED, {"num_splits": 1}),
        (paged_attention_prefill, PREFILL_NEW, PREFILL_CACHED, {}),
    ):
        case = make_case(new, cached, (4, 1, 256), dtype, q_gain=6.0)
        got = run_kernel(kernel, case, window, 5.0, **kwargs)
        assert max_error(got, reference32(case, window, 5.0), f"{kernel.__name__} softcap") < TOL[dtype]


@pytest.mark.parametrize("num_splits", [2, 3, 7])
@pytest.mark.parametrize(("window", "softcap"), [(0, 0.0), (100, 0.0), (0, 5.0)])
def test_decode_split_k_matches_reference(num_splits, window, softcap):
    # 7 splits of a 5-token context leave most splits empty; the merge must weigh them zero.
    case = make_case([1, 1, 1], [299, 4, 128], (4, 2, 64), torch.float32, q_gain=4.0)
    got = run_kernel(paged_attention_decode, case, window, softcap, num_splits=num_splits)
    assert max_error(got, reference32(case, window, softcap), f"decode split {num_splits}") < TOL[torch.float32]


def test_dispatch_picks_by_device_and_batch():
    decode = AttentionMetadata.build([1, 1], [5, 9], [[0], [1]], BLOCK_SIZE)
    mixed = AttentionMetadata.build([1, 3], [5, 9], [[0], [1]], BLOCK_SIZE)
    idle = AttentionMetadata.build([0, 2], [5, 0], [[0], [1]], BLOCK_SIZE)
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert [choose_variant(cuda, m) for m in (decode, mixed, idle)] == ["decode", "prefill", "prefill"]
    assert choose_variant(cpu, decode) == "reference"
    # --kernels: triton picks the kernels on any device (the interpreter on a CPU), reference the reference on CUDA.
    assert [choose_variant(cpu, m, "triton") for m in (decode, mixed)] == ["decode", "prefill"]
    assert choose_variant(cuda, decode, "reference") == "reference"
    with pytest.raises(ValueError, match="one new token"):
        case = make_case([3, 1], [5, 0], (1, 1, 64), torch.float32)
        paged_attention_decode(case.q, case.k_cache, case.v_cache, case.meta, scale=case.scale)


@pytest.mark.parametrize("variant", ["auto", "reference", "decode", "prefill"])
def test_forced_variants_agree(variant):
    case = make_case([1, 1, 1], [40, 0, 77], (3, 2, 64), torch.float32)
    want = paged_attention_ref(case.q, case.k_cache, case.v_cache, case.meta, scale=case.scale, sliding_window=WINDOW)
    got = paged_attention(case.q, case.k_cache, case.v_cache, case.meta, scale=case.scale, sliding_window=WINDOW,
                          variant=variant)  # fmt: skip
    if variant in ("auto", "reference"):
        assert torch.equal(got, want)  # the CPU path is the reference itself
    else:
        assert max_error(got, want, f"forced {variant}") < TOL[torch.float32]
    with pytest.raises(ValueError, match="variant"):
        paged_attention(case.q, case.k_cache, case.v_cache, case.meta, scale=case.scale, variant="flash")


def test_split_heuristic():
    assert choose_num_splits(n_programs=4, max_context=8192, n_sms=132) == 16  # few sequences, long context
    assert choose_num_splits(n_programs=32, max_context=4096, n_sms=132) == 8  # two waves over 132 SMs
    assert choose_num_splits(n_programs=264, max_context=8192, n_sms=132) == 1  # the batch fills the GPU
    assert choose_num_splits(n_programs=4, max_context=600, n_sms=132) == 1  # short contexts never split


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("window", [0, WINDOW], ids=["full", "window"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "g{}kv{}d{}".format(*s))
def test_cpu_decode_attention_matches_reference(shape, window, dtype):
    """The CPU decode step's attention (lexi/kernels/paged_attention_cpu.py): a padded batch of five sequences
    through shuffled blocks (NaN past each length), and each sequence alone, against the fp32 reference."""
    from lexi.kernels.paged_attention_cpu import DecodeBatch, decode_attention

    tol = {torch.float32: 2e-5, torch.bfloat16: 2e-2}[dtype]
    for cached in (DECODE_CACHED, *([c] for c in DECODE_CACHED)):
        case = make_case([1] * len(cached), cached, shape, dtype)
        batch = DecodeBatch.build(case.meta, BLOCK_SIZE, frozenset({0, window}))
        got = decode_attention(case.q, case.k_cache, case.v_cache, batch, scale=case.scale, sliding_window=window)
        assert got.dtype == dtype
        assert max_error(got, reference32(case, window, 0.0), f"cpu decode {dtype} {cached}") < tol


# Short steps (a speculative draft's rows checked in one step): 9, 1, 4, 16 and 2 new rows.
SHORT_NEW = [9, 1, 4, 16, 2]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("window", [0, WINDOW], ids=["full", "window"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "g{}kv{}d{}".format(*s))
def test_cpu_decode_attention_of_short_steps_matches_reference(shape, window, dtype):
    """Steps where sequences add up to 16 rows each run as decode steps: every row attends to the keys before it
    (causal within the step's rows), padded queries never reach the output. The padded batch, each sequence alone
    through shuffled blocks, and alone through consecutive blocks (a view of the pool, no gather)."""
    from lexi.kernels.paged_attention_cpu import DecodeBatch, decode_attention

    tol = {torch.float32: 2e-5, torch.bfloat16: 2e-2}[dtype]
    cases = [(SHORT_NEW, DECODE_CACHED, True)]
    cases += [([n], [c], shuffle) for n, c in zip(SHORT_NEW, DECODE_CACHED, strict=True) for shuffle in (True, False)]
    for new, cached, shuffle in cases:
        case = make_case(new, cached, shape, dtype, shuffle=shuffle)
        batch = DecodeBatch.build(case.meta, BLOCK_SIZE, frozenset({0, window}))
        assert batch is not None and batch.rows == max(new)
        got = decode_attention(case.q, case.k_cache, case.v_cache, batch, scale=case.scale, sliding_window=window)
        assert got.dtype == dtype and got.shape == case.q.shape
        assert max_error(got, reference32(case, window, 0.0), f"cpu short {dtype} {new} {cached}") < tol


def test_decode_batch_takes_only_short_steps():
    from lexi.kernels.paged_attention_cpu import SHORT_STEP_ROWS, DecodeBatch

    shape = SHAPES[0]
    for new, short in (([1, 1], True), ([SHORT_STEP_ROWS, 1], True), ([SHORT_STEP_ROWS + 1, 1], False),
                       ([3, 0], False)):  # fmt: skip
        case = make_case(new, [5, 7], shape, torch.float32)
        assert (DecodeBatch.build(case.meta, BLOCK_SIZE, frozenset({0})) is not None) == short, new


SINK_SHAPES = [(1, 2, 64), (4, 2, 64), (8, 1, 64)]  # gpt-oss: 64 heads over 8 KV heads of 64


@pytest.mark.parametrize("window", [0, WINDOW], ids=["full", "window"])
@pytest.mark.parametrize("shape", SINK_SHAPES, ids=lambda s: "g{}kv{}d{}".format(*s))
def test_sinks_in_the_reference_the_cpu_decode_and_the_rowwise_paths(shape, window):
    """Attention sinks (a learned logit per head joining the softmax) in the reference (prefill chunks and decode rows),
    the CPU decode attention (a padded batch and each sequence alone) and the row-by-row path of --deterministic,
    against the fp64 softmax with the sink column written out. Sinks of +-3 move real probability mass."""
    from lexi.kernels.paged_attention_cpu import DecodeBatch, attention_rowwise, decode_attention

    heads = shape[0] * shape[1]
    sinks = 3.0 * torch.randn(heads, generator=torch.Generator().manual_seed(heads + window))
    kw = dict(scale=None, sliding_window=window, sinks=sinks)
    for new, cached in ((PREFILL_NEW, PREFILL_CACHED), ([1] * len(DECODE_CACHED), DECODE_CACHED)):
        case = make_case(new, cached, shape, torch.float32)
        kw["scale"] = case.scale
        want = dense_attention(case, window, 0.0, sinks)
        assert (want - dense_attention(case, window, 0.0)).abs().max() > 1e-2  # the sinks change the answer
        got = paged_attention_ref(case.q, case.k_cache, case.v_cache, case.meta, **kw)
        assert max_error(got, want, f"ref sinks {new}") < TOL[torch.float32]
        got = attention_rowwise(case.q, case.k_cache, case.v_cache, case.meta, **kw)
        assert max_error(got, want, f"rowwise sinks {new}") < TOL[torch.float32]
    for new, cached in ((None, DECODE_CACHED), *((None, [c]) for c in DECODE_CACHED), (SHORT_NEW, DECODE_CACHED)):
        case = make_case(new or [1] * len(cached), cached, shape, torch.float32)
        batch = DecodeBatch.build(case.meta, BLOCK_SIZE, frozenset({0, window}))
        got = decode_attention(case.q, case.k_cache, case.v_cache, batch, **{**kw, "scale": case.scale})
        want = dense_attention(case, window, 0.0, sinks)
        assert max_error(got, want, f"cpu decode sinks {new} {cached}") < TOL[torch.float32]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("window", [0, WINDOW], ids=["full", "window"])
@pytest.mark.parametrize("shape", SINK_SHAPES, ids=lambda s: "g{}kv{}d{}".format(*s))
def test_triton_kernels_with_sinks(shape, window, dtype):
    """The decode kernel (one program and split-K, where the merge adds the sink once) and the prefill kernel with
    gpt-oss's sinks, through the dispatcher, against the fp64 softmax with the sink column written out."""
    heads = shape[0] * shape[1]
    sinks = 3.0 * torch.randn(heads, generator=torch.Generator().manual_seed(2 * heads + window))
    runs = [(paged_attention_decode, [1] * len(DECODE_CACHED), DECODE_CACHED, {"num_splits": n}) for n in (1, 3)]
    runs.append((paged_attention_prefill, PREFILL_NEW, PREFILL_CACHED, {}))
    for kernel, new, cached, kwargs in runs:
        case = make_case(new, cached, shape, dtype)
        got = run_kernel(kernel, case, window, 0.0, sinks=sinks, **kwargs)
        want = dense_attention(case, window, 0.0, sinks)
        assert (want - dense_attention(case, window, 0.0)).abs().max() > 1e-2  # the sinks change the answer
        assert max_error(got, want, f"{kernel.__name__} sinks {kwargs}") < TOL[dtype]
    variant = "prefill"  # the dispatcher hands the sinks on (the forced variant of --kernels triton)
    got = paged_attention(case.q, case.k_cache, case.v_cache, case.meta, scale=case.scale, sliding_window=window,
                          sinks=sinks, variant=variant)  # fmt: skip
    assert max_error(got, want, "dispatched prefill sinks") < TOL[dtype]
    with pytest.raises(ValueError, match="sinks must be"):
        run_kernel(paged_attention_prefill, case, window, 0.0, sinks=sinks[:-1])
