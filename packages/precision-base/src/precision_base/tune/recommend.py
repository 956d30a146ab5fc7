"""``precision-plugins recommend``: the plugin name to train with on this machine, and why.

[`recommend`][precision_base.tune.recommend.recommend] is pure logic on
[`MachineFacts`][precision_base.tune.recommend.MachineFacts] (tests inject facts);
[`read_machine`][precision_base.tune.recommend.read_machine] gathers the
facts (imports torch; the registry reads metadata only). The rules, in order:

* **device**: a CUDA GPU when there is one, else the CPU;
* **precision**: on a GPU, ``bf16-mixed`` from compute capability 8.0 (Ampere) on, else ``16-mixed`` (a loss scaler
  keeps fp16 gradients from underflowing); on a CPU, ``bf16-mixed`` where it computes bfloat16 natively
  (AVX512-BF16 or AMX), else ``32-true`` (torch emulates bfloat16 there, slower than float32). ``*-true`` and a
  backend's extra precisions are never the suggestion: they are alternatives where they can run (``*-true`` has no
  float32 master weights; an extra precision runs where its plugin says, `PluginInfo.extra_cuda_capability`, and
  trades what its plugin says, `PluginInfo.extra_notes`);
* **backend**: the installed backend that offers the precision with the lowest `PluginInfo.preference` (ties by
  name).

Nothing here names a backend or a recipe: what a backend offers, needs and trades comes from its plugin's
[`PluginInfo`][precision_base.PluginInfo], which [`read_machine`][precision_base.tune.recommend.read_machine] reads.

Everything that cannot run here, or runs worse than the suggestion, is listed as ruled out with the reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from precision_base.kit.cpu_half import CPU_FP16_EMULATED

BF16_CAPABILITY: tuple[int, int] = (8, 0)


@dataclass(frozen=True)
class MachineFacts:
    """What [`recommend`][precision_base.tune.recommend.recommend] decides on.

    Attributes:
        cpu_bf16: the CPU computes bfloat16 natively (AVX512-BF16 or AMX).
        cpu_fp16: the CPU computes float16 natively (AMX-FP16).
        cuda_capability: the first CUDA GPU's compute capability, ``None`` without one.
        gpu_name: the first CUDA GPU's name.
        gpu_count: how many CUDA GPUs torch sees.
        backends: each usable backend (status ``ok``) -> the precisions it offers here (extras included, those
            whose requirements are missing left out), most preferred first.
        unusable: each backend that cannot be used -> why (its status and reason), and ``"<backend>:<precision>"``
            -> why, for an offered precision that is unavailable (its optional extra is not installed).
        about: each usable backend -> one line saying what it is (its distribution and summary).
        needs_gpu: ``"<backend>:<precision>"`` -> the least CUDA compute capability that precision computes on.
        notes: ``"<backend>:<precision>"`` -> what that extra precision trades, one line.
    """

    cpu_bf16: bool = False
    cpu_fp16: bool = False
    cuda_capability: Optional[tuple[int, int]] = None
    gpu_name: Optional[str] = None
    gpu_count: int = 0
    backends: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    unusable: Mapping[str, str] = field(default_factory=dict)
    about: Mapping[str, str] = field(default_factory=dict)
    needs_gpu: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["cuda_capability"] = list(self.cuda_capability) if self.cuda_capability else None
        data["backends"] = {k: list(v) for k, v in self.backends.items()}
        data["unusable"] = dict(self.unusable)
        data["about"] = dict(self.about)
        data["needs_gpu"] = {k: list(v) for k, v in self.needs_gpu.items()}
        data["notes"] = dict(self.notes)
        return data


MEASURE_HINT = (
    "measure on your model: on a CPU the fastest precision depends on the model (autocast of convolutions can be "
    "slower than float32), which this reading cannot see; precision-plugins recommend --measure module:factory "
    "trains it under each name and picks"
)
"""The line ``recommend`` ends with on a machine without a CUDA GPU, where its machine-based answer is known to be
wrong for some models."""


@dataclass(frozen=True)
class Choice:
    """A plugin name with one line of reason."""

    spec: str
    reason: str


@dataclass(frozen=True)
class Recommendation:
    """What [`recommend`][precision_base.tune.recommend.recommend] returns.

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
        if self.spec and self.facts.cuda_capability is None:
            lines += ["", MEASURE_HINT]
        return "\n".join(lines)


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


def _cannot_run(facts: MachineFacts, spec: str, precision: str) -> Optional[str]:
    """Why ``precision`` (offered as ``spec``) cannot run on this machine's device, or ``None``."""
    gpu = facts.cuda_capability
    needed = facts.needs_gpu.get(spec)
    if needed is not None:
        least = "{}.{}".format(*needed)
        if gpu is None:
            return (
                f"needs a CUDA GPU of compute capability {least}+ for its matmuls; on a CPU it is only emulated (tests)"
            )
        if gpu < needed:
            return f"needs compute capability {least}+ for its matmuls, this GPU has " + "{}.{}".format(*gpu)
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


def _alternative_reason(facts: MachineFacts, spec: str, precision: str) -> str:
    if precision == "32-true":
        return "float32 throughout: the exact reference; more memory and, where half types are native, slower"
    if precision.endswith("-true"):
        return (
            "half-size parameters with no float32 master copy: least memory, but updates smaller than its precision "
            "are lost"
        )
    if precision == "16-mixed":
        return "float16 compute with a loss scaler"
    return facts.notes.get(spec, "offered by the backend; not judged here")


def recommend(facts: MachineFacts) -> Recommendation:
    """The plugin name to train with on a machine described by ``facts``, with the reasons and the names ruled out."""
    precision, precision_line = _precision(facts)
    order = list(facts.backends)
    ruled_out = [Choice(name, why) for name, why in facts.unusable.items()]
    backend = next((b for b in order if precision in facts.backends[b]), None)
    if backend is None:
        reasons = [_device_line(facts), precision_line]
        if not facts.backends:
            from precision_base.registry.statuses import published_distributions

            dists = list(published_distributions().values())
            line = "backend: none installed that can be used"
            if dists:
                line += "; pip install " + " (or ".join(dists) + ")" * (len(dists) - 1)
            reasons.append(line)
        else:
            reasons.append(f"backend: no installed backend offers {precision} ({', '.join(order)} installed)")
        return Recommendation(None, tuple(reasons), (), tuple(ruled_out), facts)
    suggested = f"{backend}:{precision}"
    others = [b for b in order if b != backend]
    backend_line = f"backend {backend}: " + facts.about.get(backend, "installed and offers the precision")
    if others:
        backend_line += f" (preferred over {', '.join(others)})"
    alternatives: list[Choice] = []
    for name in order:
        for offered in facts.backends[name]:
            spec = f"{name}:{offered}"
            if spec == suggested:
                continue
            why_not = _cannot_run(facts, spec, offered)
            if why_not is None:
                why_not = _worse_reason(facts, offered, precision)
            if why_not is not None:
                ruled_out.append(Choice(spec, why_not))
            elif offered == precision:
                alternatives.append(Choice(spec, f"the same precision through {name} instead of {backend}"))
            else:
                alternatives.append(Choice(spec, _alternative_reason(facts, spec, offered)))
    return Recommendation(
        suggested, (_device_line(facts), precision_line, backend_line), tuple(alternatives), tuple(ruled_out), facts
    )


def read_machine() -> MachineFacts:
    """This machine's [`MachineFacts`][precision_base.tune.recommend.MachineFacts]: the CPU's native half types and the
    first CUDA GPU (torch), and the registry's backends (metadata and info modules only) in their plugins' order of
    preference, with what their plugins declare of each extra precision."""
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
    about: dict[str, str] = {}
    needs_gpu: dict[str, tuple[int, int]] = {}
    notes: dict[str, str] = {}
    entries = list_plugins()
    for entry in sorted(entries, key=lambda e: (e.info.preference if e.info is not None else 100, e.backend)):
        if entry.status != "ok" or entry.info is None:
            unusable[f"{entry.backend}:*"] = f"{entry.status}: {entry.reason}"
            continue
        missing = dict(entry.unavailable)
        backends[entry.backend] = tuple(p for p in entry.precisions + entry.extra_precisions if p not in missing)
        unusable.update({f"{entry.backend}:{p}": f"unavailable: it {why}" for p, why in missing.items()})
        about[entry.backend] = f"{entry.distribution} is installed; {entry.summary}" if entry.summary else "installed"
        needs_gpu.update({f"{entry.backend}:{p}": (cc[0], cc[1]) for p, cc in entry.info.extra_cuda_capability})
        notes.update({f"{entry.backend}:{p}": line for p, line in entry.info.extra_notes})
    return MachineFacts(cpu_bf16, cpu_fp16, capability, name, count, backends, unusable, about, needs_gpu, notes)


__all__ = ["Choice", "MachineFacts", "Recommendation", "read_machine", "recommend"]
