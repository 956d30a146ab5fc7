"""The hooks an audit installs, and what they record (dtypes only; no tensor is kept or changed).

[`Recorder`][precision_base.audit.observe.Recorder] installs, on
[`Recorder.install`][precision_base.audit.observe.Recorder.install]:

* a forward pre-hook on every module: the dtype of its own parameters as the forward sees them (FSDP2 has already
  all-gathered them there, DeepSpeed has cast them), of its own floating buffers, and, on matmul modules, whether
  ``torch.autocast`` is on and with which dtype;
* inside the forward of a module that swaps in float32 copies of its half-precision parameters (DeepSpeed's native
  mode, kept modules), the dtype of those copies
  ([`watch_forward_parameters`][precision_base.kit.keep_fp32.watch_forward_parameters]): the
  "forward parameters" row shows them rather than the stored dtype the pre-hook saw;
* a forward hook (run before any other forward hook of the module, so a kept module's output cast is not mistaken
  for its compute) on every matmul module (``Linear``, ``Conv*``, ``ConvTranspose*``, ``MultiheadAttention`` and
  subclasses, torchao's ``Float8Linear`` included): the dtype of its first floating output;
* on matmul modules of an fp8 run (or of a ``Float8*`` class), a ``TorchDispatchMode`` active during the module's
  forward only, which records matrix products whose operands are float8 (a float8 tensor, or a tensor subclass
  holding float8 data, such as torchao's ``Float8TrainingTensor`` or ``MXTensor``) and calls of ``aten._scaled_mm``;
* a step post-hook on the innermost ``torch.optim.Optimizer`` of each optimizer (DeepSpeed's ZeRO
  optimizer holds one whose parameters are the float32 master partitions): the dtypes of the parameters it updates,
  of the gradients it sees and of its per-parameter state;
* the plugin's ``convert_input``, wrapped: the dtypes of the floating tensors it returns;
* the collectives ([`CollectiveTap`][precision_base.audit.collectives.CollectiveTap]).

[`Recorder.remove`][precision_base.audit.observe.Recorder.remove] takes every one of them away again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from precision_base._compat import torch_dispatch_mode
from precision_base.audit.collectives import CollectiveTap
from precision_base.kit.keep_fp32 import is_kept, watch_forward_parameters

MATMUL_MODULES: tuple[type[torch.nn.Module], ...] = (
    torch.nn.Linear,
    torch.nn.Conv1d,
    torch.nn.Conv2d,
    torch.nn.Conv3d,
    torch.nn.ConvTranspose1d,
    torch.nn.ConvTranspose2d,
    torch.nn.ConvTranspose3d,
    torch.nn.MultiheadAttention,
)
"""Modules whose output dtype is the compute dtype of their matmul or convolution."""

_WRAPPERS = ("_FabricModule", "DeepSpeedEngine", "DistributedDataParallel", "_LightningModuleWrapperBase")


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def is_float8(dtype: torch.dtype) -> bool:
    """Whether ``dtype`` is one of torch's float8 dtypes."""
    return dtype_name(dtype).startswith("float8")


def unwrap_module(model: Any) -> torch.nn.Module:
    """The user's module under Fabric's, DeepSpeed's and DDP's wrappers."""
    while type(model).__name__ in _WRAPPERS and isinstance(getattr(model, "module", None), torch.nn.Module):
        model = model.module
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"the audit needs a torch.nn.Module (the model being trained), got {type(model).__name__}")
    return model


def innermost_optimizer(optimizer: Any) -> Optional[torch.optim.Optimizer]:
    """The deepest ``torch.optim.Optimizer`` under Lightning's, Fabric's and DeepSpeed's optimizer wrappers."""
    found: Optional[torch.optim.Optimizer] = None
    seen: set[int] = set()
    current = optimizer
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, torch.optim.Optimizer):
            found = current
        current = next(
            (getattr(current, a) for a in ("_optimizer", "optimizer") if getattr(current, a, None) is not None), None
        )
    return found


def _tensors(data: Any) -> Iterator[torch.Tensor]:
    if isinstance(data, torch.Tensor):
        yield data
    elif isinstance(data, dict):
        for value in data.values():
            yield from _tensors(value)
    elif isinstance(data, (list, tuple)):
        for value in data:
            yield from _tensors(value)


def _first_floating(data: Any) -> Optional[torch.Tensor]:
    return next((t for t in _tensors(data) if t.is_floating_point()), None)


# where torchao's tensor subclasses keep their low-precision payload: Float8TrainingTensor ``_data``, MXTensor ``qdata``
_PAYLOADS = ("_data", "qdata")


def _float8_payload(value: Any) -> Optional[torch.Tensor]:
    """``value`` itself when it is a float8 tensor, the float8 data a torchao tensor subclass holds, else ``None``."""
    if not isinstance(value, torch.Tensor):
        return None
    if is_float8(value.dtype):
        return value
    for name in _PAYLOADS:
        inner = getattr(value, name, None)
        if isinstance(inner, torch.Tensor) and is_float8(inner.dtype):
            return inner
    return None


_DispatchMode: Any = torch_dispatch_mode()


class _Float8Watch(_DispatchMode):  # type: ignore[misc]
    """Records, for the module whose forward is running, matrix products with float8 operands."""

    _PRODUCTS = frozenset({"mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "matmul", "linear"})

    def __init__(self, sink: set[str]) -> None:
        super().__init__()
        self.sink = sink

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in self._PRODUCTS:
            if name == "_scaled_mm":
                self.sink.add("float8 GEMM (_scaled_mm)")
            else:
                payloads = (_float8_payload(a) for a in (*args, *kwargs.values()))
                kinds = {dtype_name(t.dtype) for t in payloads if t is not None}
                if kinds:
                    self.sink.add(f"float8 GEMM ({'/'.join(sorted(kinds))} operands)")
        return func(*args, **kwargs)


@dataclass
class ModuleSeen:
    """What the hooks saw of one module (dtype names)."""

    kind: str
    kept: bool
    matmul: bool
    params: set[str] = field(default_factory=set)
    buffers: set[str] = field(default_factory=set)
    outputs: set[str] = field(default_factory=set)
    autocast: set[str] = field(default_factory=set)
    float8: set[str] = field(default_factory=set)
    calls: int = 0
    in_forward: set[str] = field(default_factory=set)
    """Dtypes of the tensors a forward swapped in for the module's parameters, seen from inside that forward
    ([`precision_base.kit.keep_fp32.watch_forward_parameters`][]); empty where the forward used the parameters."""

    @property
    def forward_params(self) -> set[str]:
        """The dtypes the module's forward computed with: the swapped-in copies where there were any, else the
        parameters as the forward pre-hook saw them."""
        return self.in_forward or self.params


@dataclass
class OptimizerSeen:
    """What the step hooks saw of one optimizer (dtype name -> tensor count)."""

    kind: str
    params: Counter[str] = field(default_factory=Counter)
    kept_params: Counter[str] = field(default_factory=Counter)
    grads: Counter[str] = field(default_factory=Counter)
    kept_grads: Counter[str] = field(default_factory=Counter)
    state: Counter[str] = field(default_factory=Counter)
    steps: int = 0


def _autocast_state(device_type: str) -> str:
    try:
        enabled = torch.is_autocast_enabled(device_type)
        dtype = torch.get_autocast_dtype(device_type)
    except TypeError:  # torch < 2.4 has no device_type arguments
        enabled = torch.is_autocast_cpu_enabled() if device_type == "cpu" else torch.is_autocast_enabled()
        dtype = torch.get_autocast_cpu_dtype() if device_type == "cpu" else torch.get_autocast_gpu_dtype()
    return dtype_name(dtype) if enabled else "off"


class _Unwatch:
    """A ``remove()`` handle for [`precision_base.kit.keep_fp32.watch_forward_parameters`][]."""

    def __init__(self, stop: Any) -> None:
        self.remove = stop


class Recorder:
    """Installs the audit's hooks on ``model``, ``optimizers`` and ``plugin``, and keeps what they see.

    Args:
        plugin: the precision plugin in use (its ``convert_input`` is wrapped while installed).
        model: the model being trained (Fabric's and DeepSpeed's wrappers are looked through).
        optimizers: the optimizers being stepped (Lightning's, Fabric's and DeepSpeed's wrappers are looked through).
        watch_float8: record float8 matrix products in every matmul module (fp8 runs); otherwise only in modules
            whose class name starts with ``Float8``.
    """

    def __init__(self, plugin: Any, model: Any, optimizers: list[Any], *, watch_float8: bool) -> None:
        self.plugin = plugin
        self.model = unwrap_module(model)
        self.optimizers = [o for o in (innermost_optimizer(opt) for opt in optimizers) if o is not None]
        self.watch_float8 = watch_float8
        self.modules: dict[str, ModuleSeen] = {}
        self.optimizer_seen: list[OptimizerSeen] = []
        self.inputs: Counter[str] = Counter()
        self.input_calls = 0
        self.tap = CollectiveTap()
        self._handles: list[Any] = []
        self._input_saved: Optional[tuple[bool, Any]] = None
        self.installed = False
        self.recording = False
        self.limit: Optional[int] = None
        """Stop recording when the next step begins after this many optimizer steps (``None``: at
        [`remove`][precision_base.audit.observe.Recorder.remove])."""
        self.reached = False

    # -- install / remove -------------------------------------------------------------------------------
    def install(self) -> None:
        """Install every hook and start recording."""
        if self.installed:
            return
        asked = getattr(self.plugin, "audit_collectives", None)  # a plugin without the contract's class: none
        self.tap.install(asked() if callable(asked) else ())  # first: a refused reference leaves nothing installed
        kept_roots = [name for name, m in self.model.named_modules() if is_kept(m)]
        kept_params = {id(p) for name, m in self.model.named_modules() if is_kept(m) for p in m.parameters()}
        for name, module in self.model.named_modules():
            inside_kept = any(name == k or name.startswith(k + ".") or k == "" for k in kept_roots)
            self._hook_module(name or "<root>", module, inside_kept)
        for optimizer in self.optimizers:
            self._hook_optimizer(optimizer, kept_params)
        by_module = {id(m): self.modules[name or "<root>"] for name, m in self.model.named_modules()}
        recorder = self

        def swapped(module: torch.nn.Module) -> None:
            seen = by_module.get(id(module))
            if seen is not None and recorder.recording:
                seen.in_forward.update(dtype_name(p.dtype) for p in module.parameters(recurse=False))

        self._handles.append(_Unwatch(watch_forward_parameters(swapped)))
        self._wrap_convert_input()
        self.installed = self.recording = True

    def stop_recording(self) -> None:
        """Stop recording (the hooks stay until [`remove`][precision_base.audit.observe.Recorder.remove]; safe to call
        from inside a hook)."""
        self.recording = False
        self.tap.recording = False

    def remove(self) -> None:
        """Remove every hook and wrapper installed; idempotent."""
        self.stop_recording()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.tap.remove()
        if self._input_saved is not None:
            had, value = self._input_saved
            if had:
                self.plugin.__dict__["convert_input"] = value
            else:
                self.plugin.__dict__.pop("convert_input", None)
            self._input_saved = None
        self.installed = False

    # -- modules ----------------------------------------------------------------------------------------
    def _hook_module(self, name: str, module: torch.nn.Module, kept: bool) -> None:
        matmul = isinstance(module, MATMUL_MODULES)
        float8_class = type(module).__name__.startswith("Float8")
        seen = ModuleSeen(type(module).__name__, kept, matmul or float8_class)
        self.modules[name] = seen
        watch = (self.watch_float8 and seen.matmul) or float8_class
        active: list[_Float8Watch] = []
        recorder = self

        def before(mod: torch.nn.Module, args: Any) -> None:
            if recorder.reached:
                recorder.stop_recording()
            if not recorder.recording:
                return
            seen.calls += 1
            seen.params.update(dtype_name(p.dtype) for p in mod.parameters(recurse=False))
            seen.buffers.update(dtype_name(b.dtype) for b in mod.buffers(recurse=False) if b.is_floating_point())
            if seen.matmul:
                first = _first_floating(args)
                device = first.device.type if first is not None else recorder._device_type(mod)
                seen.autocast.add(_autocast_state(device))
            if watch:
                mode = _Float8Watch(seen.float8)
                mode.__enter__()
                active.append(mode)

        def after(mod: torch.nn.Module, args: Any, output: Any) -> None:
            if watch and active:
                active.pop().__exit__(None, None, None)
            if not recorder.recording or not seen.matmul:
                return
            first = _first_floating(output)
            if first is not None:
                seen.outputs.add(dtype_name(first.dtype))

        self._handles.append(module.register_forward_pre_hook(before))
        if seen.matmul or watch:
            self._handles.append(module.register_forward_hook(after, prepend=True, always_call=True))

    def _device_type(self, module: torch.nn.Module) -> str:
        tensor = next(iter(module.parameters(recurse=False)), None)
        return tensor.device.type if tensor is not None else str(getattr(self.plugin, "device_type", "cpu"))

    # -- optimizers -------------------------------------------------------------------------------------
    def _hook_optimizer(self, optimizer: torch.optim.Optimizer, kept: set[int]) -> None:
        seen = OptimizerSeen(type(optimizer).__name__)
        self.optimizer_seen.append(seen)
        recorder = self

        def params() -> Iterator[torch.Tensor]:
            for group in optimizer.param_groups:
                yield from group["params"]

        def after(opt: Any, args: Any, kwargs: Any) -> None:
            # after the step: Lightning runs the closure (forward and backward) inside optimizer.step(closure), so the
            # gradients exist only now; they are the ones the step used (zero_grad comes later)
            if not recorder.recording:
                return
            seen.steps += 1
            for p in params():
                (seen.kept_params if id(p) in kept else seen.params)[dtype_name(p.dtype)] += 1
                if p.grad is not None:
                    (seen.kept_grads if id(p) in kept else seen.grads)[dtype_name(p.grad.dtype)] += 1
                for value in optimizer.state.get(p, {}).values():
                    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.shape == p.shape:
                        seen.state[dtype_name(value.dtype)] += 1
            if recorder.limit is not None and seen.steps >= recorder.limit:
                recorder.reached = True  # recording stops when the next step begins: collectives after the inner
                # optimizer's step (ZeRO's all-gather of the updated partitions) still belong to this one

        self._handles.append(optimizer.register_step_post_hook(after))

    # -- inputs -----------------------------------------------------------------------------------------
    def _wrap_convert_input(self) -> None:
        original = getattr(self.plugin, "convert_input", None)
        if original is None:
            return
        self._input_saved = ("convert_input" in self.plugin.__dict__, self.plugin.__dict__.get("convert_input"))
        recorder = self

        def convert_input(data: Any) -> Any:
            converted = original(data)
            if recorder.reached:
                recorder.stop_recording()
            if recorder.recording:
                recorder.input_calls += 1
                recorder.inputs.update(dtype_name(t.dtype) for t in _tensors(converted) if t.is_floating_point())
            return converted

        self.plugin.__dict__["convert_input"] = convert_input

    @property
    def optimizer_steps(self) -> int:
        """Optimizer steps recorded (the largest count over the optimizers)."""
        return max((o.steps for o in self.optimizer_seen), default=0)


__all__ = ["MATMUL_MODULES", "ModuleSeen", "OptimizerSeen", "Recorder", "dtype_name", "innermost_optimizer"]
