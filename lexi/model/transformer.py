"""The decoder stack: one `Block` per layer and the `Transformer` that runs a step over the paged cache."""

from __future__ import annotations

import torch
from torch import nn

from lexi.kernels.cpu_qmatmul import CpuKernels
from lexi.kernels.paged_attention import AttentionMetadata
from lexi.kernels.quant_weight import GEMV_MAX_M as TRITON_GEMV_MAX_M
from lexi.model.args import ModelArgs
from lexi.model.attention import Attention
from lexi.model.decode_c import DecodeProgram, short_step
from lexi.model.decode_cpu import DecodeStack, run_decode
from lexi.model.head import OutputHead
from lexi.model.mlp import GatedMLP
from lexi.model.moe import MoEFFN
from lexi.model.norms import RMSNorm
from lexi.model.rope import RopeCache, inverse_frequencies, yarn_frequencies
from lexi.model.step import StepPlan

KVCache = list[tuple[torch.Tensor, torch.Tensor]]


class Block(nn.Module):
    """Pre-norm residual block; gemma3 adds norms on the attention and MLP outputs (sandwich norms).

    The residual stream x may be wider than the compute dtype (float32 on a CPU): the norms then read it as
    it is and hand the matmuls `dtype`, and each block's output is added at full precision.
    """

    def __init__(
        self,
        attn_norm: RMSNorm,
        attn: Attention,
        ffn_norm: RMSNorm,
        mlp: GatedMLP | MoEFFN,
        post_attn_norm: RMSNorm | None = None,
        post_ffn_norm: RMSNorm | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.attn_norm, self.attn, self.ffn_norm, self.mlp = attn_norm, attn, ffn_norm, mlp
        self.post_attn_norm, self.post_ffn_norm = post_attn_norm, post_ffn_norm
        self.dtype = dtype  # the matmuls' input dtype; None: the residual stream's

    def forward(
        self, x: torch.Tensor, plan: StepPlan, meta: AttentionMetadata, cache: tuple[torch.Tensor, torch.Tensor]
    ) -> torch.Tensor:
        h = self.attn(self.attn_norm(x, self.dtype), plan, meta, cache)
        if self.post_attn_norm is not None:
            h = self.post_attn_norm(h, x.dtype)
        x = x + h
        h = self.mlp(self.ffn_norm(x, self.dtype), plan.deterministic)
        if self.post_ffn_norm is not None:
            h = self.post_ffn_norm(h, x.dtype)
        return x + h


class Transformer(nn.Module):
    """Token ids of one flat batch -> float32 logits of the rows `meta.logit_rows` asks for."""

    def __init__(
        self,
        args: ModelArgs,
        embed: nn.Module,
        blocks: list[Block],
        norm: RMSNorm,
        output: OutputHead,
        dtype: torch.dtype,
        device: torch.device,
        rope_freq_factors: torch.Tensor | None = None,
        deterministic: bool = False,
        kernels: str = "reference",
        cpu_kernels: CpuKernels | None = None,
    ) -> None:
        super().__init__()
        self.args, self.dtype, self.device = args, dtype, device
        self.embed = embed
        self.blocks = nn.ModuleList(blocks)
        self.norm = norm
        self.output = output
        # On a CPU the residual stream stays float32 (measured: no slower, since the norms then skip a cast, and
        # the sums are exact at float32), and so do the matmuls' inputs: the CPU kernels quantize float32 rows
        # themselves. On CUDA both are the compute dtype; the KV cache is the compute dtype everywhere.
        self.residual_dtype = torch.float32 if device.type == "cpu" else dtype
        for block in self.blocks:
            block.dtype = self.residual_dtype
        # --deterministic: only row-independent paths (lexi/model/step.py), so a request's tokens do not
        # depend on the batch it shares or on prefix-cache hits.
        self.deterministic = deterministic
        inv_global = inverse_frequencies(args.rope_dim, args.rope_base, rope_freq_factors)
        mscale = 1.0
        if args.yarn_factor:
            inv_global, mscale = yarn_frequencies(
                inv_global, args.rope_base, args.yarn_factor, args.yarn_orig_ctx, args.yarn_beta_fast,
                args.yarn_beta_slow, args.yarn_attn_factor,
            )  # fmt: skip
        self.rope_global = RopeCache(inv_global.to(device), args.rope_scale, args.rope_style, mscale)
        # Sliding-window layers have their own base and are never position-scaled (gemma3), or rotate as the global
        # layers do (gpt-oss: the same table).
        self.rope_local = None
        if any(args.layer_windows) and args.rope_local_scaled:
            if args.rope_base_local != args.rope_base:
                raise ValueError("rope_local_scaled needs rope_base_local == rope_base")
        elif any(args.layer_windows):
            inv_local = inverse_frequencies(args.rope_dim, args.rope_base_local).to(device)
            self.rope_local = RopeCache(inv_local, 1.0, args.rope_style)
        self.windows = frozenset(args.layer_windows)
        # "triton" or "reference" (lexi/kernels/backend.py), as the layers were built with. The CPU's own paths below
        # (the lean decode loop, the decode attention plan) serve the reference only: with Triton kernels on a CPU
        # (the interpreter, for tests) every step takes the modules, as it does on CUDA.
        self.kernels = kernels
        self.cpu_paths = device.type == "cpu" and kernels == "reference"
        # CPU decode steps run one lean loop over the layers' CPU-kernel weights (lexi/model/decode_cpu.py).
        self.decode_stack = DecodeStack.from_blocks(blocks) if self.cpu_paths else None
        # ... and where the C kernels can, as one call for every layer (lexi/model/decode_c.py); None forces the loop.
        self.decode_program = DecodeProgram.build(self.decode_stack, dtype)
        # The CPU kernels' own thread pool does the matmuls; torch's ops between them (attention, norms) then run on
        # the calling thread alone. Two thread teams on the same cores took them from each other for whole
        # scheduler slices (measured: Llama-3-8B decode 1.4 tok/s with torch on 2 threads, 3.0 with 1).
        self.cpu_kernels = cpu_kernels

    @property
    def cheap_rows(self) -> int | None:
        """Rows of x a step may feed while its matmuls stay on their decode path, which reads each weight once for
        all rows (the engine keeps a step's draft tokens within it: lexi/engine/draft_budget.py). The CPU kernels'
        `decode_rows`, the Triton GEMV's row limit (lexi/kernels/qmatmul.py); None where the matmuls have no such
        path (dense weights, the dequantizing reference)."""
        if self.cpu_kernels is not None:
            return self.cpu_kernels.decode_rows
        if self.kernels == "triton":
            return TRITON_GEMV_MAX_M
        return None

    def new_kv_cache(self, num_blocks: int, block_size: int) -> KVCache:
        """One (k, v) pair per layer, each (num_blocks, block_size, n_kv_heads, head_dim) in the compute dtype."""
        a = self.args
        shape = (num_blocks, block_size, a.n_kv_heads, a.head_dim)
        return [
            (
                torch.zeros(shape, dtype=self.dtype, device=self.device),
                torch.zeros(shape, dtype=self.dtype, device=self.device),
            )
            for _ in range(a.n_layers)
        ]

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, meta: AttentionMetadata, kv_cache: KVCache) -> torch.Tensor:
        """tokens (T,) -> logits (R, vocab) float32 for meta.logit_rows (all T rows when None)."""
        if self.cpu_kernels is None:
            return self._forward(tokens, meta, kv_cache)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._forward(tokens, meta, kv_cache)
        finally:
            torch.set_num_threads(threads)

    def _forward(self, tokens: torch.Tensor, meta: AttentionMetadata, kv_cache: KVCache) -> torch.Tensor:
        a = self.args
        if len(kv_cache) != a.n_layers:
            raise ValueError(f"kv_cache has {len(kv_cache)} layers, the model {a.n_layers}")
        x = self.embed(tokens).to(self.residual_dtype)
        program = self.decode_program
        in_c = program is not None and not self.deterministic and short_step(meta) and program.accepts(kv_cache)
        plan = StepPlan.build(
            meta,
            self.rope_global,
            self.rope_local,
            cpu=self.cpu_paths and not in_c,  # the C step plans its own attention
            block_size=kv_cache[0][0].shape[1],
            windows=self.windows,
            deterministic=self.deterministic,
        )
        if in_c:
            x = program.run(x, meta, plan.rope_global, plan.rope_local, kv_cache)
        elif plan.decode is not None and self.decode_stack is not None:
            x = run_decode(self.decode_stack, x, plan, meta.slot_mapping, kv_cache)
        else:
            for block, cache in zip(self.blocks, kv_cache, strict=True):
                x = block(x, plan, meta, cache)
        if meta.logit_rows is not None:
            x = x[meta.logit_rows]
        # The head reads the final norm at the residual stream's precision (its int4/int8 estimates round it).
        logits = self.output(self.norm(x, self.residual_dtype), plan.deterministic)
        if a.final_softcap > 0.0:
            logits = a.final_softcap * torch.tanh(logits / a.final_softcap)
        return logits
