"""Property-based test: every input to ``parse_spec``/``resolve`` resolves or raises our error, with a bounded message.

The number of examples per property comes from ``PRECISION_PLUGINS_FUZZ_EXAMPLES`` (default 200; the nightly
matrix sets 100000).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precision_base import PluginInfo, PrecisionPluginError, parse_spec
from precision_base.errors import MAX_SHOWN
from precision_base.registry import Registry
from precision_base.spec import ALIASES, PRECISIONS, PluginSpec, is_extra_precision_name

EXAMPLES = int(os.environ.get("PRECISION_PLUGINS_FUZZ_EXAMPLES", "200"))
FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
MESSAGE_LIMIT = 1200  # the grammar text plus at most a few shortened copies of the input
HOSTILE = ("strip", "__eq__", "__hash__", "__repr__", "__str__", "split", "count", "lower", "__len__", "__iter__")


class Boom(Exception):
    """What the hostile methods raise: it must never escape."""


def _raise(*args: object, **kwargs: object) -> Any:
    raise Boom("hostile method ran")


def hostile_str(text: str, methods: list[str]) -> str:
    cls = type("HostileStr", (str,), {name: _raise for name in methods})
    return cls(text)  # type: ignore[no-any-return]


def hostile_int(value: int, methods: list[str]) -> int:
    cls = type("HostileInt", (int,), {name: _raise for name in methods if name in ("__eq__", "__hash__", "__repr__")})
    return cls(value)  # type: ignore[no-any-return]


class HostileObject:
    def __repr__(self) -> str:
        raise Boom("repr")

    def __str__(self) -> str:
        raise Boom("str")

    def __eq__(self, other: object) -> bool:
        raise Boom("eq")

    __hash__ = object.__hash__  # Hypothesis itself hashes examples; hostile hashing is covered by HostileStr


class LyingClass:
    """Claims to be a str through ``__class__``; isinstance() believes it."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return str


texts = st.one_of(
    st.text(),
    st.text(min_size=1000, max_size=5000),
    st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=5), st.integers(1, 300_000)),
    st.builds(
        lambda b, p: f"{b}:{p}",
        st.one_of(st.sampled_from(["lite", "fsdp", "LITE", "x" * 70, ""]), st.text(max_size=80)),
        st.one_of(st.sampled_from([*PRECISIONS, *[str(a) for a in ALIASES], "BF16-MIXED"]), st.text(max_size=80)),
    ),
)
methods = st.lists(st.sampled_from(HOSTILE), min_size=1, unique=True)
inputs = st.one_of(
    texts,
    st.builds(hostile_str, texts, methods),
    st.integers(),
    st.builds(lambda k: 10**k, st.integers(0, 6000)),
    st.builds(lambda k: -(10**k), st.integers(4000, 6000)),
    st.builds(hostile_int, st.sampled_from([16, 32, 64, 10**5000]), methods),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.binary(),
    st.lists(st.text(max_size=3), max_size=3),
    st.builds(HostileObject),
    st.builds(LyingClass),
    st.just(object()),
    st.just(str),
)


def _check_error(exc: BaseException) -> None:
    assert isinstance(exc, PrecisionPluginError), f"{type(exc).__name__} escaped: {exc!s:.200}"
    assert isinstance(exc, (ValueError, TypeError, LookupError)), type(exc).__mro__
    message = str(exc)
    assert 0 < len(message) <= MESSAGE_LIMIT, f"message of {len(message)} characters: {message[:300]}"


@FUZZ
@given(inputs)
def test_parse_spec_parses_or_raises_our_error(value: object) -> None:
    try:
        parsed = parse_spec(value)
    except BaseException as exc:  # every exception is inspected below
        _check_error(exc)
    else:
        assert isinstance(parsed, PluginSpec)
        assert parsed.precision in PRECISIONS or is_extra_precision_name(parsed.precision)
        assert len(parsed.backend) <= 64


LITE_INFO = PluginInfo(backend="lite", precisions=("32-true", "bf16-mixed"), plugin_class="fuzz.never:Imported")


class LitePrecision:
    """A stand-in class so resolve() completes without torch (the registry only calls it)."""

    def __init__(self, precision: str) -> None:
        self.precision = precision


@pytest.fixture(scope="module")
def registry() -> Registry:
    from precision_base import PrecisionPlugin

    cls = type("LitePrecision", (PrecisionPlugin,), {"backend": "lite", "precisions": LITE_INFO.precisions})
    cls.__init__ = LitePrecision.__init__  # type: ignore[misc]
    reg = Registry(group="precision_base.tests.fuzz_no_such_group")
    reg.register(LITE_INFO, plugin_class=cls)
    return reg


@FUZZ
@given(value=inputs)
def test_resolve_resolves_or_raises_our_error(registry: Registry, value: object) -> None:
    try:
        plugin = registry.resolve(value)
    except BaseException as exc:  # every exception is inspected below
        _check_error(exc)
    else:
        assert plugin.precision in LITE_INFO.precisions


def test_a_megabyte_input_makes_a_short_message() -> None:
    with pytest.raises(PrecisionPluginError) as raised:
        parse_spec("x" * 1_000_000)
    assert len(str(raised.value)) < 500
    assert "... (1000000 characters)" in str(raised.value)
    assert str(raised.value).count("x") <= MAX_SHOWN


def test_huge_int_is_our_type_error() -> None:
    with pytest.raises(TypeError) as raised:
        parse_spec(10**5000)
    assert isinstance(raised.value, PrecisionPluginError)
    assert "an int of about 5001 digits" in str(raised.value)


def test_hostile_str_subclass_is_read_as_its_plain_text() -> None:
    assert parse_spec(hostile_str(" lite:bf16 ", list(HOSTILE))) == PluginSpec("lite", "bf16-mixed")
