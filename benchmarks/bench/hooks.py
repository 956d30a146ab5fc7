"""The plugin's own per-step Python cost, without training around it: a diagnostic for the step-time ratios.

For each precision, ours and Lightning's built-in plugin are timed on the hooks Lightning calls every step that do
not need a running Trainer: ``convert_input(batch)``, entering and leaving ``forward_context()`` (the
``train_step_context``), and ``convert_output(loss)``. Interleaved blocks of ``iterations`` calls; the result is
microseconds per step. A difference here is plugin overhead; a step-time difference much larger than it comes from
what the plugin makes torch do (autocast, reduction dtype), not from the plugin's Python.
"""

from __future__ import annotations

import time
from typing import Any

from bench import stats


def _plugins(backend: str, precision: str) -> dict[str, Any]:
    if backend == "fsdp":
        from lightning.pytorch.plugins.precision import FSDPPrecision as Builtin

        from precision_base import resolve

        return {"ours": resolve(f"fsdp:{precision}"), "builtin": Builtin(precision)}  # type: ignore[arg-type]
    from lightning.pytorch.plugins.precision import DeepSpeedPrecision as Builtin

    from precision_deepspeed import DeepSpeedPrecision

    return {"ours": DeepSpeedPrecision(precision), "builtin": Builtin(precision)}  # type: ignore[arg-type]


def _one_block(plugin: Any, batch: Any, loss: Any, iterations: int) -> float:
    start = time.perf_counter()
    for _ in range(iterations):
        b = plugin.convert_input(batch)
        with plugin.forward_context():
            pass
        plugin.convert_output(loss)
    del b
    return (time.perf_counter() - start) / iterations


def measure(backend: str, precisions: list[str], iterations: int = 2000, blocks: int = 15) -> dict[str, Any]:
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    batch = (torch.randn(32, 256), torch.randint(0, 16, (32,)))
    loss = torch.tensor(1.0)
    out: dict[str, Any] = {}
    for precision in precisions:
        plugins = _plugins(backend, precision)
        times: dict[str, list[float]] = {k: [] for k in plugins}
        for plugin in plugins.values():  # warm-up
            _one_block(plugin, batch, loss, iterations // 10)
        for _ in range(blocks):
            for name, plugin in plugins.items():
                times[name].append(_one_block(plugin, batch, loss, iterations))
        out[precision] = {
            "us_per_step": {k: stats.summarize([t * 1e6 for t in v]) for k, v in times.items()},
            "ours/builtin": stats.ratio(times["ours"], times["builtin"], resamples=500),
        }
    return out
