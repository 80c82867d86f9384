"""What a loaded model holds in memory, said at startup so a user can size a machine (README "Memory").

Weights are counted where they live: bytes LexiEngine keeps (repacked layouts, dense tensors, GGUF blocks on a
device) and bytes read in place from the memory-mapped file (weights in the file's layout, the embedding's rows),
which the kernel pages in as they are touched and may drop again under pressure. The KV cache is the engine's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from lexi.kernels.fused_moe_cpu import CpuExperts
from lexi.model.linear import BlockEmbedding, FusedLinear, QuantLinear
from lexi.model.moe import MoEFFN


@dataclass(frozen=True, slots=True)
class MemoryReport:
    held: int  # bytes of weights LexiEngine keeps (host or device)
    mapped: int  # bytes of weights read in place from the mapped GGUF file
    kv_cache: int  # bytes of the KV cache
    kv_per_token: int  # bytes of KV cache one token takes over every layer

    def line(self, slots: int, ctx: int) -> str:
        gb = 1e9
        return (
            f"memory: weights {self.held / gb:.2f} GB held + {self.mapped / gb:.2f} GB read from the mapped file; "
            f"KV cache {self.kv_cache / gb:.2f} GB ({slots} slots x {ctx} tokens x {self.kv_per_token / 1024:.0f} KiB)"
        )


def _tensor_bytes(t: torch.Tensor | np.ndarray | None) -> int:
    if t is None:
        return 0
    return int(t.nbytes) if isinstance(t, np.ndarray) else t.numel() * t.element_size()


def memory_report(model: nn.Module, kv_cache: list[tuple[torch.Tensor, torch.Tensor]]) -> MemoryReport:
    """Weights by where they live (shared tensors counted once), and the KV cache of `kv_cache`."""
    held = mapped = 0
    seen: set[int] = set()
    for module in model.modules():
        if isinstance(module, FusedLinear):
            continue  # its weights are its parts', counted there
        if isinstance(module, QuantLinear) and module.cpu is not None:
            w = module.cpu[0]
            if id(w.data) not in seen:
                seen.add(id(w.data))
                if w.layout == "file":
                    mapped += w.nbytes
                else:
                    held += w.nbytes
        elif isinstance(module, QuantLinear) and module.qweight is not None:
            held += module.qweight.nbytes
        elif isinstance(module, BlockEmbedding):
            mapped += _tensor_bytes(module.rows)
        elif isinstance(module, MoEFFN) and isinstance(module.experts, CpuExperts):
            for ws in (module.experts.gate, module.experts.up, module.experts.down):
                for w in ws:
                    if w.layout == "file":
                        mapped += w.nbytes
                    else:
                        held += w.nbytes
        elif isinstance(module, MoEFFN):
            e = module.experts
            held += sum(_tensor_bytes(w.data) for w in (e.gate, e.up, e.down))
        for p in module.parameters(recurse=False):
            if id(p) not in seen:
                seen.add(id(p))
                held += _tensor_bytes(p)
    kv = sum(_tensor_bytes(k) + _tensor_bytes(v) for k, v in kv_cache)
    tokens = kv_cache[0][0].shape[0] * kv_cache[0][0].shape[1] if kv_cache else 0
    return MemoryReport(held, mapped, kv, kv // tokens if tokens else 0)
