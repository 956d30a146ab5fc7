"""The "<backend>:<precision>" grammar: canonical names, aliases, whitespace, and every way to get it wrong."""

from __future__ import annotations

import pytest

from precision_base import InvalidSpecError, PluginSpec, SpecTypeError, normalize_precision, parse_spec
from precision_base.errors import PrecisionPluginError
from precision_base.spec import PRECISIONS

GRAMMAR_WORDS = '"<backend>:<precision>"'


@pytest.mark.parametrize("precision", PRECISIONS)
def test_canonical_precisions_parse(precision: str) -> None:
    assert parse_spec(f"fsdp:{precision}") == PluginSpec("fsdp", precision)


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [("32", "32-true"), ("16", "16-mixed"), ("bf16", "bf16-mixed")],
)
def test_lightning_string_aliases_normalise_like_lightning(alias: str, canonical: str) -> None:
    assert parse_spec(f"deepspeed:{alias}").precision == canonical
    assert normalize_precision(alias) == canonical


@pytest.mark.parametrize(("alias", "canonical"), [(32, "32-true"), (16, "16-mixed")])
def test_lightning_int_aliases_normalise_like_lightning(alias: int, canonical: str) -> None:
    assert normalize_precision(alias) == canonical


def test_aliases_agree_with_lightnings_own_conversion() -> None:
    lightning_connector = pytest.importorskip("lightning.fabric.connector")
    for alias in ("32", "16", "bf16", 32, 16):
        assert normalize_precision(alias) == lightning_connector._convert_precision_to_unified_args(alias)


@pytest.mark.parametrize("text", ["  fsdp:bf16-mixed  ", "fsdp : bf16-mixed", "\tfsdp:\tbf16-mixed\n", " fsdp: bf16"])
def test_surrounding_whitespace_is_tolerated(text: str) -> None:
    assert parse_spec(text) == PluginSpec("fsdp", "bf16-mixed")


def test_spec_str_round_trips() -> None:
    assert str(parse_spec("my_backend-2:16")) == "my_backend-2:16-mixed"


# (input, error type, words the message must contain)
MALFORMED = [
    ("", InvalidSpecError, ["empty", GRAMMAR_WORDS]),
    ("   ", InvalidSpecError, ["empty", GRAMMAR_WORDS]),
    ("fsdp", InvalidSpecError, ["'fsdp'", "no ':'", GRAMMAR_WORDS]),
    ("bf16-mixed", InvalidSpecError, ["no ':'", GRAMMAR_WORDS]),
    ("fsdp-bf16-mixed", InvalidSpecError, ["no ':'"]),
    ("fsdp;bf16-mixed", InvalidSpecError, ["no ':'"]),
    ("fsdp:", InvalidSpecError, ["no precision after ':'", GRAMMAR_WORDS]),
    (":bf16-mixed", InvalidSpecError, ["no backend before ':'", GRAMMAR_WORDS]),
    (":", InvalidSpecError, ["no backend", GRAMMAR_WORDS]),
    ("fsdp::bf16-mixed", InvalidSpecError, ["2 ':' separators", "expected one"]),
    ("fsdp:bf16-mixed:extra", InvalidSpecError, ["2 ':' separators"]),
    ("a:b:c:d", InvalidSpecError, ["3 ':' separators"]),
    ("fsdp:fp16", InvalidSpecError, ["unknown precision 'fp16'", "16-mixed"]),
    ("fsdp:64", InvalidSpecError, ["unknown precision '64'", "32-true"]),
    ("fsdp:64-true", InvalidSpecError, ["unknown precision '64-true'"]),
    ("fsdp:mixed", InvalidSpecError, ["unknown precision 'mixed'"]),
    ("fsdp:bf16mixed", InvalidSpecError, ["did you mean 'bf16-mixed'"]),
    ("fsdp:BF16-MIXED", InvalidSpecError, ["lowercase", "'bf16-mixed'"]),
    ("fsdp:Bf16", InvalidSpecError, ["lowercase", "'bf16-mixed'"]),
    ("FSDP:bf16-mixed", InvalidSpecError, ["invalid backend 'FSDP'", "lowercase", "did you mean 'fsdp'"]),
    ("Deepspeed:16", InvalidSpecError, ["invalid backend", "'deepspeed'"]),
    ("fs dp:bf16-mixed", InvalidSpecError, ["invalid backend 'fs dp'"]),
    ("1fsdp:bf16-mixed", InvalidSpecError, ["invalid backend '1fsdp'", "[a-z][a-z0-9_-]*"]),
    ("fsdp.v2:bf16-mixed", InvalidSpecError, ["invalid backend 'fsdp.v2'"]),
    ("fsdp/bf16-mixed", InvalidSpecError, ["no ':'"]),
    ("fsdp:bf16 mixed", InvalidSpecError, ["unknown precision 'bf16 mixed'"]),
    ("fsdp:transformer_engine", InvalidSpecError, ["unknown precision 'transformer_engine'"]),
    ("fsdp:fp8-true", InvalidSpecError, ["unknown precision 'fp8-true'"]),  # extra names never end in -true/-mixed
]

NOT_STRINGS = [None, 16, 16.0, b"fsdp:bf16-mixed", ["fsdp", "bf16-mixed"], ("fsdp", "bf16-mixed"), {"fsdp": 1}, True]


@pytest.mark.parametrize(("text", "error", "words"), MALFORMED, ids=[repr(m[0]) for m in MALFORMED])
def test_malformed_names_are_rejected_with_the_grammar(text: str, error: type, words: list[str]) -> None:
    with pytest.raises(error) as info:
        parse_spec(text)
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} missing from: {message}"
    assert isinstance(info.value, ValueError), "bad names must stay catchable as ValueError"
    assert isinstance(info.value, PrecisionPluginError)


@pytest.mark.parametrize("value", NOT_STRINGS, ids=[type(v).__name__ + repr(v)[:12] for v in NOT_STRINGS])
def test_non_strings_are_a_type_error_that_shows_the_grammar(value: object) -> None:
    with pytest.raises(SpecTypeError) as info:
        parse_spec(value)
    assert "must be a string" in str(info.value)
    assert GRAMMAR_WORDS in str(info.value)
    assert isinstance(info.value, TypeError)


def test_malformed_table_is_large_enough() -> None:
    assert len(MALFORMED) + len(NOT_STRINGS) >= 25


@pytest.mark.parametrize("value", [True, 16.0, None, "64", 64, 8, "half"])
def test_normalize_precision_rejects_non_precisions(value: object) -> None:
    with pytest.raises((InvalidSpecError, SpecTypeError)) as info:
        normalize_precision(value)
    assert "precision" in str(info.value)
