"""The model zoo: real architectures trained by name on 2 CPU processes, through their whole lifecycle.

``ZOO=ci`` (the default; the ``zoo_slice`` nox session in the CI slice) runs :data:`zoo_cases.CI_SLICE`, ``ZOO=full``
(``nox -s zoo``, the nightly workflow) every case of :func:`zoo_cases.full`. ``ZOO_REUSE=1`` reads a case's record
from ``$ZOO_RESULTS`` where one is there instead of running the case again (to finish an interrupted zoo).

Each case runs once, in one 2-process launch of ``_zoo_run.py`` (fit, validate, test, predict, fresh Trainers with
and without ``ckpt_path``, resume, export), and writes its record to ``$ZOO_RESULTS`` (default
``build/zoo/results``). Each test below asserts one step of one case from that record: a step passes, or is a
refusal the plugin raised up front with its reason.

Dtype oracle: ``precision_base.PrecisionAudit`` (``audit_fabric_steps`` for Fabric) over the first training step:
the ``fit`` step fails on any row where what ran differs from the plugin's ``dtypes()`` table and its documented
exceptions. ``_zoo_run.Probe`` measures the same roles by its own hooks on the model (parameter storage, every
Linear/Conv's output, the gradients, every reducing collective) and is kept in the record beside the audit's rows;
it is the oracle where the audit is not installed.

Resume tolerance: exact (losses and every weight). The resumed run executes the same CPU kernels on the same
batches in the same order; any difference means some state was not restored. Export tolerance: exact too (the
exported weights are the trained ones, copied).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from precision_base.errors import LaunchError
from precision_testsupport.launch import run_ranks

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # zoo_cases here, _deepspeed_helpers in tests-integration/

import zoo_cases  # noqa: E402

ROOT = HERE.parent.parent
RUN_TIMEOUT_S = 900
TRAINER_STEPS = ("fit", "validate", "test", "predict", "fresh_validate", "ckpt_validate", "fresh_test",
                 "ckpt_test", "fresh_predict", "ckpt_predict", "resume", "export")  # fmt: skip
FABRIC_STEPS = ("fit", "evaluate", "resume")

pytestmark = pytest.mark.slow

CASES = zoo_cases.selected(os.environ.get("ZOO", "ci"))


def _results_dir() -> Path:
    folder = Path(os.environ.get("ZOO_RESULTS", ROOT / "build" / "zoo" / "results"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Runs:
    """Each case launched at most once per session; its record cached and written to the results folder."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.records: dict[str, dict[str, Any]] = {}

    def record(self, case: zoo_cases.Case) -> dict[str, Any]:
        if case.id not in self.records:
            self.records[case.id] = self._run(case)
        return self.records[case.id]

    def _run(self, case: zoo_cases.Case) -> dict[str, Any]:
        from _deepspeed_helpers import extensions_dir

        done = _results_dir() / f"{case.id}.json"
        if os.environ.get("ZOO_REUSE") == "1" and done.is_file():  # resuming an interrupted zoo: keep its records
            reused: dict[str, Any] = json.loads(done.read_text())
            return reused
        root = self.work / case.id
        root.mkdir(parents=True, exist_ok=True)
        env = {"PYTHONWARNINGS": "ignore", "DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1",
               "TORCH_EXTENSIONS_DIR": extensions_dir()}  # fmt: skip
        try:
            record: dict[str, Any] = run_ranks(
                f"{HERE / '_zoo_run.py'}:run", case.args(str(root)), world=2, threads=1, timeout=RUN_TIMEOUT_S,
                cwd=root, env=env,
            )  # fmt: skip
        except LaunchError as exc:  # a rank crashed or hung: every step of the case failed with that
            steps = TRAINER_STEPS if case.door == "trainer" else FABRIC_STEPS
            text = str(exc)
            error = text.splitlines()[0] + "\n...\n" + text[-2500:]  # the first line says which rank exited how
            record = {"case": case.args("")} | {"steps": {s: {"status": "failed", "error": error} for s in steps}}
            record["case"].pop("root")
        (_results_dir() / f"{case.id}.json").write_text(json.dumps(record, indent=1, sort_keys=True))
        return record


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(Path(tmp_path_factory.mktemp("zoo")))


def _params() -> list[Any]:
    out = []
    for case in CASES:
        steps = (TRAINER_STEPS if case.lifecycle else ("fit",)) if case.door == "trainer" else FABRIC_STEPS
        out += [pytest.param(case, step, id=f"{case.id}::{step}") for step in steps]
    return out


@pytest.mark.parametrize(("case", "step"), _params())
def test_zoo_step(runs: Runs, case: zoo_cases.Case, step: str) -> None:
    record = runs.record(case)
    steps = record["steps"]
    fit = steps.get("fit", {})
    if step != "fit" and fit.get("status") == "refused":
        pytest.skip(f"{case.spec} refused up front: {fit['error']}")  # the fit test reports the refusal
    assert step in steps, f"{case.id}: step {step} did not run (steps run: {sorted(steps)})"
    result = steps[step]
    if result["status"] == "refused":
        # a refusal up front is an answer, not a failure, only where the plugin documents it: DeepSpeed's fp16 on a
        # CPU accelerator without fp16 support
        assert case.spec.startswith("deepspeed:16-"), f"{case.id}: refused: {result['error']}"
        assert "fp16" in result["error"] or "float16" in result["error"], result["error"]
        return
    assert result["status"] == "passed", f"{case.id} {step}: {result.get('error')}"
    if step == "fit":  # the dtype oracle: the audit's rows where it ran, else the probe's (see the module docstring)
        audit = result.get("audit")
        rows = [*result["dtypes"].values()]
        if audit:
            rows = [*audit["rows"], *(row for _rank, row in audit["other_ranks"])]
        assert all(row["ok"] is not False for row in rows), [row for row in rows if row["ok"] is False]
        assert result["loss_fell"], result["losses"]
