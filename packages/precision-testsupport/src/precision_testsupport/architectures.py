"""Real architectures built from their libraries' configs, for the benchmarks (``benchmarks/bench``): each model
with its data and the blocks FSDP2 shards one by one.

* ``mlp``: ``precision_testsupport.models.ResidualMLP`` on its teacher task (classes from ``teacher_data``).
* ``llama``: transformers' ``LlamaForCausalLM`` from a tiny ``LlamaConfig`` (RMSNorm, rotary attention through
  SDPA, SwiGLU), random weights, next-token loss on random token sequences; blocks: its decoder layers. Its
  embedding and lm_head are 29% of its parameters (a real decoder's are a few per cent to ~20%).
* ``llama-prop``: the same architecture with TinyLlama-1.1B's proportions at 1/8 of its width (hidden 256,
  intermediate 2.75x, 8 query heads to 1 key/value head) and half its depth and vocabulary (11 layers, vocab 2000),
  so that embedding and lm_head are 11.9% of the parameters, as in TinyLlama-1.1B; used by the memory page's
  float8 all-gather rows, beside ``llama``.
* ``resnet``: transformers' ``ResNetForImageClassification`` from a small ``ResNetConfig`` (convolutions and
  BatchNorm), random weights, random 32x32 images and labels; blocks: its stages.

No weights are downloaded: every model is built from a config with a fixed seed. transformers is imported only when
a transformers model is built (it is not a dependency of this package).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from precision_testsupport.models import ResidualMLP, teacher_data

MODELS = ("mlp", "llama", "llama-prop", "resnet")
LLAMA = {"vocab_size": 512, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 128}  # fmt: skip
# TinyLlama-1.1B: hidden 2048, intermediate 5632, 22 layers, 32 heads / 4 key-value heads, vocab 32000, untied
LLAMA_PROP = {"vocab_size": 2000, "hidden_size": 256, "intermediate_size": 704, "num_hidden_layers": 11,
              "num_attention_heads": 8, "num_key_value_heads": 1, "max_position_embeddings": 128}  # fmt: skip
DECODERS = {"llama": LLAMA, "llama-prop": LLAMA_PROP}
LLAMA_SEQ = 64
RESNET: dict[str, Any] = {"num_channels": 3, "embedding_size": 16, "hidden_sizes": [32, 64], "depths": [2, 2],
                          "layer_type": "basic", "num_labels": 10}  # fmt: skip
RESNET_IMAGE = 32


class CausalLM(nn.Module):
    """``LlamaForCausalLM`` returning its logits (float, ``(batch, seq, vocab)``) for token ids (int64)."""

    def __init__(self, seed: int, config: dict[str, Any] | None = None) -> None:
        from transformers import LlamaConfig, LlamaForCausalLM

        super().__init__()
        torch.manual_seed(seed)
        self.lm = LlamaForCausalLM(LlamaConfig(**(config or LLAMA)))

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.lm.model.layers)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.lm(input_ids=ids, use_cache=False).logits
        return logits


class ImageClassifier(nn.Module):
    """``ResNetForImageClassification`` returning its logits for images (floating, ``(batch, 3, H, W)``)."""

    def __init__(self, seed: int) -> None:
        from transformers import ResNetConfig, ResNetForImageClassification

        super().__init__()
        torch.manual_seed(seed)
        self.cnn = ResNetForImageClassification(ResNetConfig(**RESNET))

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.cnn.resnet.encoder.stages)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.cnn(pixel_values=images).logits
        return logits


def build(model: str, width: int, depth: int, classes: int, seed: int) -> Any:
    """A fresh model, the same weights for the same ``seed``; ``width``/``depth``/``classes`` shape the MLP only."""
    if model == "mlp":
        return ResidualMLP(width, depth, classes, seed)
    if model in DECODERS:
        return CausalLM(seed, DECODERS[model])
    if model == "resnet":
        return ImageClassifier(seed)
    raise ValueError(f"unknown benchmark model {model!r}; choose from {', '.join(MODELS)}")


def data(model: str, samples: int, width: int, classes: int, seed: int, split: int = 0) -> TensorDataset:
    """``samples`` (input, target) pairs: the teacher task, token sequences (target = the next tokens), images."""
    if model == "mlp":
        return teacher_data(samples, width, classes, seed, split)
    gen = torch.Generator().manual_seed(seed + 7919 * split)
    if model in DECODERS:
        vocab = int(DECODERS[model]["vocab_size"])
        tokens = torch.randint(0, vocab, (samples, LLAMA_SEQ + 1), generator=gen)
        return TensorDataset(tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())
    images = torch.randn(samples, 3, RESNET_IMAGE, RESNET_IMAGE, generator=gen)
    return TensorDataset(images, torch.randint(0, int(RESNET["num_labels"]), (samples,), generator=gen))  # type: ignore[call-overload]


def describe(model: str, width: int, depth: int, batch: int) -> str:
    """One phrase for the pages: what was trained."""
    if model == "mlp":
        return f"{depth} residual MLP blocks of width {width}, batch {batch} per rank"
    if model in DECODERS:
        c = DECODERS[model]
        kind = "a tiny config" if model == "llama" else "TinyLlama-1.1B's proportions, scaled down"
        return (f"transformers LlamaForCausalLM from {kind} ({c['num_hidden_layers']} layers, hidden "
                f"{c['hidden_size']}, {c['num_attention_heads']} heads / {c['num_key_value_heads']} key-value "
                f"heads, vocab {c['vocab_size']}; random weights), {batch} sequences of {LLAMA_SEQ} tokens "
                "per rank")  # fmt: skip
    c = RESNET
    return (f"transformers ResNetForImageClassification from a small config (BatchNorm; stages {c['hidden_sizes']} x "
            f"depths {c['depths']}; random weights), {batch} images of {RESNET_IMAGE}x{RESNET_IMAGE} "
            "per rank")  # fmt: skip


def parameters(model: str, width: int, depth: int, classes: int) -> int:
    return sum(int(p.numel()) for p in build(model, width, depth, classes, 0).parameters())
