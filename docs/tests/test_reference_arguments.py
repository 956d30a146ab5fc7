"""Each class page of the API reference lists the class's constructor arguments (tools/docgen/class_arguments.py).

The Fabric ``FSDPPrecision`` and ``DeepSpeedPrecision`` and the ``*Impl`` classes share their constructor with the
Trainer class, which documents the arguments; the Griffe extension mkdocs.yml loads gives each of them that ``Args:``
section, so the page of each lists every argument instead of "the same arguments as ...". The packages are loaded
here as mkdocstrings loads them (one loader per package, the extension, Google docstrings), without building the
site; the browser test (test_site.py) checks the built pages.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from tools.docgen import class_arguments
from tools.docgen.reference import sources

ROOT = Path(__file__).resolve().parents[2]
EXTENSION = "tools/docgen/class_arguments.py:ConstructorArguments"  # as mkdocs.yml names it

# class -> the class that documents the arguments of the constructor it shares
SHARED = {
    "precision_fsdp.fabric.FSDPPrecision": "precision_fsdp.plugin.FSDPPrecision",
    "precision_fsdp.fabric.FabricFSDPPrecisionImpl": "precision_fsdp.plugin.FSDPPrecision",
    "precision_fsdp.implementation.FSDPPrecisionImpl": "precision_fsdp.plugin.FSDPPrecision",
    "precision_deepspeed.fabric.DeepSpeedPrecision": "precision_deepspeed.plugin.DeepSpeedPrecision",
    "precision_deepspeed.fabric.FabricDeepSpeedPrecisionImpl": "precision_deepspeed.plugin.DeepSpeedPrecision",
    "precision_deepspeed.implementation.DeepSpeedPrecisionImpl": "precision_deepspeed.plugin.DeepSpeedPrecision",
}


def _load(extensions: list[str]) -> Any:
    import griffe

    loaded = griffe.load_extensions(*[f"{ROOT / path}:{name}" for path, name in (e.split(":") for e in extensions)])
    collection = griffe.ModulesCollection()
    paths = [str(p) for p in sources().values()]
    for name in sources():
        loader = griffe.GriffeLoader(
            extensions=loaded,
            search_paths=paths,
            docstring_parser=griffe.Parser.google,
            docstring_options={"warn_missing_types": False},
            modules_collection=collection,
        )
        loader.load(name)
        loader.resolve_aliases(implicit=False, external=False)
    return collection


@pytest.fixture(scope="module")
def documented() -> Any:
    return _load([EXTENSION])


@pytest.fixture(scope="module")
def as_written() -> Any:
    return _load([])


def _parameters(cls: Any) -> list[str]:
    return [p.name for section in cls.docstring.parsed if section.kind.value == "parameters" for p in section.value]


def _constructor(cls: Any) -> list[str]:
    init = cls.all_members["__init__"]
    init = init.final_target if init.is_alias else init
    return [p.name for p in init.parameters if p.name not in ("self", "cls")]


def test_the_args_section_is_read_from_a_google_docstring() -> None:
    text = "Summary.\n\nArgs:\n    precision: the precision\n        (more).\n    scaler (GradScaler): a scaler.\n"
    text += "    **kwargs: the rest.\n\nRaises:\n    ValueError: bad.\n"
    section = class_arguments.args_section(text)
    assert section.splitlines()[0] == "Args:"
    assert "Raises" not in section
    assert "ValueError" not in section
    assert class_arguments.documented(section) == {"precision", "scaler", "kwargs"}
    assert class_arguments.args_section("Summary only.") == ""


def test_mkdocs_yml_loads_the_extension() -> None:
    import yaml

    class Lenient(yaml.SafeLoader):
        pass

    Lenient.add_multi_constructor("", lambda loader, suffix, node: None)  # mkdocs.yml's !!python/name tags
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Lenient)
    plugin = next(p["mkdocstrings"] for p in config["plugins"] if isinstance(p, dict) and "mkdocstrings" in p)
    assert EXTENSION in plugin["handlers"]["python"]["options"]["extensions"]
    assert (ROOT / EXTENSION.split(":")[0]).is_file()


@pytest.mark.parametrize("path", sorted(SHARED))
def test_a_class_sharing_a_documented_constructor_lists_every_argument(
    path: str, documented: Any, as_written: Any
) -> None:
    cls = documented[path]
    assert _parameters(as_written[path]) == [], f"{path} documents its arguments itself now: drop it from SHARED"
    arguments = _constructor(cls)
    assert "precision" in arguments
    assert _parameters(cls) == _parameters(documented[SHARED[path]])
    assert set(arguments) <= set(_parameters(cls))


@pytest.mark.parametrize("path", sorted(set(SHARED.values())))
def test_the_class_that_documents_the_arguments_is_left_as_written(path: str, documented: Any, as_written: Any) -> None:
    assert documented[path].docstring.value == as_written[path].docstring.value
    assert set(_constructor(documented[path])) <= set(_parameters(documented[path]))


def test_the_filled_docstrings_parse_without_warnings(
    documented: Any, as_written: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """What mkdocs --strict would fail on: a documented name the signature does not have, a section that does not
    parse. Every class whose docstring the extension changed (the ones above, and any other class sharing a
    documented constructor, such as a public class built on a documented ``*Impl``) is parsed afresh with Griffe's
    warnings captured."""
    import griffe

    filled = [
        cls
        for name in sources()
        for cls in class_arguments.classes(documented[name])
        if cls.docstring is not None and cls.docstring.value != as_written[cls.path].docstring.value
    ]
    assert set(SHARED) <= {cls.path for cls in filled}
    with caplog.at_level(logging.WARNING):
        for cls in filled:
            griffe.parse_google(cls.docstring, warn_missing_types=False)
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("griffe")]
    assert warnings == []
