"""Issue 21: the install line for a missing optional extra follows where the distribution came from (PEP 610's
direct_url.json), and near-miss precision names get a suggestion."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import pytest

from precision_base import InvalidSpecError, PluginInfo
from precision_base.registry.statuses import install_command
from precision_base.spec import parse_spec


class _Dist:
    """Only what install_command reads of an importlib.metadata.Distribution: its direct_url.json."""

    def __init__(self, direct_url: Optional[dict[str, object]]) -> None:
        self._text = None if direct_url is None else json.dumps(direct_url)

    def read_text(self, name: str) -> Optional[str]:
        return self._text if name == "direct_url.json" else None


@pytest.mark.parametrize(
    ("direct_url", "expected"),
    [
        (None, 'pip install "precision-fsdp[fp8]"'),  # from an index
        (
            {"url": "file://{root}/packages/precision-fsdp", "dir_info": {}},
            'pip install "./packages/precision-fsdp[fp8]"',
        ),
        (
            {"url": "file://{root}/packages/precision-fsdp", "dir_info": {"editable": True}},
            'pip install -e "./packages/precision-fsdp[fp8]"',
        ),
        ({"url": "file:///elsewhere/precision-fsdp", "dir_info": {}}, 'pip install "/elsewhere/precision-fsdp[fp8]"'),
        (
            {"url": "file:///w/precision_fsdp-0.1.0-py3-none-any.whl", "archive_info": {}},
            'pip install "/w/precision_fsdp-0.1.0-py3-none-any.whl[fp8]"',
        ),
        (
            {"url": "https://github.com/o/r", "vcs_info": {"vcs": "git", "commit_id": "abc"}},
            'pip install "precision-fsdp[fp8] @ git+https://github.com/o/r@abc"',
        ),
    ],
)
def test_install_line_follows_where_the_distribution_came_from(
    direct_url: Optional[dict[str, object]], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    if direct_url is not None:
        direct_url = {**direct_url, "url": str(direct_url["url"]).replace("{root}", str(tmp_path))}
    assert install_command("precision-fsdp", "fp8", _Dist(direct_url)) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("fsdp:fp16", "(did you mean '16-mixed' (float16 autocast over float32 weights; '16-true' for float16"),
        ("fsdp:FP32", "(did you mean '32-true'?)"),
        ("fsdp:bfloat16", "(did you mean 'bf16-mixed' (bfloat16 autocast"),
        (
            "fsdp:fp8",
            "(an extra precision is named '<format>-<recipe>'; 'precision-plugins list' shows each backend's)",
        ),
        ("fsdp:torch.float16", "(did you mean '16-mixed'"),
    ],
)
def test_near_miss_precision_names_get_a_suggestion(name: str, hint: str) -> None:
    with pytest.raises(InvalidSpecError) as info:
        parse_spec(name)
    assert f"unknown precision '{name.split(':')[1]}' {hint}" in str(info.value)


@pytest.mark.parametrize(
    ("typed", "hint"),
    [
        ("fp4", "(did you mean one of the extra precisions this backend offers: 'fp4-block' or 'fp4-tile'?)"),
        ("nvfp4", "(did you mean 'nvfp4-scaled', an extra precision this backend offers?)"),
        ("fq4", "(did you mean one of the extra precisions this backend offers: 'fp4-block' or 'fp4-tile'?)"),
        ("float4", "(did you mean one of the extra precisions this backend offers: 'fp4-block' or 'fp4-tile'?)"),
        ("int8", "(an extra precision is named '<format>-<recipe>'; 'precision-plugins list' shows each backend's)"),
        ("bf15-mixed", "(did you mean 'bf16-mixed'?)"),
    ],
)
def test_a_bare_format_is_answered_with_the_backends_own_extra_precisions(typed: str, hint: str) -> None:
    """No recipe is named in precision-base: the hint lists what the backend declares (here a made-up fp4 family)."""
    declared = {"tpu": ("fp4-block", "fp4-tile", "nvfp4-scaled")}
    with pytest.raises(InvalidSpecError) as info:
        parse_spec(f"tpu:{typed}", extras_of=lambda backend: declared.get(backend, ()))
    assert str(info.value).startswith(f"in 'tpu:{typed}': unknown precision '{typed}' {hint}; valid precisions are")
    with pytest.raises(InvalidSpecError) as other:  # a backend without extra precisions: no such names offered
        parse_spec(f"other:{typed}", extras_of=lambda backend: declared.get(backend, ()))
    assert "this backend offers" not in str(other.value)


def test_precision_extras_must_name_a_declared_extra_precision() -> None:
    from precision_base import InvalidPluginInfoError

    with pytest.raises(InvalidPluginInfoError, match=r"precision_extras names 'fp8-x', which is not one of"):
        PluginInfo(backend="b", precisions=("32-true",), plugin_class="m:C", precision_extras=(("fp8-x", "fp8"),))
    with pytest.raises(InvalidPluginInfoError, match=r"'not an extra!' is not the name of an extra \(PEP 685"):
        PluginInfo(
            backend="b",
            precisions=("32-true",),
            plugin_class="m:C",
            extra_precisions=(("fp8-x", "bf16-mixed"),),
            precision_extras=(("fp8-x", "not an extra!"),),
        )
