"""A release rehearsal against a real package index (issue 21): what `docs/releasing.md` promises, done for real.

Every package is built (sdist and wheel, as the release builds them), a local `pypiserver` is started on 127.0.0.1
and `twine upload` puts the files there. Then, in fresh virtual environments whose only source for our packages is
that index (torch, Lightning and DeepSpeed come from the indexes pip is configured with; torch pinned to the build
this interpreter runs, so a CPU machine never pulls a CUDA build):

* `pip install precision-fsdp` brings precision-base and no DeepSpeed; `precision-plugins list` is ok; a
  1-process `Trainer(precision_plugin="fsdp:bf16-mixed").fit` runs by name;
* `pip install precision-deepspeed` brings DeepSpeed and no precision-fsdp; `list` is ok; a 1-process fit by name
  (`deepspeed:bf16-mixed`, DeepSpeed on its CPU accelerator) runs;
* a precision-fsdp whose `precision-base>=` floor is newer than the index's precision-base fails to install with
  pip's resolver error, so a plugin released before its precision-base never installs half-way.

Slow (three venvs with torch, a few minutes on a small machine): marked ``slow``, meant for the nightly job. The
tools (pypiserver, twine) go into their own venv, from the configured index. Nothing is mocked.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import venv
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/, for the tree's versions

pytestmark = [pytest.mark.slow, pytest.mark.nightly]  # nightly: builds, uploads and installs every wheel

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("precision-base", "precision-fsdp", "precision-deepspeed")
TORCH = f"torch=={metadata.version('torch')}"  # the exact build this interpreter runs (e.g. 2.13.0+cpu)

FIT = r"""
import sys, torch
from torch import nn
import lightning as L
import precision_base

class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(32, 32)
    def training_step(self, batch, _):
        return self.layer(batch).float().pow(2).mean()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)
    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.randn(8, 32), batch_size=4)

trainer = precision_base.Trainer(precision_plugin=sys.argv[1], accelerator="cpu", devices=1, max_steps=2,
                                 logger=False, enable_checkpointing=False, enable_progress_bar=False)
trainer.fit(Model())
print("FIT", trainer.precision_plugin.spec, type(trainer.strategy).__name__, trainer.global_step)
"""


def _env() -> dict[str, str]:
    env = {**os.environ, "DS_BUILD_OPS": "0", "DS_SKIP_CUDA_CHECK": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    return env


def _run(cmd: list[str], timeout: float = 900, check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(), **kw)  # type: ignore[call-overload]
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc  # type: ignore[no-any-return]


def _configured_extra_indexes() -> list[str]:
    """The extra indexes pip is configured with here (config files and PIP_EXTRA_INDEX_URL): an
    ``--extra-index-url`` on the command line replaces them, so the rehearsal passes them on together with its own."""
    found = _run([sys.executable, "-m", "pip", "config", "list"]).stdout
    urls: list[str] = []
    for line in found.splitlines():
        key, _, value = line.partition("=")
        if key.endswith("extra-index-url"):
            urls += value.strip().strip("'\"").split()
    return list(dict.fromkeys(urls))


def _venv(root: Path) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(root)
    return root / "bin" / "python"


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with pypiserver and twine (from the configured index)."""
    python = _venv(tmp_path_factory.mktemp("tools"))
    _run([str(python), "-m", "pip", "install", "-q", "pypiserver", "twine"])
    return python.parent


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    for package in PACKAGES:
        _run(
            [
                sys.executable,
                "-m",
                "build",
                "--no-isolation",
                "-q",
                "--outdir",
                str(out),
                str(REPO / "packages" / package),
            ]
        )
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == 6, names  # a wheel and an sdist each
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def index(tools: Path, dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A pypiserver on 127.0.0.1 holding what ``twine upload`` put there; yields its simple-index URL."""
    storage = tmp_path_factory.mktemp("index")
    port = _free_port()
    # -a . -P .: no authentication for upload (a throwaway local index); --disable-fallback: nothing from PyPI
    server = subprocess.Popen(
        [str(tools / "pypi-server"), "run", "-i", "127.0.0.1", "-p", str(port), "-a", ".", "-P", ".",
         "--disable-fallback", str(storage)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=2).close()
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise AssertionError(f"pypiserver did not start: {server.stderr.read() if server.stderr else ''}")
        files = sorted(map(str, dist.iterdir()))
        _run([str(tools / "twine"), "check", "--strict", *files])
        upload = _run([str(tools / "twine"), "upload", "--repository-url", f"{url}/", "-u", "-", "-p", "-", *files])
        assert upload.returncode == 0
        listed = urllib.request.urlopen(f"{url}/simple/", timeout=10).read().decode()
        assert all(p in listed for p in PACKAGES), listed
        yield f"{url}/simple/"
    finally:
        server.terminate()
        server.wait(timeout=30)


def _pip_install(python: Path, index: str, *requirements: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    indexes = [a for url in [index, *_configured_extra_indexes()] for a in ("--extra-index-url", url)]
    return _run([str(python), "-m", "pip", "install", *indexes, *requirements], check=check)


def _installed(python: Path) -> dict[str, str]:
    listing = _run([str(python), "-m", "pip", "list", "--format", "json"]).stdout
    return {d["name"].lower(): d["version"] for d in json.loads(listing)}


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Path]:
    python = _venv(tmp_path / "venv")
    yield python
    shutil.rmtree(tmp_path / "venv", ignore_errors=True)  # about 1 GB with torch


def _check_backend_venv(python: Path, index: str, dist_name: str, backend: str, absent: set[str]) -> str:
    done = _pip_install(python, index, dist_name, TORCH)
    port = index.split(":")[2].split("/")[0]
    ours = re.findall(rf"127\.0\.0\.1:{port}/\S*?(precision_\w+)-", done.stdout)
    assert {"precision_base", dist_name.replace("-", "_")} <= set(ours), done.stdout  # from the rehearsal's index
    installed = _installed(python)
    from tools.packages import find

    assert installed["precision-base"] == find("precision-base").version()
    assert installed[dist_name] == find(dist_name).version()
    assert not installed.keys() & absent, sorted(installed)
    listing = _run([str(python.parent / "precision-plugins"), "list"], cwd="/")
    assert re.search(rf"^{backend}\s+{dist_name}\s+0\.\d+\.\d+\s+.*\s+ok\s", listing.stdout, re.M), listing.stdout
    if backend == "fsdp":  # no torchao here: the fp8 answer gives the index's install line (no direct_url.json)
        assert 'install it with: pip install "precision-fsdp[fp8]"' in listing.stdout
    fit = _run([str(python), "-c", FIT, f"{backend}:bf16-mixed"], cwd="/", timeout=1200)
    return next(x for x in fit.stdout.splitlines() if x.startswith("FIT "))


def test_fsdp_from_the_index_installs_alone_lists_ok_and_fits_by_name(fresh: Path, index: str) -> None:
    line = _check_backend_venv(fresh, index, "precision-fsdp", "fsdp", {"deepspeed", "precision-deepspeed"})
    assert line.startswith("FIT fsdp:bf16-mixed ")
    assert line.endswith(" 2")


def test_deepspeed_from_the_index_installs_alone_lists_ok_and_fits_by_name(fresh: Path, index: str) -> None:
    line = _check_backend_venv(fresh, index, "precision-deepspeed", "deepspeed", {"precision-fsdp", "torchao"})
    assert line.startswith("FIT deepspeed:bf16-mixed ")
    assert line.endswith(" 2")


def test_a_plugin_needing_a_newer_precision_base_than_the_index_has_fails_in_pips_resolver(
    tmp_path: Path, tools: Path, index: str
) -> None:
    """precision-fsdp 0.1.1 with `precision-base>=0.2,<1`, uploaded to an index whose precision-base is 0.1.0:
    pip refuses to install it (no half-installed plugin that fails at import)."""
    copy = tmp_path / "precision-fsdp"
    shutil.copytree(REPO / "packages" / "precision-fsdp", copy, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    about = copy / "src" / "precision_fsdp" / "__about__.py"
    about.write_text('__version__ = "0.1.1"\n')
    pyproject = copy / "pyproject.toml"
    text = pyproject.read_text()
    assert '"precision-base>=0.1,<1"' in text
    pyproject.write_text(text.replace('"precision-base>=0.1,<1"', '"precision-base>=0.2,<1"'))
    _run(
        [sys.executable, "-m", "build", "--no-isolation", "-q", "--wheel", "--outdir", str(tmp_path / "out"), str(copy)]
    )
    wheel = next((tmp_path / "out").glob("*.whl"))
    _run([str(tools / "twine"), "upload", "--repository-url", index.removesuffix("simple/"), "-u", "-", "-p", "-",
          str(wheel)])  # fmt: skip
    python = _venv(tmp_path / "venv")
    done = _pip_install(python, index, "precision-fsdp==0.1.1", TORCH, check=False)
    assert done.returncode != 0
    assert "precision-base<1,>=0.2" in done.stderr, done.stderr[-2000:]
    assert "No matching distribution found for precision-base" in done.stderr, done.stderr[-2000:]
    assert "precision-fsdp" not in _installed(python)
