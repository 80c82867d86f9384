"""Text in, tokens out for one prompt: the loop behind `lexi-engine generate` (no server, no scheduler).

The token choice is passed in (`pick`), so this module stays below the engine: the command hands it
the engine's sampler, tests hand it argmax.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from lexi.model.single import SingleSequence
from lexi.model.transformer import Transformer

# pick(logits (vocab,) float32, tokens so far: prompt + generated) -> next token id
Picker = Callable[[torch.Tensor, list[int]], int]


@dataclass(frozen=True, slots=True)
class GenerateConfig:
    n_predict: int = 128  # tokens to generate at most
    prefill_chunk: int = 512  # prompt tokens per forward: bounds the attention scores' memory
    stop_at_eog: bool = True  # end at the tokenizer's end-of-generation tokens (the EOG token is kept)

    def __post_init__(self) -> None:
        if self.n_predict < 0:
            raise ValueError(f"n_predict must be >= 0, got {self.n_predict}")
        if self.prefill_chunk <= 0:
            raise ValueError(f"prefill_chunk must be > 0, got {self.prefill_chunk}")


def greedy(logits: torch.Tensor, _history: list[int]) -> int:
    return int(logits.argmax())


def generate_tokens(
    model: Transformer,
    prompt_ids: Sequence[int],
    pick: Picker,
    config: GenerateConfig,
    eog_ids: frozenset[int] = frozenset(),
) -> Iterator[int]:
    """Yield up to n_predict tokens after the prompt, stopping after an EOG token when asked to."""
    if not prompt_ids:
        raise ValueError("the prompt is empty: nothing to condition on (is add_bos off for this model?)")
    if config.n_predict == 0:
        return
    limit = min(len(prompt_ids) + config.n_predict, model.args.context_length)
    if len(prompt_ids) >= limit:
        raise ValueError(f"the prompt has {len(prompt_ids)} tokens; the context holds {model.args.context_length}")
    seq = SingleSequence(model, limit)
    history = list(prompt_ids)
    for start in range(0, len(history), config.prefill_chunk):
        logits = seq.extend(history[start : start + config.prefill_chunk])
    while True:
        token = pick(logits, history)
        history.append(token)
        yield token
        if (config.stop_at_eog and token in eog_ids) or len(history) >= limit:
            return
        logits = seq.extend([token])
