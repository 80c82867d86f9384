"""The device check's fused-MoE section (bench/device_check.py): the Triton MoE kernels against the reference on the
device, and their speed, on one layer shaped like each family that needs them.

Layers (random but valid GGUF blocks, router ids from random logits, so every expert is equally likely):
  - qwen3-30b-a3b: 128 experts, top-8, dim 2048, expert FFN 768, Q4_K gate/up and Q6_K down (as Q4_K_M), SiLU;
  - gpt-oss-20b: 32 experts, top-4, dim 2880, expert FFN 2880, MXFP4, biases, clamped SwiGLU.
For each token count: rel err against `fused_moe_ref` in fp32 on the same device (max |err| / max |ref|, within
the bf16 tolerance), then the time of `fused_moe(..., kernels="triton")`. Decode rows (GEMV form) report GB/s of
the chosen experts' weight bytes (each read once per call: the ceiling is the copy bandwidth); prefill rows (the
grouped GEMM) report TFLOP/s of 2 T k 3 D F against `torch.matmul` in bf16 doing the same FLOPs on one dense
expert (the dense ceiling: no grouping, nothing to dequantize).
"""

from __future__ import annotations

import dataclasses
import functools


@dataclasses.dataclass(frozen=True, slots=True)
class MoELayer:
    name: str
    experts: int
    top_k: int
    dim: int
    ffn: int
    types: tuple[str, str, str]  # gate, up, down
    activation: str
    biases: bool


LAYERS = [
    MoELayer("qwen3-30b-a3b", 128, 8, 2048, 768, ("Q4_K", "Q4_K", "Q6_K"), "silu", False),
    MoELayer("gpt-oss-20b", 32, 4, 2880, 2880, ("MXFP4", "MXFP4", "MXFP4"), "swiglu_oai", True),
]
# The dry run: the same code on shapes the interpreter runs in seconds.
DRY_LAYERS = [
    MoELayer("tiny-qwen3moe", 8, 2, 256, 256, ("Q4_K", "Q4_K", "Q6_K"), "silu", False),
    MoELayer("tiny-gpt-oss", 4, 2, 64, 96, ("MXFP4", "MXFP4", "MXFP4"), "swiglu_oai", True),
]


def random_ffn(layer: MoELayer, device: str):
    """The layer's experts as ExpertFFN, from bench/qmatmul.py's random blocks (one (E * N, K) weight per
    projection, viewed as (E, N, K)), small random biases."""
    import torch
    from qmatmul import random_weight

    from lexi.kernels.moe_types import ExpertFFN, ExpertWeights, GatedActivation

    def experts(qtype_name: str, n: int, k: int) -> ExpertWeights:
        w = random_weight(qtype_name, layer.experts * n, k, device)
        return ExpertWeights(w.qtype, (layer.experts, n, k), w.data.view(layer.experts, n, -1))

    e, d, f = layer.experts, layer.dim, layer.ffn
    bias = {}
    if layer.biases:
        sizes = {"gate_bias": f, "up_bias": f, "down_bias": d}
        bias = {name: 0.01 * torch.randn(e, n, device=device) for name, n in sizes.items()}
    gate, up, down = layer.types
    return ExpertFFN(experts(gate, f, d), experts(up, f, d), experts(down, d, f), GatedActivation(layer.activation),
                     **bias)  # fmt: skip


def route(layer: MoELayer, n_tokens: int, device: str):
    """Top-k of random router logits, softmax over the chosen k (gpt-oss's order; qwen3moe's normalised softmax
    gives the same weights)."""
    import torch

    logits = torch.randn(n_tokens, layer.experts, device=device)
    top, ids = logits.topk(layer.top_k, dim=-1)
    return ids, torch.softmax(top, dim=-1)


def _dense_pair(a, w_up, h, w_down):
    """The dense ceiling: the gate/up and down FLOPs of every assignment as two plain matmuls."""
    return a @ w_up.T, h @ w_down.T


def moe_rows(device: str, dtype_name: str, layers: list[MoELayer], token_counts: tuple[int, ...], copy_gbs: float,
             tol: float) -> list[dict]:  # fmt: skip
    """One row per (layer, T): the check against the reference, then the timing."""
    import torch
    from device_kernels import timer

    from lexi.kernels.fused_moe import choose_moe_variant, fused_moe
    from lexi.kernels.fused_moe_ref import fused_moe_ref

    bench, dtype = timer(device), getattr(torch, dtype_name)
    rows = []
    for layer in layers:
        torch.manual_seed(0)
        ffn = random_ffn(layer, device)
        per_expert = ffn.gate.expert_nbytes + ffn.up.expert_nbytes + ffn.down.expert_nbytes
        for n_tokens in token_counts:
            ids, weights = route(layer, n_tokens, device)
            x = torch.randn(n_tokens, layer.dim, device=device).to(dtype)
            want = fused_moe_ref(x.float(), ffn, ids, weights)
            got = fused_moe(x, ffn, ids, weights, kernels="triton").float()
            err = ((got - want).abs().max() / want.abs().max()).item()
            used = int(torch.unique(ids).numel())
            ms = bench(functools.partial(fused_moe, x, ffn, ids, weights, kernels="triton"))
            row = {"layer": layer.name, "T": n_tokens, "variant": choose_moe_variant(x, "triton"), "experts": used,
                   "MB": used * per_expert / 1e6, "us": ms * 1e3, "rel_err": err,
                   "ok": bool(torch.isfinite(got).all()) and err <= tol}  # fmt: skip
            row["gbs"] = used * per_expert / (ms * 1e-3) / 1e9
            row["pct_copy"] = 100 * row["gbs"] / copy_gbs
            flops = 2 * n_tokens * layer.top_k * 3 * layer.dim * layer.ffn
            row["tflops"] = flops / (ms * 1e-3) / 1e12
            row["tflops_dense"] = float("nan")
            if row["variant"] == "gemm":
                a = torch.randn(n_tokens * layer.top_k, layer.dim, device=device).to(dtype)
                w_up = torch.randn(2 * layer.ffn, layer.dim, device=device).to(dtype)
                h = torch.randn(n_tokens * layer.top_k, layer.ffn, device=device).to(dtype)
                w_down = torch.randn(layer.dim, layer.ffn, device=device).to(dtype)
                dense_ms = bench(functools.partial(_dense_pair, a, w_up, h, w_down))
                row["tflops_dense"] = flops / (dense_ms * 1e-3) / 1e12
            rows.append(row)
        del ffn
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows
