"""The Trainer front door: precision_plugin= by name or instance, its checks, and real Trainer.fit runs."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pl = pytest.importorskip("lightning.pytorch")
torch = pytest.importorskip("torch")

from lightning.pytorch.plugins.precision import MixedPrecision, Precision  # noqa: E402

from precision_base import Trainer, TrainerConfigurationError, UnknownBackendError  # noqa: E402
from precision_testsupport.models import QUIET, TinyRegressor  # noqa: E402
from precision_testsupport.wheels import build_wheels  # noqa: E402

DUMMY_PROJECT = Path(__file__).parent / "fixtures" / "dummy_plugin"


def test_signature_adds_only_a_keyword_only_precision_plugin() -> None:
    params = inspect.signature(Trainer.__init__).parameters
    assert params["precision_plugin"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["precision_plugin"].default is None
    assert issubclass(Trainer, pl.Trainer)


def test_without_precision_plugin_it_is_lightnings_trainer() -> None:
    ours = Trainer(accelerator="cpu", devices=1, precision="bf16-mixed", max_steps=3, **QUIET)
    theirs = pl.Trainer(accelerator="cpu", devices=1, precision="bf16-mixed", max_steps=3, **QUIET)
    assert type(ours.precision_plugin) is type(theirs.precision_plugin)
    assert ours.precision_plugin.precision == theirs.precision_plugin.precision == "bf16-mixed"
    assert type(ours.strategy) is type(theirs.strategy)
    assert ours.max_steps == theirs.max_steps == 3


def test_name_is_resolved_into_the_trainers_plugin(dummy_registered: type) -> None:
    trainer = Trainer(precision_plugin="dummy:bf16", accelerator="cpu", devices=1, max_steps=7, **QUIET)
    assert isinstance(trainer.precision_plugin, dummy_registered)
    assert trainer.precision_plugin.precision == "bf16-mixed"
    assert trainer.max_steps == 7


def test_instance_is_accepted_as_is(dummy_registered: type) -> None:
    plugin = dummy_registered("bf16-true")
    assert Trainer(precision_plugin=plugin, accelerator="cpu", devices=1, **QUIET).precision_plugin is plugin
    plain = Precision()
    assert Trainer(precision_plugin=plain, accelerator="cpu", devices=1, **QUIET).precision_plugin is plain


def test_precision_together_with_precision_plugin_is_refused(dummy_registered: type) -> None:
    with pytest.raises(TrainerConfigurationError) as info:
        Trainer(precision_plugin="dummy:bf16-mixed", precision="16-mixed", accelerator="cpu", **QUIET)
    message = str(info.value)
    assert message == (  # Lightning's own words first, naming what the user passed (not plugins=, never given)
        "Received both `precision=16-mixed` and `precision_plugin='dummy:bf16-mixed'`. Choose one. (They disagree: "
        "the plugin 'dummy:bf16-mixed' runs 'bf16-mixed', not '16-mixed'; remove precision= (the plugin sets the "
        "precision), or pass precision_plugin='dummy:16-mixed' if 16-mixed is what you want.)"
    )


@pytest.mark.parametrize(
    ("precision", "where", "shown"),
    [
        ("bf16-mixed", "precision_plugin", None),
        ("bf16", "precision_plugin", None),  # Lightning's alias of the same precision
        ("bf16-mixed", "plugins", None),
        ("32", "precision_plugin", "`precision_plugin='dummy:bf16-mixed'`"),
        ("16-mixed", "plugins", "`plugins='dummy:bf16-mixed'`"),
        ("16-mixed", "plugins-list", "`'dummy:bf16-mixed' in plugins=`"),
    ],
)
def test_precision_next_to_a_plugin_is_accepted_when_they_agree(
    dummy_registered: type, precision: str, where: str, shown: str | None
) -> None:
    """Issue 21: the same precision given twice is one answer; differing ones name what the user passed."""
    name = "dummy:bf16-mixed"
    given = {"precision_plugin": {"precision_plugin": name}, "plugins": {"plugins": name}}.get(
        where, {"plugins": [name]}
    )
    if shown is None:
        trainer = Trainer(precision=precision, accelerator="cpu", devices=1, **given, **QUIET)
        assert isinstance(trainer.precision_plugin, dummy_registered)
        assert trainer.precision_plugin.precision == "bf16-mixed"
        return
    with pytest.raises(TrainerConfigurationError) as info:
        Trainer(precision=precision, accelerator="cpu", devices=1, **given, **QUIET)
    assert f"and {shown}. Choose one. (They disagree:" in str(info.value)
    assert "plugins=DummyPrecision" not in str(info.value)


@pytest.mark.parametrize("as_list", [True, False])
def test_precision_plugin_in_plugins_as_well_is_refused(dummy_registered: type, as_list: bool) -> None:
    other = MixedPrecision("bf16-mixed", device="cpu")
    with pytest.raises(TrainerConfigurationError) as info:
        Trainer(precision_plugin="dummy:32", plugins=[other] if as_list else other, accelerator="cpu", **QUIET)
    assert str(info.value).startswith(
        "Received multiple values for Precision flags in `plugins`. Expected one value for each type at most. "
        "(precision_plugin='dummy:32' and the precision plugin MixedPrecision in plugins= are two.)"
    )


def test_other_plugins_are_kept(dummy_registered: type) -> None:
    from lightning.pytorch.plugins import TorchCheckpointIO

    io = TorchCheckpointIO()
    trainer = Trainer(precision_plugin="dummy:32", plugins=[io], accelerator="cpu", devices=1, **QUIET)
    assert trainer.strategy.checkpoint_io is io
    assert isinstance(trainer.precision_plugin, dummy_registered)


def test_incompatible_strategy_is_refused_in_init(dummy_registered: type) -> None:
    with pytest.raises(
        TrainerConfigurationError,
        match=r"precision plugin 'dummy:bf16-mixed' cannot work with strategy='fsdp'\. The dummy plugin cannot shard",
    ):
        Trainer(precision_plugin="dummy:bf16-mixed", strategy="fsdp", accelerator="cpu", **QUIET)


def test_wrong_type_and_unknown_name_fail_in_init() -> None:
    with pytest.raises(TypeError, match="precision_plugin must be a name"):
        Trainer(precision_plugin=3.5, accelerator="cpu", **QUIET)  # type: ignore[arg-type]
    with pytest.raises(UnknownBackendError, match="no precision plugin is registered for backend 'nosuch'"):
        Trainer(precision_plugin="nosuch:bf16-mixed", accelerator="cpu", **QUIET)


@pytest.mark.parametrize(
    ("precision", "compute"),
    [("32-true", torch.float32), ("bf16-true", torch.bfloat16), ("bf16-mixed", torch.bfloat16)],
)
def test_fit_runs_through_the_plugin(dummy_registered: type, precision: str, compute: torch.dtype) -> None:
    model = TinyRegressor()
    trainer = Trainer(precision_plugin=f"dummy:{precision}", accelerator="cpu", devices=1, max_steps=8, **QUIET)
    trainer.fit(model)
    assert trainer.global_step == 8
    assert set(model.compute_dtypes) == {compute}
    assert trainer.precision_plugin.device_type == "cpu"
    assert model.losses[-1] < model.losses[0]


@pytest.mark.slow
def test_fit_with_a_really_installed_plugin(tmp_path: Path) -> None:
    """The dummy's wheel is installed into a fresh target directory; only real entry-point metadata finds it."""
    (wheel,) = build_wheels([DUMMY_PROJECT], tmp_path)
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)], check=True
    )
    script = textwrap.dedent("""
        import json
        import precision_base
        from precision_testsupport.models import QUIET, TinyRegressor
        entry = precision_base.get_entry("dummy")
        model = TinyRegressor()
        trainer = precision_base.Trainer(precision_plugin="dummy:bf16-mixed", accelerator="cpu", devices=1,
                                         max_steps=6, **QUIET)
        trainer.fit(model)
        print(json.dumps({"dist": entry.distribution, "version": entry.version,
                          "plugin": type(trainer.precision_plugin).__module__,
                          "dtypes": sorted({str(d) for d in model.compute_dtypes}),
                          "fell": model.losses[-1] < model.losses[0]}))
    """)
    env = {**os.environ, "PYTHONPATH": str(target)}  # the pip --target folder, as its users put it on the path
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {
        "dist": "precision-dummy",
        "version": "0.3.1",
        "plugin": "precision_dummy.plugin",
        "dtypes": ["torch.bfloat16"],
        "fell": True,
    }


# -- names in plugins= (issue: a string there is a plugin name, not Lightning's per-character error) ----------------
@pytest.mark.parametrize("plugins", ["dummy:bf16-mixed", ["dummy:bf16"], ("dummy:bf16-mixed",)])
def test_a_name_in_plugins_is_the_precision_plugin(dummy_registered: type, plugins: object) -> None:
    trainer = Trainer(plugins=plugins, accelerator="cpu", devices=1, **QUIET)
    assert isinstance(trainer.precision_plugin, dummy_registered)
    assert trainer.precision_plugin.precision == "bf16-mixed"


def test_a_name_in_plugins_keeps_the_other_plugins(dummy_registered: type) -> None:
    from lightning.pytorch.plugins import TorchCheckpointIO

    io = TorchCheckpointIO()
    trainer = Trainer(plugins=[io, "dummy:32"], accelerator="cpu", devices=1, **QUIET)
    assert trainer.strategy.checkpoint_io is io
    assert trainer.precision_plugin.precision == "32-true"


def test_a_name_in_plugins_meets_the_strategy_check(dummy_registered: type) -> None:
    with pytest.raises(TrainerConfigurationError, match="strategy='fsdp'"):
        Trainer(plugins="dummy:bf16-mixed", strategy="fsdp", accelerator="cpu", **QUIET)


@pytest.mark.parametrize("text", ["fsdp", "bf16-mixed", "dummy:fp8"])
def test_a_string_in_plugins_that_is_no_name_gets_a_clear_error(dummy_registered: type, text: str) -> None:
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    with pytest.raises(TrainerConfigurationError) as info:
        Trainer(plugins=[text], accelerator="cpu", **QUIET)
    assert isinstance(info.value, MisconfigurationException)  # what Lightning raises for a bad plugin
    message = str(info.value)
    assert message.startswith(
        f"Found invalid type for plugin {text}. Expected one of: Precision, CheckpointIO, ClusterEnvironment, or "
        f"LayerSync. A string in plugins= is read as a precision plugin name, and {text!r} is not one: "
    )
    assert '"<backend>:<precision>"' in message


class _HostileRepr:
    def __repr__(self) -> str:
        raise RuntimeError("a __repr__ that raises")


def test_front_door_messages_stay_bounded_and_never_run_the_inputs_repr(dummy_registered: type) -> None:
    huge = "x" * 1_000_000
    with pytest.raises(TrainerConfigurationError) as info:
        Trainer(plugins=[huge], accelerator="cpu", **QUIET)
    assert len(str(info.value)) < 2_000
    assert "(1000000 characters)" in str(info.value)
    with pytest.raises(TypeError, match="precision_plugin must be a name") as type_info:
        Trainer(precision_plugin=_HostileRepr(), accelerator="cpu", **QUIET)  # type: ignore[arg-type]
    assert "an object of type _HostileRepr" in str(type_info.value)


def test_two_precision_plugins_by_name_are_refused(dummy_registered: type) -> None:
    with pytest.raises(TrainerConfigurationError, match=r"^Received multiple values for Precision flags"):
        Trainer(plugins=["dummy:32", "dummy:bf16-mixed"], accelerator="cpu", **QUIET)
    with pytest.raises(TrainerConfigurationError, match=r"^Received multiple values for Precision flags"):
        Trainer(precision_plugin="dummy:32", plugins="dummy:bf16-mixed", accelerator="cpu", **QUIET)


def test_an_unknown_backend_in_plugins_says_what_is_installed(dummy_registered: type) -> None:
    with pytest.raises(UnknownBackendError, match="no precision plugin is registered for backend 'nosuch'"):
        Trainer(plugins="nosuch:bf16-mixed", accelerator="cpu", **QUIET)


# -- PL_TRAINER_* environment defaults, as Lightning's Trainer reads them -------------------------------------------
ENV = {
    "PL_TRAINER_MAX_EPOCHS": "3",
    "PL_TRAINER_MAX_STEPS": "11",
    "PL_TRAINER_LIMIT_TRAIN_BATCHES": "0.5",
    "PL_TRAINER_LOG_EVERY_N_STEPS": "7",
    "PL_TRAINER_ACCELERATOR": "cpu",
    "PL_TRAINER_DETERMINISTIC": "True",
    "PL_TRAINER_ENABLE_PROGRESS_BAR": "False",
    "PL_TRAINER_DEFAULT_ROOT_DIR": "some/dir",
}


def _observed(trainer: pl.Trainer) -> dict[str, object]:
    return {
        "max_epochs": trainer.max_epochs,
        "max_steps": trainer.max_steps,
        "limit_train_batches": trainer.limit_train_batches,
        "log_every_n_steps": trainer.log_every_n_steps,
        "accelerator": type(trainer.accelerator).__name__,
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "progress_bar": trainer.progress_bar_callback is not None,
        "root": trainer.default_root_dir,
    }


def test_environment_defaults_are_read_as_lightning_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    try:
        theirs = _observed(pl.Trainer(devices=1, logger=False))
        ours = _observed(Trainer(devices=1, logger=False))
    finally:
        torch.use_deterministic_algorithms(False)
    assert ours == theirs
    assert ours["max_epochs"] == 3
    assert ours["root"].endswith("some/dir")
    assert ours["progress_bar"] is False


def test_explicit_arguments_beat_the_environment(monkeypatch: pytest.MonkeyPatch, dummy_registered: type) -> None:
    monkeypatch.setenv("PL_TRAINER_MAX_EPOCHS", "3")
    monkeypatch.setenv("PL_TRAINER_PRECISION_PLUGIN", "dummy:bf16-mixed")
    trainer = Trainer(precision_plugin="dummy:32", max_epochs=5, accelerator="cpu", devices=1, **QUIET)
    assert trainer.max_epochs == 5
    assert trainer.precision_plugin.precision == "32-true"


def test_precision_plugin_from_the_environment(monkeypatch: pytest.MonkeyPatch, dummy_registered: type) -> None:
    monkeypatch.setenv("PL_TRAINER_PRECISION_PLUGIN", "dummy:bf16-true")
    trainer = Trainer(accelerator="cpu", devices=1, **QUIET)
    assert isinstance(trainer.precision_plugin, dummy_registered)
    assert trainer.precision_plugin.precision == "bf16-true"


def test_environment_strategy_reaches_the_plugins_check(
    monkeypatch: pytest.MonkeyPatch, dummy_registered: type
) -> None:
    monkeypatch.setenv("PL_TRAINER_STRATEGY", "fsdp")
    with pytest.raises(TrainerConfigurationError, match="strategy='fsdp'"):
        Trainer(precision_plugin="dummy:bf16-mixed", accelerator="cpu", **QUIET)


def test_environment_precision_with_a_plugin_is_refused(
    monkeypatch: pytest.MonkeyPatch, dummy_registered: type
) -> None:
    monkeypatch.setenv("PL_TRAINER_PRECISION", "16-mixed")
    monkeypatch.setenv("PL_TRAINER_PRECISION_PLUGIN", "dummy:bf16-mixed")
    with pytest.raises(TrainerConfigurationError, match=r"^Received both `precision=16-mixed`"):
        Trainer(accelerator="cpu", **QUIET)


def test_signature_lightning_reads_the_environment_from() -> None:
    ours = inspect.signature(Trainer)
    assert list(ours.parameters) == list(inspect.signature(pl.Trainer).parameters)
    assert "precision_plugin" in inspect.signature(Trainer.__init__).parameters  # what LightningCLI reads


def test_fit_with_environment_defaults(monkeypatch: pytest.MonkeyPatch, dummy_registered: type) -> None:
    monkeypatch.setenv("PL_TRAINER_MAX_EPOCHS", "3")
    monkeypatch.setenv("PL_TRAINER_LIMIT_TRAIN_BATCHES", "2")
    monkeypatch.setenv("PL_TRAINER_PRECISION_PLUGIN", "dummy:bf16-mixed")
    model = TinyRegressor()
    trainer = Trainer(accelerator="cpu", devices=1, **QUIET)
    trainer.fit(model)
    assert trainer.current_epoch == 3
    assert trainer.global_step == 6
    assert set(model.compute_dtypes) == {torch.bfloat16}


def test_a_name_in_plugins_from_the_environment(monkeypatch: pytest.MonkeyPatch, dummy_registered: type) -> None:
    monkeypatch.setenv("PL_TRAINER_PLUGINS", "dummy:bf16-true")
    trainer = Trainer(accelerator="cpu", devices=1, **QUIET)
    assert isinstance(trainer.precision_plugin, dummy_registered)
    assert trainer.precision_plugin.precision == "bf16-true"
