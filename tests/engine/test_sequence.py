"""A sequence's tokens as the step builder reads them."""

from __future__ import annotations

from engine.sequence import Sequence


def test_token_slice_is_the_slice_of_prompt_and_output_together():
    """Within the prompt, within the output, and across the two (a recompute after preemption
    runs both): the same as slicing token_ids, for every start and end."""
    seq = Sequence(id=0, prompt_ids=[10, 11, 12, 13], max_new_tokens=8, output_ids=[20, 21, 22])
    tokens = seq.token_ids
    for start in range(len(tokens) + 1):
        for end in range(start, len(tokens) + 1):
            assert seq.token_slice(start, end) == tokens[start:end], (start, end)
