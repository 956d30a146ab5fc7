"""Numerics: one fixed task trained for a fixed number of steps per backend and precision, 2 processes on CPU.

Every run starts from the same weights and sees the same batches. Reported per run:

* ``final_train_loss``: mean training loss of the last 10 steps (rank 0's batches);
* ``eval_loss``: loss on 1024 held-out samples, computed in fp32 from the run's final full-precision weights
  (FSDP2: the gathered parameters; DeepSpeed: the fp32 master copy), so evaluation adds no rounding of its own;
* distances from the ``32-true`` run of the same backend: ``|eval_loss - eval_loss(32-true)|`` and the relative L2
  distance between the final weights.

For ``*-mixed`` the gradient reduction dtype is varied: FSDP2 with our default fp32 reduction vs
``reduce_dtype`` = the compute dtype; DeepSpeed with its default (the compute dtype) vs
``communication_data_type: fp32``. Lightning's built-in FSDPPrecision is included for the mixed precisions: on
CPU it does no autocast (it hard-codes ``torch.autocast("cuda")``), so its "mixed" run computes every op,
normalisation and softmax included, in bf16/fp16, and reduces in bf16/fp16.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from bench.launch import launch
from bench.report import envelope, md_table, pyplot, write_json, write_markdown

RUNS: list[dict[str, Any]] = [
    {"backend": "fsdp", "variant": "ours", "precision": "32-true"},
    {"backend": "fsdp", "variant": "ours", "precision": "bf16-true"},
    {"backend": "fsdp", "variant": "ours", "precision": "16-true"},
    {"backend": "fsdp", "variant": "ours", "precision": "bf16-mixed", "reduce": "fp32"},
    {"backend": "fsdp", "variant": "ours", "precision": "bf16-mixed", "reduce": "bf16"},
    {"backend": "fsdp", "variant": "ours", "precision": "16-mixed", "reduce": "fp32"},
    {"backend": "fsdp", "variant": "ours", "precision": "16-mixed", "reduce": "fp16"},
    {"backend": "fsdp", "variant": "builtin", "precision": "bf16-mixed"},
    {"backend": "fsdp", "variant": "builtin", "precision": "16-mixed"},
    {"backend": "deepspeed", "variant": "ours", "precision": "32-true"},
    {"backend": "deepspeed", "variant": "ours", "precision": "bf16-true"},
    {"backend": "deepspeed", "variant": "ours", "precision": "bf16-mixed"},
    {"backend": "deepspeed", "variant": "ours", "precision": "bf16-mixed", "reduce": "fp32"},
    {"backend": "deepspeed", "variant": "ours", "precision": "bf16-mixed", "options": {"torch_autocast": True}},
]

QUICK_RUNS = [0, 3, 9, 11]


def settings(quick: bool) -> dict[str, Any]:
    task = {"width": 128, "depth": 2, "batch": 32, "lr": 3e-3}
    return {"task": task, "steps": 20 if quick else 80, "eval_samples": 256 if quick else 1024}


def run_name(run: dict[str, Any]) -> str:
    name = f"{run['backend']}:{run['precision']}"
    if run["variant"] == "builtin":
        name += " (Lightning built-in)"
    if run.get("reduce"):
        name += f", reduce {run['reduce']}"
    if run.get("options", {}).get("torch_autocast"):
        name += ", torch_autocast"
    return name


# ---- inside the ranks ------------------------------------------------------------------------------------------
def _full_weights_fsdp(module: Any) -> dict[str, Any]:
    from torch.distributed.tensor import DTensor

    return {
        name.removeprefix("net."): (p.full_tensor() if isinstance(p, DTensor) else p).detach().float().clone()
        for name, p in module.named_parameters()
    }


def _full_weights_deepspeed(engine: Any) -> dict[str, Any]:
    from deepspeed.utils import safe_get_full_fp32_param

    out = {}
    for name, p in engine.module.named_parameters():
        full = safe_get_full_fp32_param(p)
        out[name.removeprefix("net.")] = full.detach().float().clone()
    return out


def worker(args: dict[str, Any]) -> dict[str, Any]:
    import torch

    from bench import deepspeed_runs, fsdp_runs
    from bench.task import TaskConfig, build_net, dataset, loss_fn

    torch.set_num_threads(1)
    cfg = TaskConfig(**args["task"])
    steps = int(args["steps"])
    held_out = dataset(cfg, int(args["eval_samples"]), split=1)
    results = []
    for run in args["runs"]:
        weights: dict[str, Any] = {}
        if run["backend"] == "fsdp":
            res = fsdp_runs.run(
                run["variant"] if not (run["variant"] == "ours" and run.get("reduce")) else "ours",
                run["precision"],
                cfg,
                steps,
                0,
                **({"reduce": run["reduce"]} if run.get("reduce") and run["variant"] == "ours" else {}),
            )
            weights = _full_weights_fsdp(res["module"])
        else:
            extra = {"communication_data_type": run["reduce"]} if run.get("reduce") else None
            res = deepspeed_runs.run_lightning(
                run["variant"], run["precision"], cfg, steps, 0, options=run.get("options"), extra_config=extra
            )
            weights = _full_weights_deepspeed(res["engine"])
            run = {**run, "communication_data_type": str(res["engine"].communication_data_type)}
        net = build_net(cfg)
        net.load_state_dict(weights)
        with torch.no_grad():
            x, y = held_out.tensors
            eval_loss = float(loss_fn(net(x), y))
        flat = torch.cat([w.flatten() for w in weights.values()])
        results.append({**run, "losses": res["losses"], "eval_loss": eval_loss, "weights": flat.tolist()})
        del res
    return {"runs": results}


# ---- in the driver -------------------------------------------------------------------------------------------
def analyse(raw: dict[str, Any]) -> list[dict[str, Any]]:
    runs = raw["runs"]
    ref = {r["backend"]: r for r in runs if r["precision"] == "32-true" and r["variant"] == "ours"}
    out = []
    for r in runs:
        base = ref.get(r["backend"])
        losses = r["losses"]
        tail = losses[-10:]
        entry: dict[str, Any] = {
            "name": run_name(r),
            **{
                k: r.get(k) for k in ("backend", "variant", "precision", "reduce", "options", "communication_data_type")
            },
            "final_train_loss": sum(tail) / len(tail),
            "eval_loss": r["eval_loss"],
            "losses": losses,
            "nonfinite_losses": sum(1 for v in losses if not math.isfinite(v)),
        }
        if base is not None:
            entry["eval_loss_diff_vs_32"] = r["eval_loss"] - base["eval_loss"]
            num = sum((a - b) ** 2 for a, b in zip(r["weights"], base["weights"], strict=True))
            den = sum(b * b for b in base["weights"])
            entry["weight_rel_l2_vs_32"] = math.sqrt(num / den) if den else None
            entry["loss_curve_mean_abs_diff_vs_32"] = sum(
                abs(a - b) for a, b in zip(losses, base["losses"], strict=True)
            ) / len(losses)
        out.append(entry)
    return out


def findings(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    by = {r["name"]: r for r in rows}
    for low in ("bf16", "16"):
        for backend in ("fsdp",):
            a = by.get(f"{backend}:{low}-mixed, reduce fp32")
            b = by.get(f"{backend}:{low}-mixed, reduce {'bf16' if low == 'bf16' else 'fp16'}")
            if a and b and "eval_loss_diff_vs_32" in a:
                out.append(
                    f"{backend}:{low}-mixed: |eval loss - 32-true| = {abs(a['eval_loss_diff_vs_32']):.4f} with fp32 "
                    f"reduction, {abs(b['eval_loss_diff_vs_32']):.4f} with {low} reduction"
                )
            c = by.get(f"{backend}:{low}-mixed (Lightning built-in)")
            if a and c and "eval_loss_diff_vs_32" in c:
                out.append(
                    f"{backend}:{low}-mixed, Lightning built-in on CPU (no autocast, {low} reduction): "
                    f"|eval loss - 32-true| = {abs(c['eval_loss_diff_vs_32']):.4f} vs ours "
                    f"{abs(a['eval_loss_diff_vs_32']):.4f}"
                )
    a = by.get("deepspeed:bf16-mixed")
    b = by.get("deepspeed:bf16-mixed, reduce fp32")
    if a and b and "eval_loss_diff_vs_32" in a:
        out.append(
            f"deepspeed:bf16-mixed: |eval loss - 32-true| = {abs(a['eval_loss_diff_vs_32']):.4f} with DeepSpeed's "
            f"default bf16 communication, {abs(b['eval_loss_diff_vs_32']):.4f} with communication_data_type fp32"
        )
    return out


def table(data: dict[str, Any]) -> str:
    rows = data["results"]
    cfg = data["config"]
    lines = [
        [
            r["name"],
            f"{r['final_train_loss']:.4f}",
            f"{r['eval_loss']:.4f}",
            "-" if r.get("eval_loss_diff_vs_32") is None else f"{r['eval_loss_diff_vs_32']:+.4f}",
            "-" if r.get("weight_rel_l2_vs_32") is None else f"{r['weight_rel_l2_vs_32']:.4f}",
            "-" if r.get("loss_curve_mean_abs_diff_vs_32") is None else f"{r['loss_curve_mean_abs_diff_vs_32']:.4f}",
            r["nonfinite_losses"],
        ]
        for r in rows
    ]
    task = cfg["task"]
    body = (
        f"A fixed teacher classification task ({task['depth']} residual MLP blocks of width {task['width']}, 16 "
        f"classes, batch {task['batch']} per rank, AdamW lr {task['lr']}), {cfg['steps']} steps in 2 processes on "
        "CPU, the same initial weights and batches in every run. FSDP runs use FSDP2 (`fully_shard`); DeepSpeed runs "
        "use ZeRO-2. Eval loss: fp32 evaluation of the final full-precision weights on "
        f"{cfg['eval_samples']} held-out samples. Differences are against the `32-true` run of the same backend.\n\n"
        + md_table(
            [
                "run",
                "final train loss (last 10)",
                "eval loss",
                "eval loss - 32-true",
                "weights: rel. L2 from 32-true",
                "loss curve: mean |diff| from 32-true",
                "non-finite losses",
            ],
            lines,
        )
    )
    if data["findings"]:
        body += "\n\n" + "\n".join(f"- {f}" for f in data["findings"])
    body += "\n\n![loss curves](numerics.png)\n"
    return body


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, backend in zip(axes, ("fsdp", "deepspeed"), strict=True):
        ref = next((r for r in rows if r["backend"] == backend and r["name"] == f"{backend}:32-true"), None)
        for r in rows:
            if r["backend"] != backend or ref is None:
                continue
            diff = [a - b for a, b in zip(r["losses"], ref["losses"], strict=True)]
            style = "--" if r["variant"] == "builtin" else "-"
            ax.plot(diff, style, linewidth=1, label=r["name"].removeprefix(f"{backend}:"))
        ax.axhline(0, color="k", linewidth=0.5)
        ax.set_title(f"{backend}: training loss minus the 32-true run's", fontsize=9)
        ax.set_xlabel("step")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run(quick: bool, machine: dict[str, Any], out: Path, log_dir: Path | None = None) -> list[Path]:
    cfg = settings(quick)
    runs = [RUNS[i] for i in QUICK_RUNS] if quick else RUNS
    start = time.perf_counter()
    raw = launch("bench.numerics:worker", {**cfg, "runs": runs}, world=2, threads=1, timeout=900, log_dir=log_dir)
    rows = analyse(raw)
    data = envelope(
        "numerics",
        machine=machine,
        config={**cfg, "runs": runs},
        results=rows,
        duration_s=time.perf_counter() - start,
        quick=quick,
        findings=findings(rows),
    )
    base = out / "numerics"
    return [
        write_json(base.with_suffix(".json"), data),
        plot(rows, base.with_suffix(".png")),
        write_markdown(base.with_suffix(".md"), "Numerics", table(data), data),
    ]
