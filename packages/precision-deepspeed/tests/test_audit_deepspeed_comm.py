"""The audit sees the collectives DeepSpeed's comm layer calls only through the plugin's ``audit_collectives()``.

DeepSpeed's ``TorchBackend`` caches ``all_gather_into_tensor`` and ``reduce_scatter_tensor`` when it starts and calls
those references (ZeRO's all-gathers do), past the ``torch.distributed`` attributes the audit wraps. Real
``deepspeed.comm`` on a one-rank gloo group, in this process.
"""

from __future__ import annotations

import pytest
import torch

from precision_base.audit.collectives import CollectiveTap
from precision_deepspeed.plugin import DeepSpeedPrecision
from precision_testsupport.launch import process_group


def test_deepspeeds_cached_all_gather_is_recorded_only_through_the_plugins_references() -> None:
    ds_comm = pytest.importorskip("deepspeed.comm")
    from deepspeed.comm import comm as ds_comm_state

    before = ds_comm_state.cdb
    out, payload = torch.empty(4, dtype=torch.bfloat16), torch.ones(4, dtype=torch.bfloat16)
    try:
        with process_group():
            ds_comm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)
            blind = CollectiveTap()
            blind.install()  # torch.distributed's own functions only
            ds_comm.all_gather_into_tensor(out, payload)
            blind.remove()
            named = DeepSpeedPrecision("bf16-mixed").audit_collectives()
            tap = CollectiveTap()
            tap.install(named)
            ds_comm.all_gather_into_tensor(out, payload)
            tap.remove()
    finally:
        ds_comm_state.cdb = before
    # without the references the call is never seen as the collective DeepSpeed called: it bypasses the wrapped
    # attributes, and only a torch whose all_gather_into_tensor forwards to all_gather_single (a deprecation shim,
    # torch 2.13) shows the inner call
    assert [c.name for c in blind.calls] in ([], ["all_gather_single"])
    assert {(attribute, name) for _, attribute, name in named} == {
        ("all_gather_function", "all_gather_into_tensor"),
        ("reduce_scatter_function", "reduce_scatter_tensor"),
    }
    assert [(c.name, str(c.dtype), c.nbytes) for c in tap.calls] == [("all_gather_into_tensor", "torch.bfloat16", 8)]
    assert torch.equal(out, payload)
