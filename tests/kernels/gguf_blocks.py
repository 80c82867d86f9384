"""Random but valid GGUF blocks of any type, for the kernel tests: uniform bytes, with every scale field finite."""

from __future__ import annotations

import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

Q = GGMLQuantizationType
# Byte offsets of the fp16 fields of each block type: they get finite values, every other byte is random.
F16_FIELDS = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
    Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208],
    Q.IQ4_NL: [0], Q.IQ4_XS: [0], Q.MXFP4: [],
}  # fmt: skip


def random_blocks(qtype: GGMLQuantizationType, n_elements: int, gen: torch.Generator, scale: float = 1.0):
    """(n_elements / block, type_size) uint8: each fp16 scale field uniform in (-scale, scale); MXFP4's E8M0 scale
    byte 2^-10 to 2^1 times `scale` rounded to a power of two (the range of real weights' block scales)."""
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    blocks = torch.randint(0, 256, (n_elements // block_size, type_size), dtype=torch.uint8, generator=gen)
    for off in F16_FIELDS[qtype]:
        d = ((torch.rand(blocks.shape[0], generator=gen) * 2 - 1) * scale).to(torch.float16)
        blocks[:, off : off + 2] = d.view(torch.uint8).reshape(-1, 2)
    if qtype == Q.MXFP4:
        shift = round(torch.log2(torch.tensor(scale)).item())
        blocks[:, 0] = torch.randint(118 + shift, 130 + shift, (blocks.shape[0],), dtype=torch.uint8, generator=gen)
    return blocks
