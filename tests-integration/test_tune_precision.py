"""``precision_base.tune_precision`` and ``precision-plugins recommend --measure`` (issue 33) on a real model: each
candidate a real ``Trainer.fit`` in a fresh process under precision-fsdp, on this CPU.

The model (``_tune_factories.softplus_sum``) overflows float16 in its loss, so ``fsdp:16-true`` diverges for a
reason a user can check by hand; ``fsdp:fp8-tensorwise`` is refused on a machine without an FP8 GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from precision_base import TuneTargetError, tune_precision

HERE = Path(__file__).parent
FACTORY = f"{HERE / '_tune_factories.py'}:softplus_sum"
pytest.importorskip("precision_fsdp", reason="the candidates are precision-fsdp's plugins")
PARAMETERS = (32 * 64 + 64) + (64 * 8 + 8)  # _tune_factories.NaiveLogMeanExp's two Linear layers


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks fp8's refusal on a machine without an FP8 GPU")
def test_picks_the_fastest_that_trains_and_says_why_the_others_were_not_picked() -> None:
    seen, started = [], []
    result = tune_precision(
        FACTORY, candidates=["fsdp:bf16-mixed", "fsdp:16-true", "fsdp:fp8-tensorwise"], steps=4, warmup=1,
        on_trial=seen.append, on_start=lambda *run: started.append(run),
    )  # fmt: skip
    rows = {t.spec: t for t in result.candidates}
    order = ["fsdp:32-true", "fsdp:bf16-mixed", "fsdp:16-true", "fsdp:fp8-tensorwise"]
    assert [t.spec for t in seen] == order
    assert started == [(spec, i, 4) for i, spec in enumerate(order)]
    assert result.reference == "fsdp:32-true"
    assert rows["fsdp:32-true"].status == rows["fsdp:bf16-mixed"].status == "ok"
    assert rows["fsdp:32-true"].loss_deviation == 0.0
    assert 0.0 < rows["fsdp:bf16-mixed"].loss_deviation < result.tolerance  # type: ignore[operator]
    assert rows["fsdp:16-true"].status == "diverged"
    assert rows["fsdp:16-true"].reason == "the loss became inf at step 1"
    assert rows["fsdp:fp8-tensorwise"].status == "refused"
    assert "Float8UnavailableError: fsdp:fp8-tensorwise needs a GPU with FP8" in rows["fsdp:fp8-tensorwise"].reason
    ok = [t for t in result.candidates if t.status == "ok"]
    assert result.picked == min(ok, key=lambda t: t.step_ms or 0.0).spec
    assert [t.spec for t in result.candidates[:2]] == [t.spec for t in sorted(ok, key=lambda t: t.step_ms or 0.0)]
    for row in ok:
        assert len(row.losses) == 5
        assert row.audit_ok is True
        assert row.step_ms is not None
        assert row.step_ms_low is not None
        assert row.step_ms_high is not None
        assert row.step_ms_low <= row.step_ms <= row.step_ms_high
        assert row.peak_bytes is not None
    assert rows["fsdp:fp8-tensorwise"].peak_bytes is None
    held = 2 * 4 * PARAMETERS  # float32 parameters and their gradients (SGD keeps no state)
    assert rows["fsdp:32-true"].tensor_bytes == rows["fsdp:bf16-mixed"].tensor_bytes == held
    assert rows["fsdp:fp8-tensorwise"].tensor_bytes is None
    assert result.reason.startswith("the fastest of 2 candidate(s) whose loss stays within 10% of fsdp:32-true's")
    table = result.render()
    assert table.splitlines()[0] == f"picked: {result.picked}"
    assert "fsdp:16-true         diverged" in table


def test_a_budget_that_ends_early_lists_what_did_not_run() -> None:
    result = tune_precision(FACTORY, candidates=["fsdp:bf16-mixed", "fsdp:bf16-true"], steps=2, warmup=0, budget_s=1)
    rows = {t.spec: t.status for t in result.candidates}
    assert rows == {"fsdp:32-true": "ok", "fsdp:bf16-mixed": "skipped", "fsdp:bf16-true": "skipped"}
    assert result.picked == "fsdp:32-true"
    skipped = [t for t in result.candidates if t.status == "skipped"]
    assert all(t.reason.startswith("the budget of 1 s was spent") for t in skipped)


@pytest.mark.parametrize(
    ("factory", "said"),
    [
        ("raises", "failed: ValueError: no data here: the dataset folder is empty"),
        ("not_a_module", "failed: TypeError: the factory .* returned dict; return a LightningModule"),
        ("missing", "failed: AttributeError: "),
    ],
)
def test_a_factory_that_fails_is_an_error_naming_it_and_nothing_is_written(
    factory: str, said: str, tmp_path: Path
) -> None:
    ref = f"{HERE / '_tune_factories.py'}:{factory}"
    with pytest.raises(TuneTargetError, match=rf"the factory .*_tune_factories.py:{factory} {said}"):
        tune_precision(ref, candidates=["fsdp:bf16-mixed"], steps=2, warmup=0)
    out = tmp_path / "out"
    cli = [sys.executable, "-m", "precision_base.cli", "recommend", "--measure", ref, "--candidates", "fsdp:bf16-mixed",
           "--out", str(out)]  # fmt: skip
    done = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.startswith(f"precision-plugins: error: the factory {ref} failed: ")
    assert not out.exists()


def test_the_command_line_prints_json_and_writes_it(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "precision_base.cli", "recommend", "--measure", FACTORY, "--candidates",
           "fsdp:bf16-true", "--steps", "3", "--warmup", "1", "--json", "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data == json.loads((tmp_path / "tune.json").read_text())
    assert (tmp_path / "tune.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert data["reference"] == "fsdp:32-true"
    assert data["picked"] in ("fsdp:32-true", "fsdp:bf16-true")
    assert {c["spec"] for c in data["candidates"]} == {"fsdp:32-true", "fsdp:bf16-true"}
    for row in data["candidates"]:
        assert {"spec", "status", "reason", "step_ms", "peak_bytes", "loss_deviation", "audit_ok"} <= row.keys()
        assert row["tensor_bytes"] == (2 * 4 if row["spec"] == "fsdp:32-true" else 2 * 2) * PARAMETERS
    progress = done.stderr.splitlines()
    assert progress[0].startswith("[measure] fsdp:32-true: ok, ")
    assert progress[1].startswith("[measure] fsdp:bf16-true: ")


def test_devices_go_to_every_candidates_trainer_and_each_process_holds_its_half() -> None:
    result = tune_precision(FACTORY, candidates=["fsdp:bf16-mixed"], steps=2, warmup=0, devices=2)
    rows = sorted((t.spec, t.status, t.world_size, t.tensor_bytes) for t in result.candidates)
    half = 4 * PARAMETERS  # float32 parameters and gradients, sharded over 2 processes (every dim 0 is even)
    assert rows == [("fsdp:32-true", "ok", 2, half), ("fsdp:bf16-mixed", "ok", 2, half)]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="measures on a CUDA GPU and none is visible to torch")
def test_on_a_cuda_gpu_each_candidate_is_timed_with_synchronisation_and_the_allocators_peak() -> None:
    result = tune_precision(
        FACTORY, candidates=["fsdp:bf16-mixed", "fsdp:16-mixed"], steps=4, warmup=1, accelerator="cuda"
    )
    rows = {t.spec: t for t in result.candidates}
    assert set(rows) == {"fsdp:32-true", "fsdp:bf16-mixed", "fsdp:16-mixed"}
    assert rows["fsdp:bf16-mixed"].status == "ok", rows["fsdp:bf16-mixed"].reason
    for row in rows.values():
        if row.status == "ok":
            assert row.peak_bytes is not None
            assert row.peak_bytes > 0
            assert row.step_ms is not None
            assert row.step_ms > 0
            assert row.audit_ok is True
    assert result.picked is not None
