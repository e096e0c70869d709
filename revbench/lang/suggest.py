"""Close-name suggestions for error messages: "did you mean `sin`?".

A typo (``sinn(x)``, ``xx``) should be answered with the name the user most
likely meant, not with advice that only fits a name that really is missing
("define the reversible function `sinn`").  The helpers here pick close names
with :func:`difflib.get_close_matches`; callers say which names are candidates
(the variables of a function, the pure functions of the rule table, the
reversible functions in a namespace).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from revbench.rules import functions as fn_rules

#: how similar a name must be to be suggested (difflib's ratio)
CUTOFF = 0.6


def close_names(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """The candidates closest to ``name`` (most similar first), ``name`` itself excluded."""
    pool = sorted({c for c in candidates if isinstance(c, str) and c != name and c})
    return difflib.get_close_matches(name, pool, n=n, cutoff=CUTOFF)


def did_you_mean(name: str, candidates: Iterable[str], prefix: str = "") -> str:
    """``" Did you mean `x`?"`` (or ``" Did you mean `x` or `y`?"``), or ``""``;
    ``prefix`` is written before each suggestion (``"np."``)."""
    hits = close_names(name, candidates, n=2)
    if not hits:
        return ""
    return " Did you mean " + " or ".join(f"`{prefix}{h}`" for h in hits) + "?"


def function_spellings() -> set[str]:
    """Every way to spell a pure function of the rule table (§3) and the registered
    ones: ``sin``, ``np.sin``, ``math.sin``, ``numpy.sin``, ``my_registered``."""
    names = set(fn_rules.SPELLINGS)
    names.update(n for n, r in fn_rules.USER_FUNCTIONS.items() if not r.hidden)
    names.add("len")
    return names


def close_function(name: str) -> str | None:
    """The pure-function spelling closest to ``name`` (``sinn`` -> ``sin``,
    ``np.sinn`` -> ``np.sin``), or ``None``."""
    spellings = function_spellings()
    if "." not in name:  # a bare name is compared with bare spellings only
        spellings = {s for s in spellings if "." not in s}
    hits = close_names(name, spellings, n=1)
    return hits[0] if hits else None


def reversible_names(namespace: Mapping[str, Any]) -> list[str]:
    """The names of the reversible functions in ``namespace``."""
    out = []
    for k, v in list(namespace.items()):
        if isinstance(k, str) and type(v).__name__ == "ReversibleFunction":
            out.append(k)
    return out


def close_reversible(name: str, namespace: Mapping[str, Any]) -> str | None:
    """The reversible function of ``namespace`` whose name is closest to ``name``."""
    hits = close_names(name, reversible_names(namespace), n=1)
    return hits[0] if hits else None
