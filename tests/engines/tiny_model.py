"""Write a tiny random-weight Llama with its tokenizer into a directory, offline (run by the engine's Python).

``python tiny_model.py DIR [--config-only]``: the venv's own ``transformers`` writes the model
(``LlamaConfig`` → ``LlamaForCausalLM(config).save_pretrained``: 2 layers, hidden 256, head_dim 64 —
vLLM's CPU attention kernels refuse head_dim 16 — a few MB of bfloat16 safetensors) and the venv's own
``tokenizers`` trains a byte-level BPE on a few lines of text (no hub download: the 256 byte symbols
plus merges, so every input encodes and every id decodes), saved as a ``PreTrainedTokenizerFast``.
The model's vocabulary is exactly the tokenizer's, so any id the random weights pick decodes.
Prints one JSON line: the files written and the vocabulary size.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict

#: a 2-layer Llama small enough for the CPU backend (its attention kernels refuse head_dim 16)
TINY_LLAMA: Dict[str, Any] = dict(
    hidden_size=256,
    intermediate_size=512,
    num_attention_heads=4,
    num_key_value_heads=4,
    head_dim=64,
    num_hidden_layers=2,
    max_position_embeddings=512,
    torch_dtype="bfloat16",
    architectures=["LlamaForCausalLM"],
)
#: the text the BPE merges are learned from: any text works, the byte alphabet covers the rest
CORPUS = [
    "CXL memory expanders show up as CPU-less NUMA nodes in a lower memory tier.",
    "The KV cache of an inference engine can live in host memory on DRAM and CXL.",
    "cxlctl launches vLLM with a memory policy and reports where its pages landed.",
    "Hello, my name is a tiny random model and I answer with random tokens.",
]
VOCAB = 384
SPECIAL = ["<s>", "</s>", "<unk>"]


def tokenizer(path: str) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(path)
    return len(fast)


def main() -> int:
    path = sys.argv[1]
    config_only = "--config-only" in sys.argv[2:]
    os.makedirs(path, exist_ok=True)
    from transformers import LlamaConfig

    vocab = tokenizer(path) if not config_only else 1024
    cfg = LlamaConfig(**TINY_LLAMA, vocab_size=vocab, bos_token_id=0, eos_token_id=1)
    if config_only:  # what a parser needs: no weights
        cfg.save_pretrained(path)
    else:
        import torch
        from transformers import LlamaForCausalLM

        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
        model.save_pretrained(path)
    print(json.dumps({"files": sorted(os.listdir(path)), "vocab_size": vocab}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
