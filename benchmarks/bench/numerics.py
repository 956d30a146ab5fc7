"""Numerics: one fixed task (the same weights and batches) trained per backend and precision, 2 processes on CPU:
the last 10 steps' mean loss, the fp32 loss on held-out samples from the final full-precision weights, and the
distances from the same backend's ``32-true`` run."""

from __future__ import annotations

import math
from typing import Any

import torch

from bench import runs
from precision_testsupport.models import teacher_data

RUNS: list[dict[str, Any]] = [
    *({"backend": "fsdp", "variant": "ours", "precision": p} for p in ("32-true", "bf16-true", "16-true")),
    *(
        {"backend": "fsdp", "variant": "ours", "precision": f"{low}-mixed", "reduce": r}
        for low, half in (("bf16", "bf16"), ("16", "fp16"))
        for r in ("fp32", half)
    ),
    *({"backend": "fsdp", "variant": "builtin", "precision": p} for p in ("bf16-mixed", "16-mixed")),
    *({"backend": "deepspeed", "variant": "ours", "precision": p} for p in ("32-true", "bf16-true", "bf16-mixed")),
    {"backend": "deepspeed", "variant": "ours", "precision": "bf16-mixed", "reduce": "fp32"},
    {"backend": "deepspeed", "variant": "ours", "precision": "bf16-mixed", "options": {"torch_autocast": True}},
]
QUICK_RUNS = [0, 3, 9, 11]


def name(run: dict[str, Any]) -> str:
    text = f"{run['backend']}:{run['precision']}" + (" (Lightning built-in)" if run["variant"] == "builtin" else "")
    text += f", reduce {run['reduce']}" if run.get("reduce") else ""
    return text + (", torch_autocast" if run.get("options") else "")


def _full_weights(run: dict[str, Any], res: dict[str, Any]) -> dict[str, Any]:
    if run["backend"] == "fsdp":
        params = res["module"].net.named_parameters()
        return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().float() for n, p in params}
    from deepspeed.utils import safe_get_full_fp32_param

    engine = res["engine"]
    return {n.removeprefix("net."): safe_get_full_fp32_param(p).float() for n, p in engine.module.named_parameters()}


def worker(args: dict[str, Any]) -> list[dict[str, Any]]:
    """Inside each rank: every run, then an fp32 evaluation of its final weights on held-out data."""
    task, out = runs.Task(**args["task"]), []
    held_out = teacher_data(args["eval_samples"], task.width, task.classes, task.seed, split=1)
    for run in args["runs"]:
        kw: dict[str, Any] = {}
        if run["backend"] == "fsdp" and run.get("reduce") and run["variant"] == "ours":
            kw["reduce"] = run["reduce"]
        elif run["backend"] == "deepspeed":
            extra = {"communication_data_type": run["reduce"]} if run.get("reduce") else None
            kw = {"options": run.get("options"), "extra_config": extra}
        res = runs.run(run["backend"], run["variant"], run["precision"], task, args["steps"], 0, **kw)
        weights = _full_weights(run, res)
        net = task.net()
        net.load_state_dict(weights)
        with torch.no_grad():
            eval_loss = float(runs.loss_fn(net(held_out.tensors[0]), held_out.tensors[1]))
        flat = torch.cat([w.flatten() for w in weights.values()]).tolist()
        out.append({**run, "losses": res["losses"], "eval_loss": eval_loss, "weights": flat})
    return out


def analyse(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ref = {r["backend"]: r for r in raw if r["precision"] == "32-true"}
    rows = []
    for r in raw:
        base, losses = ref[r["backend"]], r["losses"]
        num = sum((a - b) ** 2 for a, b in zip(r["weights"], base["weights"], strict=True))
        rows.append({"name": name(r), **{k: r.get(k) for k in ("backend", "variant", "precision", "reduce", "options")},
                     "final_train_loss": sum(losses[-10:]) / len(losses[-10:]), "eval_loss": r["eval_loss"],
                     "losses": losses, "nonfinite_losses": sum(not math.isfinite(v) for v in losses),
                     "eval_loss_diff_vs_32": r["eval_loss"] - base["eval_loss"],
                     "weight_rel_l2_vs_32": math.sqrt(num / sum(b * b for b in base["weights"]))})  # fmt: skip
    return rows


def run(quick: bool) -> dict[str, Any]:
    selected = [RUNS[i] for i in QUICK_RUNS] if quick else RUNS
    config: dict[str, Any] = {"task": {"width": 128, "depth": 2, "batch": 32, "lr": 3e-3}, "steps": 20 if quick else 80,
              "eval_samples": 256 if quick else 1024, "runs": selected}  # fmt: skip
    return {"config": config, "results": analyse(runs.in_ranks("bench.numerics:worker", config))}
