"""Real 2-process FSDP2 training on CPU (gloo) through ``precision_base.Trainer(precision_plugin="fsdp:...")``.

Each precision trains once (``_fsdp_train.py`` in a subprocess: Lightning's launcher re-runs a script for rank 1),
then resumes from its step-4 checkpoint in the same processes; the tests below read that run's JSON.

Resume tolerance: exact (``==`` on Python floats of every loss and every parameter). The resumed run executes the
same CPU kernels on the same batches in the same order, and a 2-rank gloo reduction adds the same two numbers in the
same order, so any difference at all would mean some state (weights, momentum, scaler, step counter) was not
restored.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from _fsdp_helpers import INF_STEP, TrainingRuns, by_step, cpu_precisions, needs_fsdp2_on_cpu

import precision_base

pytestmark = [
    pytest.mark.slow,
    needs_fsdp2_on_cpu(),
]

PRECISIONS = cpu_precisions()


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> TrainingRuns:
    return TrainingRuns(Path(tmp_path_factory.mktemp("fsdp_runs")))


@pytest.fixture(params=PRECISIONS)
def run(request: pytest.FixtureRequest, runs: TrainingRuns) -> dict[str, Any]:
    return runs.result(request.param)


def test_trained_through_our_plugin_in_two_processes(run: dict[str, Any]) -> None:
    assert run["world_size"] == 2
    assert run["plugin_type"] == "precision_fsdp.plugin.FSDPPrecision"
    table = precision_base.resolve(f"fsdp:{run['precision']}").dtypes(2)
    assert run["table"] == dict(table.rows()), "the plugin used in training reports the FSDP2 table"


def test_sharded_parameter_dtype(run: dict[str, Any]) -> None:
    expected = run["table"]["parameters"]
    assert run["sharded"], "no parameters recorded"
    for name, info in run["sharded"].items():
        assert info["dtensor"], f"{name} was not sharded by fully_shard"
        assert info["dtype"] == expected, f"{name}: sharded dtype {info['dtype']}, table says {expected}"


def test_forward_compute_dtype(run: dict[str, Any]) -> None:
    compute = run["table"]["compute"]
    assert run["compute_dtypes"] == [compute], "dtype of the first Linear's output in forward"
    assert run["param_dtypes_fwd"] == [compute], "dtype of the unsharded weight FSDP2 gathered for forward"


def test_reduced_gradient_dtype(run: dict[str, Any]) -> None:
    # recorded inside FSDP2's reduce-scatter (set_custom_reduce_scatter) on rank 0
    assert run["reduce_dtypes"] == [run["table"]["reduction"]]
    if run["precision"].endswith("-mixed"):
        assert run["reduce_dtypes"] == ["float32"], "*-mixed reduces in fp32 by default"
    for step, entry in by_step(run["steps"]).items():
        assert entry["grad_dtypes"] == [run["table"]["parameters"]], f"sharded gradient dtype at step {step}"


def test_loss_falls(run: dict[str, Any]) -> None:
    losses = [loss for _, loss in sorted(by_step(run["losses"]).items())]
    assert len(losses) == 8
    assert all(math.isfinite(x) for x in losses), losses
    assert sum(losses[-2:]) < 0.8 * sum(losses[:2]), f"loss did not fall: {losses}"


def test_resume_matches_uninterrupted_run_step_for_step(run: dict[str, Any]) -> None:
    full = by_step(run["losses"])
    resumed = by_step(run["resumed_losses"])
    k = run["resume_step"]
    assert sorted(resumed) == [s for s in sorted(full) if s >= k], "the resumed run starts at the checkpoint's step"
    for step in sorted(resumed):
        assert resumed[step] == full[step], f"step {step}: resumed loss {resumed[step]} != {full[step]}"
    for step, entry in by_step(run["resumed_steps"]).items():
        assert entry["after"] == by_step(run["steps"])[step]["after"], f"weights after step {step} differ"
    assert run["resumed_final_params"] == run["final_params"]


@pytest.mark.skipif("16-mixed" not in PRECISIONS, reason="torch on this machine cannot compute fp16 on CPU")
def test_16_mixed_inf_gradients_skip_the_step_and_back_off(runs: TrainingRuns) -> None:
    run = runs.result("16-mixed")
    assert run["scaler_type"] == "GradScaler", "FSDP2 uses torch.amp.GradScaler"
    steps = by_step(run["steps"])
    scale_before = steps[INF_STEP - 1]["scale_after"]
    inf_step = steps[INF_STEP]
    # the inf was put into rank 1's shard only; rank 0's weights (recorded here) are unchanged all the same
    assert inf_step["before"] == inf_step["after"], "weights changed on a step with inf gradients"
    assert inf_step["scale_after"] == scale_before * 0.5, "the scale did not back off by backoff_factor"
    later = steps[INF_STEP + 1]
    assert later["before"] != later["after"], "training did not continue after the skipped step"
    losses = by_step(run["losses"])
    assert all(math.isfinite(losses[s]) for s in losses if s > INF_STEP)
    # scaler state through the checkpoint: written at step 4, after the back-off, and read back on resume
    saved = run["saved_plugin_state"]
    assert saved is not None, "the checkpoint holds no FSDPPrecision state"
    assert saved["scale"] == steps[run["resume_step"] - 1]["scale_after"]
    assert saved["scale"] < run["start_scale"], "the saved scale should reflect the back-off"
    assert run["resumed_start_scale"] == saved["scale"], "the resumed run did not restore the scaler's scale"


# -- every door, the default sharding, resume under another precision, overflow storms ---------------------------------
# ``_fsdp_doors.py`` runs as a script; Lightning's own launcher starts its second process (as for a user's train.py).
# Each scenario runs once per session; the tests read its JSON records (one per fit).
DOORS_SCRIPT = Path(__file__).with_name("_fsdp_doors.py")


class DoorRuns:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._records: dict[str, dict[str, dict[str, Any]]] = {}

    def __call__(self, scenario: str) -> dict[str, dict[str, Any]]:
        if scenario not in self._records:
            import json
            import os
            import subprocess
            import sys

            out = self.root / scenario
            out.mkdir(parents=True, exist_ok=True)
            env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
            cmd = [sys.executable, str(DOORS_SCRIPT), scenario, str(out)]
            proc = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True, timeout=300)
            if proc.returncode != 0 or not (out / "result.json").exists():
                raise AssertionError(
                    f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
                )
            records = json.loads((out / "result.json").read_text())
            self._records[scenario] = {r["label"]: r for r in records}
        return self._records[scenario]


@pytest.fixture(scope="session")
def doors(tmp_path_factory: pytest.TempPathFactory) -> DoorRuns:
    return DoorRuns(Path(tmp_path_factory.mktemp("fsdp_doors")))


def _trained(record: dict[str, Any]) -> None:
    assert "error" not in record, record.get("error")
    losses = record["losses"]
    assert all(math.isfinite(x) for x in losses), losses
    assert sum(losses[-2:]) < sum(losses[:2]), f"{record['label']}: loss did not fall: {losses}"


DTYPE = {
    "32-true": "float32",
    "16-true": "float16",
    "bf16-true": "bfloat16",
    "16-mixed": "float16",
    "bf16-mixed": "bfloat16",
}


@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true"])
def test_front_page_line_in_two_processes_shards_without_configure_model(doors: DoorRuns, precision: str) -> None:
    """``precision_base.Trainer(precision_plugin="fsdp:<p>", devices=2)``: FSDP2Strategy, default policy."""
    run = doors("bare2")[f"bare-{precision}"]
    _trained(run)
    assert (run["strategy"], run["world_size"]) == ("FSDP2Strategy", 2)
    # the default blocks (the Sequential's two Block children), each other direct child, then the root
    assert run["units"] == ["<root>", "blocks", "blocks.0", "blocks.1", "embed", "head"]
    assert run["all_dtensor"], "every parameter is sharded"
    assert run["param_dtypes"] == ["torch.float32"]
    assert run["compute"] == [f"torch.{DTYPE[precision]}"]
    assert run["reduce_dtypes"] == ["torch.float32"]


@pytest.mark.parametrize("precision", ["32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"])
def test_front_page_line_in_one_process(doors: DoorRuns, precision: str) -> None:
    """``precision_base.Trainer(precision_plugin="fsdp:<p>")`` with no devices: one process, FSDP2 on CPU."""
    run = doors("bare1")[f"one-process-{precision}"]
    _trained(run)
    assert (run["strategy"], run["world_size"]) == ("FSDP2Strategy", 1)
    assert run["all_dtensor"]
    assert run["compute"] == [f"torch.{DTYPE[precision]}"]
    stored = "float32" if precision.endswith("mixed") else DTYPE[precision]
    assert run["param_dtypes"] == [f"torch.{stored}"]
    lower = [w for w in run["warnings"] if "enables computation in lower precision" in w]
    if precision in ("16-true", "bf16-true"):
        assert lower == [
            f"FSDP with `{precision}` enables computation in lower precision. " + lower[0].split(". ", 1)[1]
        ]
    else:
        assert lower == []


@pytest.mark.parametrize(
    ("scenario", "label", "expected"),
    [("bare1", f"one-process-{p}", DTYPE[p]) for p in DTYPE]
    + [
        ("bare2", "bare-bf16-mixed", "bfloat16"),
        ("bare2", "lightning-plain-16-mixed-options", "float16"),
        ("bare2", "pytorch_lightning-bf16-mixed", "bfloat16"),
    ],
)
def test_lightnings_throughput_monitor_sees_the_compute_dtype(
    doors: DoorRuns, scenario: str, label: str, expected: str
) -> None:
    """Lightning's real ThroughputMonitor asks FLOPs for the compute dtype (Lightning reads reduce_dtype, fp32 here)."""
    assert doors(scenario)[label]["throughput_dtype"] == [f"torch.{expected}"]


def test_plain_lightning_trainer_with_model_parallel_strategy_and_plugin_options(doors: DoorRuns) -> None:
    """lightning.Trainer(plugins=[FSDPPrecision("16-mixed", init_scale=1024, growth_factor=4, growth_interval=2,
    reduce_dtype="bf16")], strategy=ModelParallelStrategy(2, 1)): every option acts in a real run."""
    run = doors("bare2")["lightning-plain-16-mixed-options"]
    _trained(run)
    assert (run["strategy"], run["world_size"]) == ("ModelParallelStrategy", 2)
    assert run["units"] == ["<root>", "blocks.0", "blocks.1"], "the user's configure_model decides the units"
    assert run["reduce_dtypes"] == ["torch.bfloat16"], "reduce_dtype='bf16'"
    assert (run["scaler"], run["start_scale"]) == ("GradScaler", 1024.0)
    assert run["scales"] == [1024.0, 4096.0, 4096.0, 16384.0, 16384.0], "x4 after every 2 clean steps"


def test_plain_lightning_trainer_with_the_users_scaler(doors: DoorRuns) -> None:
    """FSDPPrecision("16-mixed", scaler=GradScaler("cpu", init_scale=2**24, backoff_factor=0.125)): the user's scaler
    is the one that skips the overflowing first steps and backs off by its own factor."""
    run = doors("bare2")["lightning-plain-16-mixed-user-scaler"]
    assert "error" not in run, run.get("error")
    assert run["scaler_is_users"]
    assert run["scales"][0] == 2.0**21, "the first step overflowed at 2**24 and backed off by 0.125"
    assert all(math.isfinite(x) for x in run["losses"])
    assert run["param_sums"][-1] != run["param_sums"][0], "once the scale fits, steps are taken"


def test_pytorch_lightning_trainer_with_its_model_parallel_strategy(doors: DoorRuns) -> None:
    run = doors("bare2")["pytorch_lightning-bf16-mixed"]
    _trained(run)
    assert run["strategy_module"] == "pytorch_lightning.strategies.model_parallel"
    assert run["plugin"].endswith("FSDPPrecision")
    assert run["world_size"] == 2
    assert run["compute"] == ["torch.bfloat16"]
    assert run["reduce_dtypes"] == ["torch.float32"]


def test_front_page_line_through_the_pytorch_lightning_door(doors: DoorRuns) -> None:
    """``precision_base.pytorch_lightning.Trainer(precision_plugin="fsdp:bf16-mixed", devices=2)``: the same
    FSDP2Strategy and default sharding, built for ``pytorch_lightning``."""
    run = doors("bare2")["pytorch_lightning-bare-bf16-mixed"]
    _trained(run)
    assert (run["strategy"], run["world_size"]) == ("FSDP2Strategy", 2)
    assert run["strategy_module"].startswith("precision_base.namespaces.pytorch_lightning.")
    assert run["units"] == ["<root>", "blocks", "blocks.0", "blocks.1", "embed", "head"]
    assert run["compute"] == ["torch.bfloat16"]
    assert run["throughput_dtype"] == ["torch.bfloat16"]


def test_16_mixed_overflow_storm_warns_then_stops(doors: DoorRuns) -> None:
    run = doors("bare2")["overflow-storm"]
    assert run["error"].startswith(
        "OverflowStormError: fsdp:16-mixed: 4 optimizer steps in a row were skipped because the gradients held inf "
        "or NaN at every loss scale tried"
    )
    assert "training stopped" in run["error"]
    assert len(run["losses"]) == 4
    assert any("2 optimizer steps in a row were skipped" in w for w in run["warnings"]), run["warnings"]


def test_bf16_mixed_finite_check_skips_non_finite_steps_then_stops(doors: DoorRuns) -> None:
    run = doors("bare2")["finite-check-bf16-mixed"]
    assert run["error"] == (
        "OverflowStormError: fsdp:bf16-mixed: 3 optimizer steps in a row were skipped because the gradients held inf "
        "or NaN, so training stopped: the model no longer learns. Check the loss and the weights for inf/NaN, lower "
        "the learning rate. (max_skipped_steps=3; None never stops.)"
    )
    sums = run["param_sums"]
    assert len(sums) == 2, "the third skipped step raised before its batch ended"
    assert all(math.isfinite(s) for s in sums)
    assert sums[0] == sums[1], "a skipped step left the weights unchanged"


RESUME_WARNINGS = {
    "resume-1-bf16-mixed": "resuming a checkpoint written under precision '16-mixed' with precision 'bf16-mixed': "
    "the 16-mixed loss scaler state is dropped: bf16-mixed does not scale the loss; compute runs in bfloat16 instead "
    "of float16 from the next step on (parameters and optimizer state are restored as saved).",
    "resume-2-16-mixed": "resuming a checkpoint written under precision 'bf16-mixed' with precision '16-mixed': the "
    "16-mixed loss scaler starts fresh at scale 65536.0: bf16-mixed did not scale the loss; compute runs in float16 "
    "instead of bfloat16 from the next step on (parameters and optimizer state are restored as saved).",
    "resume-3-32-true": "resuming a checkpoint written under precision '16-mixed' with precision '32-true': the "
    "16-mixed loss scaler state is dropped: 32-true does not scale the loss; compute runs in float32 instead of "
    "float16 from the next step on (parameters and optimizer state are restored as saved).",
}


@pytest.mark.parametrize("label", list(RESUME_WARNINGS))
def test_resume_under_another_precision_says_what_changed(doors: DoorRuns, label: str) -> None:
    runs = doors("resume")
    run = runs[label]
    assert "error" not in run, run.get("error")
    assert RESUME_WARNINGS[label] in run["warnings"]
    assert run["start_step"] == int(label.split("-")[1]) * 2, "resumed at the checkpoint's step"
    assert all(math.isfinite(x) for x in run["losses"])
    assert run["compute"] == [f"torch.{DTYPE[label.split('-', 2)[2]]}"]
    if label == "resume-2-16-mixed":
        assert run["start_scale"] == 65536.0


def test_checkpoints_move_between_ours_and_lightnings_builtin_both_ways(doors: DoorRuns) -> None:
    """Ours (32-true) -> Lightning's FSDPPrecision("32-true") -> ours: the precision key we add is ignored by
    Lightning's class, and a checkpoint without it resumes with ours silently (same precision)."""
    runs = doors("resume")
    builtin, back = runs["resume-4-builtin-32-true"], runs["resume-5-32-true"]
    for run, start in ((builtin, 8), (back, 10)):
        assert "error" not in run, run.get("error")
        assert run["start_step"] == start
        assert all(math.isfinite(x) for x in run["losses"])
        assert not [w for w in run["warnings"] if "resuming a checkpoint" in w]
    assert builtin["plugin"] == "lightning.pytorch.plugins.precision.fsdp.FSDPPrecision"
    assert back["plugin"] == "precision_fsdp.plugin.FSDPPrecision"


def test_resume_with_another_parameter_dtype_is_refused(doors: DoorRuns) -> None:
    run = doors("resume")["resume-6-bf16-true"]
    assert run["error"] == (
        "PrecisionChangeError: cannot resume a checkpoint written under precision '32-true' with precision "
        "'bf16-true': its sharded parameters and optimizer state are float32, the model's are bfloat16. Resume "
        "under '32-true' (or another precision that stores parameters in float32), or load only the weights into a "
        "new run."
    )
    assert run["losses"] == [], "refused before any step"
