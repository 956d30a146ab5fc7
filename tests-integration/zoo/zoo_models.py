"""The model zoo: real architectures built from tiny configs of their own libraries (no weights are downloaded).

Each entry of :data:`ARCHITECTURES` names a builder of the plain ``nn.Module`` and the synthetic batch it trains on
(fixed seed). :class:`ZooModule` wraps one in a LightningModule: ``training_step`` returns the library's own loss,
``validation_step`` / ``test_step`` log it, ``predict_step`` returns the argmax of the logits. With ``shard_blocks``,
``configure_model`` shards the architecture's blocks (its ``_no_split_modules`` classes, or litgpt's ``Block``) and
then ``self.net`` with the trainer's plugin (the user's own ``ModelParallelStrategy`` path). ``self.net``, not the
LightningModule: the steps call ``self.net(...)``, so the LightningModule's own forward (where a root unit would
gather its parameters) never runs.

The CNN is transformers' ``ResNetForImageClassification`` (BatchNorm in every stage) and not torchvision's: the
torchvision wheel cannot be imported next to the torch build this repository's environment uses (torch 2.13+cpu), and
a CNN with BatchNorm is what the zoo needs, from whichever library.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

VOCAB = 96
SEQ = 16
IMAGE = 16
CLASSES = 10
SAMPLES = 16  # 2 ranks x 2 batches of 4 per epoch
BATCH = 4


def _llama() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=SEQ * 2, tie_word_embeddings=False,
        )
    )  # fmt: skip


def _mixtral() -> nn.Module:
    from transformers import MixtralConfig, MixtralForCausalLM

    return MixtralForCausalLM(
        MixtralConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=SEQ * 2,
            router_aux_loss_coef=0.01, output_router_logits=True,
        )
    )  # fmt: skip


def _bert() -> nn.Module:
    from transformers import BertConfig, BertForMaskedLM

    return BertForMaskedLM(
        BertConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=SEQ * 2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        )
    )  # fmt: skip


def _t5() -> nn.Module:
    from transformers import T5Config, T5ForConditionalGeneration

    return T5ForConditionalGeneration(
        T5Config(
            vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
            dropout_rate=0.0, tie_word_embeddings=True, decoder_start_token_id=0, pad_token_id=0,
        )
    )  # fmt: skip


def _resnet() -> nn.Module:
    from transformers import ResNetConfig, ResNetForImageClassification

    return ResNetForImageClassification(
        ResNetConfig(
            num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic",
            num_labels=CLASSES,
        )
    )  # fmt: skip


def _vit() -> nn.Module:
    from transformers import ViTConfig, ViTForImageClassification

    return ViTForImageClassification(
        ViTConfig(
            image_size=IMAGE, patch_size=4, num_channels=3, hidden_size=32, intermediate_size=64,
            num_hidden_layers=2, num_attention_heads=4, num_labels=CLASSES, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
    )  # fmt: skip


def _litgpt() -> nn.Module:
    from litgpt import GPT, Config

    # pythia-14m's architecture (GPT-NeoX: parallel residual, rotary, LayerNorm), shrunk: 2 layers, width 32
    config = Config.from_name("pythia-14m", n_layer=2, n_embd=32, n_head=4, vocab_size=VOCAB, padded_vocab_size=VOCAB,
                              block_size=SEQ)  # fmt: skip
    return GPT(config)


ARCHITECTURES: dict[str, tuple[Callable[[], nn.Module], str, str]] = {
    "llama": (_llama, "tokens", "transformers LlamaForCausalLM (decoder-only, dense)"),
    "mixtral": (_mixtral, "tokens", "transformers MixtralForCausalLM (mixture of experts, 4 experts, top-2)"),
    "bert": (_bert, "masked", "transformers BertForMaskedLM (encoder-only)"),
    "t5": (_t5, "seq2seq", "transformers T5ForConditionalGeneration (encoder-decoder, tied embeddings)"),
    "resnet": (_resnet, "images", "transformers ResNetForImageClassification (CNN with BatchNorm)"),
    "vit": (_vit, "images", "transformers ViTForImageClassification (vision transformer)"),
    "litgpt": (_litgpt, "tokens", "litgpt GPT from Config.from_name('pythia-14m'), 2 layers, width 32"),
}
"""name -> (builder of the plain model, kind of data, description)."""


def build(arch: str, seed: int = 0) -> nn.Module:
    """The plain float32 model ``arch`` with weights from ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ARCHITECTURES[arch][0]()


def block_classes(arch: str, model: nn.Module) -> tuple[type[nn.Module], ...]:
    """The classes of the blocks a user shards one by one: the model's ``_no_split_modules``, or litgpt's Block."""
    if arch == "litgpt":
        from litgpt.model import Block

        return (Block,)
    names = set(getattr(model, "_no_split_modules", None) or [])
    if arch == "bert":
        names = {"BertLayer"}  # BertForMaskedLM declares none
    return tuple({type(m) for m in model.modules() if type(m).__name__ in names})


class ZooData(Dataset[dict[str, torch.Tensor]]):
    """``SAMPLES`` fixed synthetic examples of one kind (seed 0): learnable patterns, the same on every rank."""

    def __init__(self, kind: str) -> None:
        gen = torch.Generator().manual_seed(0)
        self.kind = kind
        if kind in ("tokens", "masked", "seq2seq"):
            start = torch.randint(0, VOCAB, (SAMPLES, 1), generator=gen)
            step = torch.randint(1, 4, (SAMPLES, 1), generator=gen)
            ids = (start + step * torch.arange(SEQ)) % VOCAB  # arithmetic sequences: a pattern to learn
            self.items = [self._tokens(row, gen) for row in ids]
        else:
            labels = torch.randint(0, CLASSES, (SAMPLES,), generator=gen)
            protos = torch.randn(CLASSES, 3, IMAGE, IMAGE, generator=gen)
            noise = 0.1 * torch.randn(SAMPLES, 3, IMAGE, IMAGE, generator=gen)
            self.items = [{"pixel_values": protos[y] + n, "labels": y} for y, n in zip(labels, noise, strict=True)]

    def _tokens(self, row: torch.Tensor, gen: torch.Generator) -> dict[str, torch.Tensor]:
        if self.kind == "tokens":
            return {"input_ids": row, "labels": row}
        if self.kind == "masked":
            masked = torch.rand(SEQ, generator=gen) < 0.25
            masked[0] = True
            inputs = torch.where(masked, torch.full_like(row, VOCAB - 1), row)
            return {"input_ids": inputs, "labels": torch.where(masked, row, torch.full_like(row, -100))}
        return {"input_ids": row, "labels": torch.flip(row, [0])}  # seq2seq: reverse the sequence

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.items[index]


class ZooModule(pl.LightningModule):
    """One zoo architecture as a LightningModule on :class:`ZooData` (AdamW, no shuffling).

    Args:
        arch: a key of :data:`ARCHITECTURES`.
        lr: AdamW's learning rate.
        shard_blocks: ``configure_model`` shards each block, then ``net``, with the plugin's ``fully_shard`` on
            the ``"data_parallel"`` mesh (for the user's own ``ModelParallelStrategy``).

    Attributes:
        losses: the float32 training loss of every step, as Python floats.
    """

    def __init__(self, arch: str, lr: float = 3e-3, shard_blocks: bool = False) -> None:
        super().__init__()
        self.arch, self.lr, self.shard_blocks = arch, lr, shard_blocks
        self.kind = ARCHITECTURES[arch][1]
        self.net = build(arch)
        self.losses: list[float] = []
        self.predict_dtypes: list[str] = []

    def configure_model(self) -> None:
        if not self.shard_blocks:
            return
        plugin: Any = self.trainer.precision_plugin
        mesh = self.device_mesh["data_parallel"]  # type: ignore[index]
        blocks = block_classes(self.arch, self.net)
        for module in reversed(list(self.net.modules())):  # inner blocks before outer ones
            if isinstance(module, blocks):
                plugin.fully_shard(module, mesh=mesh)
        plugin.fully_shard(self.net, mesh=mesh)  # the module whose forward runs (training_step calls self.net)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.arch == "litgpt":
            logits = self.net(batch["input_ids"])
            return nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, logits.size(-1)).float(), batch["labels"][:, 1:].reshape(-1)
            )
        out = self.net(**batch)
        return out.loss.float()  # type: ignore[no-any-return]

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.arch == "litgpt":
            return self.net(batch["input_ids"])  # type: ignore[no-any-return]
        return self.net(**batch).logits  # type: ignore[no-any-return]

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.losses.append(float(loss.detach()))
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", self.loss(batch), sync_dist=True, batch_size=BATCH)

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("test_loss", self.loss(batch), sync_dist=True, batch_size=BATCH)

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self.logits(batch)
        self.predict_dtypes.append(str(logits.dtype).removeprefix("torch."))
        return logits.argmax(-1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # float16 parameters (16-true): AdamW's default eps=1e-8 is below float16's smallest subnormal (6e-8) and
        # rounds to 0, so a zero second moment divides by zero (seen: mixtral fsdp:16-true, loss NaN from step 2)
        half = any(p.dtype == torch.float16 for p in self.parameters())
        return torch.optim.AdamW(self.parameters(), lr=self.lr, eps=1e-4 if half else 1e-8)

    def _loader(self) -> DataLoader[dict[str, torch.Tensor]]:
        return DataLoader(ZooData(self.kind), batch_size=BATCH, shuffle=False)

    def train_dataloader(self) -> DataLoader[dict[str, torch.Tensor]]:
        return self._loader()

    def val_dataloader(self) -> DataLoader[dict[str, torch.Tensor]]:
        return self._loader()

    def test_dataloader(self) -> DataLoader[dict[str, torch.Tensor]]:
        return self._loader()

    def predict_dataloader(self) -> DataLoader[dict[str, torch.Tensor]]:
        return self._loader()
