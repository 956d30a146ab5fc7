"""The first DeepSpeed run on a CPU compiles DeepSpeed's CPU communication op (``deepspeed_shm_comm``) inside
``deepspeed.init_distributed``, silently, for a minute or two. The plugin's CPU strategies log one rank-0 line
before that build, and none when the build folder already holds it.

Every check runs in a fresh Python process (an op loaded in this test process would hide the build) with
``TORCH_EXTENSIONS_DIR`` set: an empty temporary folder, then the same folder after DeepSpeed really built the op
there (the slow test runs two real 1-process ``Trainer.fit`` calls, the first of which compiles the op).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

NOTICE = "precision-deepspeed: DeepSpeed is compiling its CPU op deepspeed_shm_comm once (about a minute or two)"

DECIDE = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout)
from precision_deepspeed import _compat
from precision_deepspeed.strategy import announce_cpu_op_build
print("pending:", _compat.cpu_comm_op_build())
announce_cpu_op_build(int(sys.argv[1]), "lightning.pytorch")
"""

FIT = """
import torch
from precision_base import Trainer
from precision_testsupport.models import TinyRegressor
trainer = Trainer(precision_plugin="deepspeed:32-true", accelerator="cpu", devices=1, max_steps=1, logger=False,
                  enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(TinyRegressor(samples=8, batch_size=4))
print("fit done:", trainer.global_step, type(trainer.strategy).__name__)
"""


def _python(code: str, extensions: Path, *args: str, timeout: float = 120) -> str:
    env = os.environ | {
        "TORCH_EXTENSIONS_DIR": str(extensions),
        "DS_BUILD_OPS": "0",
        "DS_SKIP_CUDA_CHECK": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
        "PYTHONUNBUFFERED": "1",  # one stream, in the order things happened
    }
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = done.stdout
    assert done.returncode == 0, output[-4000:]
    return output


def test_an_empty_extensions_folder_gets_the_notice_on_rank_0_only(tmp_path: Path) -> None:
    out = _python(DECIDE, tmp_path, "0")
    assert f"pending: ('deepspeed_shm_comm', '{tmp_path / 'deepspeed_shm_comm'}')" in out, out
    assert NOTICE in out, out
    assert f"later runs reuse it from {tmp_path / 'deepspeed_shm_comm'}" in out, out
    other_rank = _python(DECIDE, tmp_path, "1")
    assert "pending: ('deepspeed_shm_comm'" in other_rank, other_rank
    assert NOTICE not in other_rank, "only rank 0 says it"


@pytest.mark.slow
def test_the_first_fit_says_it_compiles_and_the_second_reuses_silently(tmp_path: Path) -> None:
    extensions = tmp_path / "torch_extensions"
    extensions.mkdir()
    first = _python(FIT, extensions, timeout=900)
    assert "fit done: 1 DeepSpeedCPUStrategy" in first, first[-4000:]
    assert NOTICE in first, first[-4000:]
    # the notice comes before the build DeepSpeed reports
    built = "DeepSpeed deepspeed.ops.comm.deepspeed_shm_comm_op built successfully"  # DeepSpeed's own print
    assert first.index(NOTICE) < first.index(built), first[-4000:]
    assert (extensions / "deepspeed_shm_comm" / "deepspeed_shm_comm.so").is_file()

    decided = _python(DECIDE, extensions, "0")
    assert "pending: None" in decided, decided
    assert NOTICE not in decided, decided
    second = _python(FIT, extensions, timeout=600)
    assert "fit done: 1 DeepSpeedCPUStrategy" in second, second[-4000:]
    assert NOTICE not in second, second[-4000:]
