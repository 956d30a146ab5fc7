"""``precision-plugins recommend``: the plugin name to train with on this machine, and why.

[`recommend`][precision_base.recommend.recommend] is pure logic on
[`MachineFacts`][precision_base.recommend.MachineFacts] (tests inject facts);
[`read_machine`][precision_base.recommend.read_machine] gathers the
facts (imports torch; the registry reads metadata only). The rules, in order:

* **device**: a CUDA GPU when there is one, else the CPU;
* **precision**: on a GPU, ``bf16-mixed`` from compute capability 8.0 (Ampere) on, else ``16-mixed`` (a loss scaler
  keeps fp16 gradients from underflowing); on a CPU, ``bf16-mixed`` where it computes bfloat16 natively
  (AVX512-BF16 or AMX), else ``32-true`` (torch emulates bfloat16 there, slower than float32). ``*-true`` and
  ``fp8-*`` / ``mxfp8-*`` are never the suggestion: they are alternatives where they can run (``*-true`` has no
  float32 master weights; fp8 pays off only for large Linear layers, on compute capability 8.9+ with torchao; MXFP8
  needs 10.0+, Blackwell);
* **backend**: ``fsdp`` when installed (FSDP2 runs on CPU and GPU), else ``deepspeed``, else any other installed
  backend that offers the precision.

Everything that cannot run here, or runs worse than the suggestion, is listed as ruled out with the reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from precision_base.cpu_half import CPU_FP16_EMULATED
from precision_base.spec import PRECISIONS

PREFERRED_BACKENDS: tuple[str, ...] = ("fsdp", "deepspeed")
"""Backends in the order they are preferred; others follow, sorted by name."""

FP8_CAPABILITY: tuple[int, int] = (8, 9)
MXFP8_CAPABILITY: tuple[int, int] = (10, 0)
BF16_CAPABILITY: tuple[int, int] = (8, 0)


@dataclass(frozen=True)
class MachineFacts:
    """What [`recommend`][precision_base.recommend.recommend] decides on.

    Attributes:
        cpu_bf16: the CPU computes bfloat16 natively (AVX512-BF16 or AMX).
        cpu_fp16: the CPU computes float16 natively (AMX-FP16).
        cuda_capability: the first CUDA GPU's compute capability, ``None`` without one.
        gpu_name: the first CUDA GPU's name.
        gpu_count: how many CUDA GPUs torch sees.
        backends: each usable backend (status ``ok``) -> the precisions it offers here (extras included, those
            whose requirements are missing left out).
        unusable: each backend that cannot be used -> why (its status and reason), and ``"<backend>:<precision>"``
            -> why, for an offered precision that is unavailable (e.g. fp8 without torchao).
        torchao: torchao's version, ``None`` when not installed.
    """

    cpu_bf16: bool = False
    cpu_fp16: bool = False
    cuda_capability: Optional[tuple[int, int]] = None
    gpu_name: Optional[str] = None
    gpu_count: int = 0
    backends: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    unusable: Mapping[str, str] = field(default_factory=dict)
    torchao: Optional[str] = None

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["cuda_capability"] = list(self.cuda_capability) if self.cuda_capability else None
        data["backends"] = {k: list(v) for k, v in self.backends.items()}
        data["unusable"] = dict(self.unusable)
        return data


@dataclass(frozen=True)
class Choice:
    """A plugin name with one line of reason."""

    spec: str
    reason: str


@dataclass(frozen=True)
class Recommendation:
    """What [`recommend`][precision_base.recommend.recommend] returns.

    Attributes:
        spec: the suggested plugin name, ``None`` when no backend can train here.
        reasons: one line per choice made (device, precision, backend).
        alternatives: names that also run here, each with its trade-off.
        ruled_out: names that cannot run here or run worse than ``spec``, each with why.
        facts: what it was decided on.
    """

    spec: Optional[str]
    reasons: tuple[str, ...]
    alternatives: tuple[Choice, ...]
    ruled_out: tuple[Choice, ...]
    facts: MachineFacts

    def as_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "reasons": list(self.reasons),
            "alternatives": [dataclasses.asdict(c) for c in self.alternatives],
            "ruled_out": [dataclasses.asdict(c) for c in self.ruled_out],
            "facts": self.facts.as_dict(),
        }

    def render(self) -> str:
        """The text ``precision-plugins recommend`` prints."""
        lines = [f"suggested: {self.spec}" if self.spec else "suggested: none (no precision plugin can train here)"]
        lines += [f"  - {reason}" for reason in self.reasons]
        for title, choices in (("also possible", self.alternatives), ("ruled out", self.ruled_out)):
            if choices:
                width = max(len(c.spec) for c in choices)
                lines += ["", f"{title}:"] + [f"  {c.spec:<{width}}  {c.reason}" for c in choices]
        return "\n".join(lines)


def _backend_order(backends: Mapping[str, tuple[str, ...]]) -> list[str]:
    preferred = [b for b in PREFERRED_BACKENDS if b in backends]
    return preferred + sorted(b for b in backends if b not in PREFERRED_BACKENDS)


def _device_line(facts: MachineFacts) -> str:
    if facts.cuda_capability is None:
        return "device: the CPU (torch sees no CUDA GPU)"
    major, minor = facts.cuda_capability
    count = f"{facts.gpu_count} x " if facts.gpu_count > 1 else ""
    return f"device: CUDA GPU {count}{facts.gpu_name or 'unnamed'} (compute capability {major}.{minor})"


def _precision(facts: MachineFacts) -> tuple[str, str]:
    """The precision to suggest and its reason line."""
    if facts.cuda_capability is not None:
        cc = "{}.{}".format(*facts.cuda_capability)
        if facts.cuda_capability >= BF16_CAPABILITY:
            return "bf16-mixed", (
                f"precision bf16-mixed: compute capability {cc} has bfloat16 tensor cores (8.0+); float32 master "
                "weights, bfloat16 compute, float32 gradient reduction, no loss scaler needed"
            )
        return "16-mixed", (
            f"precision 16-mixed: compute capability {cc} has no bfloat16 (needs 8.0+) but float16 tensor cores; "
            "float32 master weights, a loss scaler keeps float16 gradients from underflowing"
        )
    if facts.cpu_bf16:
        return "bf16-mixed", (
            "precision bf16-mixed: this CPU computes bfloat16 natively (AVX512-BF16 or AMX); float32 master weights, "
            "bfloat16 autocast"
        )
    return "32-true", (
        "precision 32-true: this CPU has no native bfloat16 (AVX512-BF16 or AMX), so torch emulates it, slower than "
        "float32; float32 is also exact"
    )


def _cannot_run(facts: MachineFacts, precision: str) -> Optional[str]:
    """Why ``precision`` cannot run on this machine's device (any backend), or ``None``."""
    gpu = facts.cuda_capability
    if precision.startswith("mxfp8-"):
        if facts.torchao is None:
            return 'needs torchao (pip install "precision-fsdp[fp8]")'
        if gpu is None:
            return (
                "needs a CUDA GPU with MXFP8 (compute capability 10.0+, Blackwell); on a CPU torchao only emulates it "
                "(tests only)"
            )
        if gpu < MXFP8_CAPABILITY:
            return "needs compute capability 10.0+ for MXFP8 matmuls (B200, ...), this GPU has {}.{}".format(*gpu)
        return None
    if precision.startswith("fp8-"):
        if facts.torchao is None:
            return 'needs torchao (pip install "precision-fsdp[fp8]")'
        if gpu is None:
            return "needs a CUDA GPU with FP8 (compute capability 8.9+); on a CPU torchao only emulates it (tests only)"
        if gpu < FP8_CAPABILITY:
            return "needs compute capability 8.9+ for FP8 matmuls (L4, H100, ...), this GPU has {}.{}".format(*gpu)
        return None
    if "bf16" in precision and gpu is not None and gpu < BF16_CAPABILITY:
        return "needs bfloat16, which compute capability {}.{} lacks (8.0+)".format(*gpu)
    if precision.startswith("16-") and gpu is None and not facts.cpu_fp16:
        return CPU_FP16_EMULATED
    return None


def _worse_reason(facts: MachineFacts, precision: str, suggested: str) -> Optional[str]:
    """Why ``precision`` runs here but worse than ``suggested`` (so it is ruled out), or ``None``."""
    if facts.cuda_capability is None and "bf16" in precision and not facts.cpu_bf16:
        return "runs, but this CPU emulates bfloat16 (no AVX512-BF16 or AMX): slower than 32-true"
    if precision == "16-mixed" and suggested == "bf16-mixed":
        return "runs, but needs a loss scaler that bf16-mixed does without, for the same speed"
    return None


def _alternative_reason(precision: str) -> str:
    if precision == "32-true":
        return "float32 throughout: the exact reference; more memory and, where half types are native, slower"
    if precision.endswith("-true"):
        return (
            "half-size parameters with no float32 master copy: least memory, but updates smaller than its precision "
            "are lost"
        )
    if precision == "16-mixed":
        return "float16 compute with a loss scaler"
    if precision.startswith("fp8-"):
        return (
            "float8 matmuls for large Linear layers (thousands wide), the rest bf16-mixed; slower than bf16-mixed "
            "for small ones"
        )
    if precision.startswith("mxfp8-"):
        return (
            "MXFP8 matmuls (float8 with a scale per 32 values) for large bias-free Linear layers, the rest bf16-mixed"
        )
    return "also runs here"


def recommend(facts: MachineFacts) -> Recommendation:
    """The plugin name to train with on a machine described by ``facts``, with the reasons and the names ruled out."""
    precision, precision_line = _precision(facts)
    order = _backend_order(facts.backends)
    ruled_out = [Choice(name, why) for name, why in facts.unusable.items()]
    backend = next((b for b in order if precision in facts.backends[b]), None)
    if backend is None:
        reasons = [_device_line(facts), precision_line]
        if not facts.backends:
            reasons.append(
                "backend: none installed that can be used; pip install precision-fsdp (or precision-deepspeed)"
            )
        else:
            reasons.append(f"backend: no installed backend offers {precision} ({', '.join(order)} installed)")
        return Recommendation(None, tuple(reasons), (), tuple(ruled_out), facts)
    suggested = f"{backend}:{precision}"
    others = [b for b in order if b != backend]
    backend_line = f"backend {backend}: " + {
        "fsdp": "precision-fsdp is installed; FSDP2 shards parameters, gradients and optimizer state, on CPU and GPU",
        "deepspeed": "precision-deepspeed is installed (precision-fsdp is not); DeepSpeed ZeRO, on CPU and GPU",
    }.get(backend, "installed and offers the precision")
    if others:
        backend_line += f" (preferred over {', '.join(others)})"
    alternatives: list[Choice] = []
    for name in order:
        for offered in facts.backends[name]:
            spec = f"{name}:{offered}"
            if spec == suggested:
                continue
            why_not = _cannot_run(facts, offered)
            if why_not is None:
                why_not = _worse_reason(facts, offered, precision)
            if why_not is not None:
                ruled_out.append(Choice(spec, why_not))
            elif offered == precision:
                alternatives.append(Choice(spec, f"the same precision through {name} instead of {backend}"))
            elif offered in PRECISIONS or offered.startswith(("fp8-", "mxfp8-")):
                alternatives.append(Choice(spec, _alternative_reason(offered)))
            else:
                alternatives.append(Choice(spec, "offered by the backend; not judged here"))
    return Recommendation(
        suggested, (_device_line(facts), precision_line, backend_line), tuple(alternatives), tuple(ruled_out), facts
    )


def read_machine() -> MachineFacts:
    """This machine's [`MachineFacts`][precision_base.recommend.MachineFacts]: the CPU's native half types and the first
    CUDA GPU (torch), the
    registry's backends (metadata and info modules only) and torchao's version (metadata only)."""
    from importlib import metadata

    import torch

    from precision_base._compat import cpu_native_half
    from precision_base.registry import list_plugins

    cpu_bf16, cpu_fp16 = cpu_native_half()
    capability: Optional[tuple[int, int]] = None
    name = None
    count = 0
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        major, minor = torch.cuda.get_device_capability(0)
        capability, name = (int(major), int(minor)), torch.cuda.get_device_name(0)
    backends: dict[str, tuple[str, ...]] = {}
    unusable: dict[str, str] = {}
    for entry in list_plugins():
        if entry.status != "ok":
            unusable[f"{entry.backend}:*"] = f"{entry.status}: {entry.reason}"
            continue
        missing = dict(entry.unavailable)
        backends[entry.backend] = tuple(p for p in entry.precisions + entry.extra_precisions if p not in missing)
        unusable.update({f"{entry.backend}:{p}": f"unavailable: it {why}" for p, why in missing.items()})
    try:
        torchao: Optional[str] = metadata.version("torchao")
    except metadata.PackageNotFoundError:
        torchao = None
    return MachineFacts(cpu_bf16, cpu_fp16, capability, name, count, backends, unusable, torchao)


__all__ = ["Choice", "MachineFacts", "Recommendation", "read_machine", "recommend"]
