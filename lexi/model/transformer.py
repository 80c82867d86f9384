"""The `Transformer`: embeddings, the layers (through the decode path its loader chose) and the head, one step over
the paged cache."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

import torch
from torch import nn

from lexi.kernels.cpu_qmatmul import CpuKernels
from lexi.kernels.paged_attention import AttentionMetadata
from lexi.kernels.quant_weight import GEMV_MAX_M as TRITON_GEMV_MAX_M
from lexi.model.args import ModelArgs
from lexi.model.block import Block
from lexi.model.decode_path import DecodePath, KVCache
from lexi.model.head import OutputHead
from lexi.model.norms import RMSNorm
from lexi.model.rope import RopeCache, inverse_frequencies, yarn_frequencies
from lexi.model.step import StepPlan

if TYPE_CHECKING:
    from lexi.model.decode_c import DecodeProgram
    from lexi.model.decode_cpu import DecodeStack


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
        decode_path: DecodePath,
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
        # "triton" or "reference" (lexi/kernels/backend.py), as the layers were built with.
        self.kernels = kernels
        # How a step runs the layers (lexi/model/decode_path.py): on a CPU the C step or the lean loop where they
        # apply, else the modules. The loader picks it, over these same blocks.
        self.decode_path = decode_path
        # The CPU kernels' own thread pool does the matmuls; torch's ops between them (attention, norms) then run on
        # the calling thread alone. Two thread teams on the same cores took them from each other for whole
        # scheduler slices (measured: Llama-3-8B decode 1.4 tok/s with torch on 2 threads, 3.0 with 1).
        self.cpu_kernels = cpu_kernels

    @property
    def cpu_paths(self) -> bool:
        """Whether the CPU's own paths (the C step, the lean loop, the decode attention plan) can take a step."""
        return self.decode_path.cpu_paths

    @property
    def decode_stack(self) -> DecodeStack | None:
        """The lean loop's view of the layers (lexi/model/decode_cpu.py), where the decode path has one."""
        return self.decode_path.stack

    @property
    def decode_program(self) -> DecodeProgram | None:
        """The C step (lexi/model/decode_c.py), where the decode path has one."""
        return self.decode_path.program

    @decode_program.setter
    def decode_program(self, program: DecodeProgram | None) -> None:
        """Steps through another program (tests: the portable ISA's), or None to force the lean loop."""
        self.decode_path = replace(self.decode_path, program=program)

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
        plan_of = partial(self.step_plan, meta, kv_cache[0][0].shape[1])
        x = self.decode_path.run(x, meta, kv_cache, plan_of, self.deterministic)
        if meta.logit_rows is not None:
            x = x[meta.logit_rows]
        # The head reads the final norm at the residual stream's precision (its int4/int8 estimates round it).
        logits = self.output(self.norm(x, self.residual_dtype), self.deterministic)
        if a.final_softcap > 0.0:
            logits = a.final_softcap * torch.tanh(logits / a.final_softcap)
        return logits

    def step_plan(self, meta: AttentionMetadata, block_size: int, cpu: bool) -> StepPlan:
        """What every layer of the step shares (lexi/model/step.py); `cpu`: with the CPU's decode attention plan."""
        return StepPlan.build(
            meta,
            self.rope_global,
            self.rope_local,
            cpu=cpu,
            block_size=block_size,
            windows=self.windows,
            deterministic=self.deterministic,
        )
