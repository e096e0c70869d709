"""``routine`` and ``inverted``: names the language gives meaning to.

Inside a reversible function ``with routine:`` / ``~routine`` and ``with
inverted:`` are syntax, read by the parser.  Importing these markers
(``from revbench import routine, inverted``) makes that code lint-clean and
gives a clear error if such code is run as plain Python by mistake.
"""

from __future__ import annotations


class _Marker:
    def __init__(self, name: str, meaning: str):
        self._name = name
        self._meaning = meaning

    def __repr__(self) -> str:
        return f"revbench.{self._name}"

    def _misuse(self, *args, **kwargs):
        raise RuntimeError(
            f"`{self._name}` ({self._meaning}) only has a meaning inside a function decorated "
            "with @reversible; this code is running as plain Python")

    __enter__ = __exit__ = __invert__ = __call__ = _misuse


routine = _Marker("routine", "`with routine:` computes a block that `~routine` undoes later")
inverted = _Marker("inverted", "`with inverted:` runs a block backwards")
checkpointed = _Marker(
    "checkpointed", "`for t in checkpointed(range(n), Revolve(snapshots=c), new=..., old=...):` "
    "runs a loop under a checkpointing strategy")
