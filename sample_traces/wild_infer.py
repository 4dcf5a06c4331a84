"""A transformers model we did not write, for `kernelscope profile` / `kernelscope sweep` (issue 14 samples).

    python3 sample_traces/wild_infer.py [--batch 8] [--seq 128] [--iters 6] [--layers 4] [--hidden 256] [--mark] [--cpu]

A ``Qwen2ForCausalLM`` built from a config (random weights, d=--hidden, bf16 on CUDA), ``--iters`` greedy-free
forward passes over a ``--batch`` x ``--seq`` batch of token ids under ``torch.no_grad()``. The script knows
nothing of kernelscope unless ``--mark`` is given: then each forward is a ``kernelscope.range("step")`` region,
which the sweep's un-profiled pass times (CUDA events at the region's ends). ``--cpu`` runs a tiny copy on the
CPU (for tests of the script without a GPU).
"""

from __future__ import annotations

import argparse
import contextlib

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256, help="model width (heads of 64; MLP 2.75x)")
    ap.add_argument("--mark", action="store_true", help="mark each forward with kernelscope.range('step')")
    ap.add_argument("--cpu", action="store_true")
    a = ap.parse_args()
    from transformers import Qwen2Config, Qwen2ForCausalLM

    dev = "cpu" if a.cpu or not torch.cuda.is_available() else "cuda"
    heads = max(a.hidden // 64, 1)
    config = Qwen2Config(hidden_size=a.hidden, num_hidden_layers=a.layers, num_attention_heads=heads,
                         num_key_value_heads=max(heads // 2, 1), intermediate_size=a.hidden * 11 // 4, vocab_size=4096, max_position_embeddings=1024,
                         tie_word_embeddings=True, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(dev):
        model = Qwen2ForCausalLM(config).eval()
    if dev == "cuda":
        model = model.to(torch.bfloat16)
    ids = torch.randint(0, config.vocab_size, (a.batch, a.seq), device=dev)
    if a.mark:
        import kernelscope

        step = lambda: kernelscope.range("step")  # noqa: E731
    else:
        step = contextlib.nullcontext
    with torch.no_grad():
        for _ in range(a.iters):
            with step():
                logits = model(input_ids=ids).logits
    if dev == "cuda":
        torch.cuda.synchronize()
    print(f"batch {a.batch} seq {a.seq}: logits {tuple(logits.shape)} on {dev}")


if __name__ == "__main__":
    main()
