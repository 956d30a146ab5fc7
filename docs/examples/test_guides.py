"""Every example the home page and the guides show runs as written, on this CPU-only machine, and prints what the
page says it prints."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


TEARDOWN_ABORT = "terminate called without an active exception"
"""What torch's gloo prints when it aborts a finished multi-process run at interpreter exit (pytorch/pytorch#190489;
seen here about once in 70 two-process runs, plain Lightning DDP included)."""


def run_example(
    name: str, cwd: Path, *args: str, teardown_abort_ok: bool = False, **extra_env: str
) -> str:
    """Run ``docs/examples/<name>`` as a reader would (``python name ...`` in ``cwd``, the examples folder on the
    path, DeepSpeed's ops not built) with ``extra_env`` added; its standard output, or a failure with its logs.

    ``teardown_abort_ok``: a multi-process example whose process gloo aborts at exit (exit -6, its last words
    :data:`TEARDOWN_ABORT`) after it has run is a warning, not a failure: the caller's assertions on the output still
    decide. Any other exit, or an abort with other last words, fails."""
    env = {
        **os.environ,
        "PYTHONPATH": str(HERE),
        "DS_BUILD_OPS": "0",
        "DS_SKIP_CUDA_CHECK": "1",
        **extra_env,
    }
    done = subprocess.run(
        [sys.executable, str(HERE / name), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    aborted = done.returncode == -6 and done.stderr.rstrip().endswith(TEARDOWN_ABORT)
    if teardown_abort_ok and aborted:
        said = f"{name}: gloo aborted the process at exit ({TEARDOWN_ABORT!r})"
        warnings.warn(said, stacklevel=2)
        return done.stdout
    assert done.returncode == 0, (
        f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("quick_fsdp.py", ["FSDP2Strategy fsdp:bf16-mixed"]),
        ("quick_deepspeed.py", ["DeepSpeedCPUStrategy {'enabled': True}"]),
        ("fsdp2_custom_sharding.py", ["FSDP2Strategy fsdp:bf16-mixed"]),
        ("plugin_options.py", ["fsdp:16-mixed FSDPPrecision"]),
        ("own_trainer.py", ["MyTrainer fsdp:bf16-mixed"]),
        ("pytorch_lightning_trainer.py", ["True fsdp:bf16-mixed"]),
        ("quick_fabric.py", ["FSDP2Strategy FSDPPrecision loss"]),
        (
            "measure_model.py",
            ["reference fsdp:32-true", "picked: fsdp:", "fsdp:bf16-true"],
        ),
        (
            "deepspeed_config.py",
            [
                "stage 3 bf16 {'enabled': True}",
                "DeepSpeedConfigConflictError: the DeepSpeed config you passed contradicts",
            ],
        ),
        (
            "checkpoint_resume.py",
            [
                "resumed from step 2, stopped at step 4",
                "the 16-mixed loss scaler state is dropped",
            ],
        ),
    ],
)
def test_training_example_runs(name: str, expected: list[str], tmp_path: Path) -> None:
    out = run_example(name, tmp_path)
    for line in expected:
        assert line in out, f"{name} printed:\n{out}"


@pytest.mark.slow
def test_lightning_cli_takes_the_name(tmp_path: Path) -> None:
    args = [
        "fit",
        "--trainer.precision_plugin",
        "fsdp:bf16-mixed",
        "--trainer.max_steps",
        "2",
        "--trainer.logger",
        "false",
    ]
    assert (
        "fsdp:bf16-mixed"
        in run_example("cli_train.py", tmp_path, *args).splitlines()[-1]
    )


def test_precision_pitfalls_print_what_the_guide_says(tmp_path: Path) -> None:
    out = run_example("fp16_pitfalls.py", tmp_path)
    assert "Adam eps in fp16: 0.0\n" in out
    assert "1.0 + 1e-3 in bf16: 1.0\n" in out
    assert "1.0 + 1e-3 in fp32: 1.00" in out
