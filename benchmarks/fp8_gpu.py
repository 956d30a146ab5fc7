"""GPU benchmark: FP8 (``fsdp:fp8-tensorwise``, ``fsdp:fp8-rowwise``) against ``fsdp:bf16-mixed`` on a ~1B-parameter
GPT (``precision_base.testing.models.TinyGPT``), FSDP2 through ``precision_base.Trainer``, synthetic tokens.

    python benchmarks/fp8_gpu.py                         # one GPU with FP8, a few minutes; JSON to build/benchmarks
    python benchmarks/fp8_gpu.py --steps 30 --layers 18 --out build/benchmarks

Reports per precision: tokens/s (median over the timed steps, after warm-up) and peak CUDA memory allocated, and the
fp8/bf16-mixed ratios. Without a GPU with FP8 (CUDA compute capability 8.9 or newer, the check torchao uses) or
without torchao it prints why and exits 0 without measuring: emulation on other hardware says nothing about speed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

SPECS = ("fsdp:bf16-mixed", "fsdp:fp8-tensorwise", "fsdp:fp8-rowwise")


def skip_reason() -> str | None:
    """Why this machine cannot run the benchmark, or ``None``."""
    try:
        import torchao.float8  # noqa: F401
    except ImportError:
        return 'torchao is not installed: pip install "precision-fsdp[fp8]"'
    from precision_fsdp.float8 import hardware_problem

    return hardware_problem()


def measure(spec: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from lightning.pytorch import Callback, LightningModule
    from torch.utils.data import DataLoader, TensorDataset

    import precision_base
    from precision_base.testing.models import TinyGPT

    class GPT(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = TinyGPT(vocab=args.vocab, d_model=args.d_model, layers=args.layers, heads=16, seq=args.seq)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            (tokens,) = batch
            logits = self.model(tokens[:, :-1])
            return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-4, fused=True)

        def train_dataloader(self) -> DataLoader[Any]:
            tokens = torch.randint(0, args.vocab, (args.batch * args.steps, args.seq + 1))
            return DataLoader(TensorDataset(tokens), batch_size=args.batch)

    class Clock(Callback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._start = 0.0

        def on_train_batch_start(self, *a: Any) -> None:
            torch.cuda.synchronize()
            self._start = time.perf_counter()

        def on_train_batch_end(self, *a: Any) -> None:
            torch.cuda.synchronize()
            self.times.append(time.perf_counter() - self._start)

    torch.cuda.reset_peak_memory_stats()
    clock, model = Clock(), GPT()
    trainer = precision_base.Trainer(
        precision_plugin=spec, accelerator="cuda", devices=1, max_steps=args.steps, callbacks=[clock],
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(model)
    timed = clock.times[args.warmup :]
    params = sum(p.numel() for p in model.parameters())
    return {
        "spec": spec,
        "parameters": params,
        "tokens_per_s": args.batch * args.seq / statistics.median(timed),
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
        "converted_linears": len(getattr(trainer.precision_plugin, "fp8_converted", [])),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--d-model", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=18)
    parser.add_argument("--out", type=Path, default=Path("build/benchmarks"))
    args = parser.parse_args(argv)
    reason = skip_reason()
    if reason is not None:
        print(f"fp8 GPU benchmark skipped: {reason}")
        return 0
    results = [measure(spec, args) for spec in SPECS]
    base = results[0]
    for r in results:
        r["tokens_per_s_vs_bf16_mixed"] = r["tokens_per_s"] / base["tokens_per_s"]
        r["memory_vs_bf16_mixed"] = r["peak_memory_gib"] / base["peak_memory_gib"]
        print(json.dumps(r))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fp8_gpu.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
