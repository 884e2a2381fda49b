"""Two samplers drawing from the same rows, compared token for token (the compiled draws
against llama.cpp's chain over the whole vocabulary: test_top_k, test_sparse_draw)."""

from __future__ import annotations

from typing import Any

from juggler.engine.llama.native import Model


def draw_alike(model: Model, ctx: Any, fast: Any, whole: Any, steps: int = 6) -> int:
    """Decode 16 prompts, draw each row's next token with `fast` and with `whole`, assert
    they agree and grow each prompt by it, `steps` times; how many draws (16 a step)."""
    batch = model.new_batch(512)
    try:
        prompts = [model.tokenize(f"Story {i}: once upon a", add_special=True) for i in range(16)]
        drawn = 0
        for step in range(steps):
            batch.clear()
            rows = []
            for seq, p in enumerate(prompts):
                for j, tok in enumerate(p):
                    row = batch.add(tok, j, seq, j == len(p) - 1)
                rows.append(row)
            assert ctx.decode(batch) == 0
            for seq, row in enumerate(rows):
                a, b = fast.sample(row), whole.sample(row)
                assert a == b, f"step {step}, row {seq}"
                drawn += 1
                prompts[seq] = [*prompts[seq], a]
            ctx.seq_rm(-1)
        return drawn
    finally:
        batch.close()
