"""The ``"<backend>:<precision>"`` grammar: parsing, normalisation and the five precisions.

Precisions are Lightning's canonical names. Lightning's short aliases map the way Lightning maps them
(``"32"``/``32`` -> ``"32-true"``, ``"16"``/``16`` -> ``"16-mixed"``, ``"bf16"`` -> ``"bf16-mixed"``).
``64`` is a Lightning precision but not one any precision plugin here offers, so it is rejected.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Optional, Union

from precision_base.errors import InvalidSpecError, SpecTypeError, describe, shorten

PrecisionName = Literal["32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"]

PRECISIONS: Final[tuple[str, ...]] = ("32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed")
"""The five canonical precisions, in Lightning's spelling."""

ALIASES: Final[dict[Union[str, int], str]] = {
    "32": "32-true",
    32: "32-true",
    "16": "16-mixed",
    16: "16-mixed",
    "bf16": "bf16-mixed",
}
"""Lightning's short spellings and the canonical name each one stands for."""

MIXED_PRECISIONS: Final[tuple[str, ...]] = ("16-mixed", "bf16-mixed")
TRUE_PRECISIONS: Final[tuple[str, ...]] = ("32-true", "16-true", "bf16-true")

_BACKEND_RE: Final = re.compile(r"[a-z][a-z0-9_-]*\Z")
MAX_BACKEND_LENGTH: Final = 64
"""The longest backend name the grammar accepts."""

EXTRA_PRECISION_RE: Final = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9_]+)+\Z")
MAX_EXTRA_PRECISION_LENGTH: Final = 64
EXTRA_PRECISION_RULE: Final[str] = (
    "an extra precision (beyond Lightning's five) is named '<format>-<recipe>': lowercase letters, digits, '_' and "
    "'-', starting with a letter, at most 64 characters, not ending in '-true' or '-mixed' and not close to one of "
    "the five names; only plugins that declare it in PluginInfo.extra_precisions offer it"
)
"""The naming rule for a plugin's extra precisions (e.g. FP8 recipes); see
[`is_extra_precision_name`][precision_base.spec.is_extra_precision_name]."""


def is_extra_precision_name(text: object) -> bool:
    """Whether ``text`` follows [`EXTRA_PRECISION_RULE`][precision_base.spec.EXTRA_PRECISION_RULE] (it says nothing
    about which plugin offers it)."""
    if not isinstance(text, str) or len(text) > MAX_EXTRA_PRECISION_LENGTH or not EXTRA_PRECISION_RE.match(text):
        return False
    if text in PRECISIONS or text.endswith(("-true", "-mixed")):
        return False
    return not difflib.get_close_matches(text, PRECISIONS, n=1, cutoff=0.6)


GRAMMAR: Final[str] = (
    'expected "<backend>:<precision>", e.g. "fsdp:bf16-mixed", where <backend> is a lowercase plugin name '
    "([a-z][a-z0-9_-]*) and <precision> is one of " + ", ".join(PRECISIONS) + ' (or Lightning\'s aliases "32", '
    '"16", "bf16"), or an extra precision that backend declares, named "<format>-<recipe>"'
)


@dataclass(frozen=True)
class PluginSpec:
    """A parsed plugin name: which backend, at which canonical precision."""

    backend: str
    precision: str

    def __str__(self) -> str:
        return f"{self.backend}:{self.precision}"


_SUGGEST_LIMIT: Final = 64  # difflib is quadratic: no suggestions for longer input

NEAR_MISSES: Final[dict[str, str]] = {
    "fp16": "'16-mixed' (float16 autocast over float32 weights; '16-true' for float16 weights)",
    "float16": "'16-mixed' (float16 autocast over float32 weights; '16-true' for float16 weights)",
    "half": "'16-mixed' (float16 autocast over float32 weights; '16-true' for float16 weights)",
    "amp": "'16-mixed' or 'bf16-mixed' (autocast over float32 weights)",
    "mixed": "'16-mixed' or 'bf16-mixed' (autocast over float32 weights)",
    "bfloat16": "'bf16-mixed' (bfloat16 autocast over float32 weights; 'bf16-true' for bfloat16 weights)",
    "fp32": "'32-true'",
    "float32": "'32-true'",
    "full": "'32-true'",
}
"""Precision names from other tools (PyTorch dtypes, DeepSpeed and Accelerate spellings) and what to write instead."""


_FORMAT_RE: Final = re.compile(r"[a-z][a-z0-9]*\Z")  # a bare number format such as a user types alone


def _suggest_precision(text: str, extras: Sequence[str] = ()) -> str:
    if len(text) > _SUGGEST_LIMIT:
        return ""
    lowered = text.lower()
    if lowered in PRECISIONS or lowered in ALIASES:
        return f" (precisions are lowercase: did you mean {ALIASES.get(lowered, lowered)!r}?)"
    near = NEAR_MISSES.get(lowered.replace("_", "").removeprefix("torch."))
    if near is not None:
        return f" (did you mean {near}?)"
    spelled = {lowered, lowered.replace("float", "fp", 1)}  # "float8" is how torch spells the format "fp8"
    formats = [name for name in extras if name.split("-")[0] in spelled] or [
        name for name in extras if difflib.get_close_matches(lowered, [name.split("-")[0]], cutoff=0.6)
    ]
    if formats:  # the format of an extra precision the backend declares, without its recipe
        if len(formats) == 1:
            return f" (did you mean {formats[0]!r}, an extra precision this backend offers?)"
        listed = ", ".join(map(repr, formats[:-1])) + f" or {formats[-1]!r}"
        return f" (did you mean one of the extra precisions this backend offers: {listed}?)"
    close = difflib.get_close_matches(lowered, PRECISIONS, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]!r}?)"
    if _FORMAT_RE.match(lowered):
        return " (an extra precision is named '<format>-<recipe>'; 'precision-plugins list' shows each backend's)"
    return ""


def _plain(value: object) -> Union[str, int, None]:
    """``value`` as a plain ``str`` or ``int`` (subclasses copied, so none of their methods run), else ``None``."""
    kind = type(value)
    if issubclass(kind, bool):
        return None
    if issubclass(kind, str):
        return str.__str__(value)
    if issubclass(kind, int):
        return int.__index__(value)  # type: ignore[arg-type]
    return None


def normalize_precision(value: object, *, extras: Sequence[str] = ()) -> str:
    """Return the canonical name for a precision or one of Lightning's aliases.

    ``extras`` are the extra precisions of the backend in question, if known: an unknown name close to one's
    format (``fp8`` for ``fp8-tensorwise``) is answered with those names.

    Raises:
        SpecTypeError: ``value`` is neither a string nor an int (``bool`` counts as neither).
        InvalidSpecError: ``value`` names no precision; the message lists the valid ones.
    """
    key = _plain(value)
    if key is None:
        raise SpecTypeError(
            f"precision must be a string such as 'bf16-mixed' (or Lightning's int alias 32 or 16), "
            f"got {describe(value)}"
        )
    if isinstance(key, str):
        key = key.strip()
        if key in PRECISIONS:
            return key
    if key in ALIASES:
        return ALIASES[key]
    hint = _suggest_precision(key, extras) if isinstance(key, str) else ""
    raise InvalidSpecError(
        f"unknown precision {describe(key)}{hint}; valid precisions are " + ", ".join(PRECISIONS) + " and the aliases "
        '"32", "16", "bf16", 32, 16'
    )


def parse_spec(spec: object, extras_of: Optional[Callable[[str], Sequence[str]]] = None) -> PluginSpec:
    """Parse ``"<backend>:<precision>"`` into a [`PluginSpec`][precision_base.spec.PluginSpec].

    Whitespace around the whole string and around either part is ignored. The precision is normalised with
    [`normalize_precision`][precision_base.spec.normalize_precision], or kept as written when it follows
    [`EXTRA_PRECISION_RULE`][precision_base.spec.EXTRA_PRECISION_RULE] (the registry then
    checks that the backend declares it). Every input either parses or raises one of the two errors below (both
    [`PrecisionPluginError`][precision_base.errors.PrecisionPluginError]), whose message repeats at most
    [`MAX_SHOWN`][precision_base.errors.MAX_SHOWN] characters of the input. A ``str`` subclass is read as the plain
    string it holds: none of its methods run.

    ``extras_of(backend)``, where given, names the backend's extra precisions for the hint of an unknown precision
    (the registry passes what the installed plugin declares).

    Raises:
        SpecTypeError: ``spec`` is not a string.
        InvalidSpecError: ``spec`` does not follow the grammar; the message shows the grammar.
    """
    plain = _plain(spec)
    if not isinstance(plain, str):
        raise SpecTypeError(
            f'a precision plugin name must be a string like "fsdp:bf16-mixed", got {describe(spec)}; {GRAMMAR}'
        )
    shown = shorten(plain)
    text = plain.strip()
    if not text:
        raise InvalidSpecError(f"empty precision plugin name; {GRAMMAR}")
    if text.count(":") != 1:
        what = "has no ':'" if ":" not in text else f"has {text.count(':')} ':' separators, expected one"
        raise InvalidSpecError(f"precision plugin name {shown} {what}; {GRAMMAR}")
    backend, precision = (part.strip() for part in text.split(":"))
    if not backend:
        raise InvalidSpecError(f"precision plugin name {shown} has no backend before ':'; {GRAMMAR}")
    if not precision:
        raise InvalidSpecError(f"precision plugin name {shown} has no precision after ':'; {GRAMMAR}")
    if not _BACKEND_RE.match(backend) or len(backend) > MAX_BACKEND_LENGTH:
        hint = ""
        if _BACKEND_RE.match(backend.lower()) and len(backend) <= MAX_BACKEND_LENGTH:
            hint = f" (backend names are lowercase: did you mean {backend.lower()!r}?)"
        elif len(backend) > MAX_BACKEND_LENGTH:
            hint = f" (backend names are at most {MAX_BACKEND_LENGTH} characters)"
        raise InvalidSpecError(f"invalid backend {shorten(backend)} in {shown}{hint}; {GRAMMAR}")
    if is_extra_precision_name(precision):
        return PluginSpec(backend=backend, precision=precision)
    try:
        canonical = normalize_precision(precision)
    except InvalidSpecError as exc:
        error = exc
        extras = extras_of(backend) if extras_of is not None else ()
        if extras:  # the same error, with the hint this backend's extra precisions give
            try:
                normalize_precision(precision, extras=extras)
            except InvalidSpecError as better:
                error = better
        # the precision error already lists the valid precisions; add the shape of the name, not the whole grammar
        raise InvalidSpecError(f'in {shown}: {error}; expected "<backend>:<precision>"') from None
    return PluginSpec(backend=backend, precision=canonical)
