"""Clip-by-norm that computes the global gradient norm of a sharded model, or refuses to guess.

* FSDP2: every gradient of a ``fully_shard``-ed parameter is a DTensor; ``torch.nn.utils.clip_grad_norm_``
  reduces the per-shard norms across the mesh, so the norm is the exact global one.
* FSDP1: the root ``FullyShardedDataParallel`` module's own ``clip_grad_norm_`` is exact; the plugin learns the
  root when Lightning connects it to the model.
* Anything else in a multi-process run (a mix of DTensor and plain gradients, or FSDP1 without a single root) would
  give each rank a different, wrong norm: that raises [`ClipGradNormError`][precision_fsdp.errors.ClipGradNormError],
  naming the alternatives.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional, Union

import torch

from precision_fsdp._compat import DTensor
from precision_fsdp.errors import ClipGradNormError

_ALTERNATIVES = (
    "Use gradient_clip_algorithm='value' (exact under sharding), or shard every trainable module with "
    "plugin.fully_shard(...) (FSDP2) / let FSDPStrategy wrap the whole LightningModule (FSDP1), or override "
    "LightningModule.configure_gradient_clipping to call FullyShardedDataParallel.clip_grad_norm_ on your root."
)


def _distributed() -> bool:
    return (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and (torch.distributed.get_world_size() > 1)
    )


def _lightning_message(plugin_name: str) -> str:
    """Lightning's ``FSDPPrecision`` message for clip-by-norm, verbatim (ours follows it)."""
    return f"`gradient_clip_algorithm='norm'` is currently not supported for `{plugin_name}`"


def clip_grad_norm(
    parameters: Iterable[torch.Tensor],
    max_norm: Union[int, float],
    fsdp1_root: Optional[torch.nn.Module] = None,
    plugin_name: str = "FSDPPrecision",
    error: type[ClipGradNormError] = ClipGradNormError,
) -> torch.Tensor:
    """Scale the gradients of ``parameters`` so that their global 2-norm is at most ``max_norm``.

    Returns the global norm before clipping (a plain fp32 tensor, the same on every rank).

    Raises:
        ClipGradNormError: (``error``) the global norm cannot be computed exactly here. The message starts with
            Lightning's (``plugin_name`` fills it in) and names the alternatives.
    """
    params = [p for p in parameters if p.grad is not None]
    if not params and fsdp1_root is None:
        return torch.zeros(())
    if fsdp1_root is not None:
        # FSDP1's root knows every flat parameter and which ranks hold which shard.
        norm = fsdp1_root.clip_grad_norm_(max_norm)  # type: ignore[operator]
        return norm.full_tensor() if isinstance(norm, DTensor) else norm
    sharded = [isinstance(p.grad, DTensor) for p in params]
    if params and all(sharded):
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        return norm.full_tensor() if isinstance(norm, DTensor) else norm
    if any(sharded):
        plain = sum(1 for s in sharded if not s)
        raise error(
            f"{_lightning_message(plugin_name)} here: cannot clip gradients by norm exactly: {plain} of "
            f"{len(params)} gradients are plain tensors next to "
            "FSDP2 DTensor gradients, so their contribution to the global norm is unknown (they are neither "
            f"sharded nor synchronised by FSDP). {_ALTERNATIVES}"
        )
    if _distributed():
        raise error(
            f"{_lightning_message(plugin_name)} here: cannot clip gradients by norm exactly: the gradients are "
            "plain tensors in a multi-process run and no "
            "FSDP1 root module wraps the model, so each rank would see only its own shard or copy. " + _ALTERNATIVES
        )
    return torch.nn.utils.clip_grad_norm_(params, max_norm)
