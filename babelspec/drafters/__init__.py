"""Drafters, one module each behind one interface (``base.Drafter``), made from a spec string.

Specs: ``none``, ``model:PATH_OR_PRESET`` and the forms registered by the other modules
(``ngram:FILE``, ``self:K``, ``distilled:DIR``, ``auto``). ``self:K`` drafts with the target's
first K layers; ``head:LANG`` with all its layers under an output head restricted to LANG's
corpus tokens; ``self:K@LANG`` combines the two (``head`` / ``self:K@`` take ``lang=...``).
A new drafter is a module with a factory decorated by ``@register("prefix")`` and one
import line below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from babelspec.drafters.base import Draft, Drafter, NoDrafter

if TYPE_CHECKING:
    from babelspec.target import Target

# factory(argument after the colon, the target, context such as lang=..., task=...) -> Drafter
DrafterFactory = Callable[[str, "Target", dict[str, Any]], Drafter]
_FACTORIES: dict[str, DrafterFactory] = {}


def register(prefix: str) -> Callable[[DrafterFactory], DrafterFactory]:
    def wrap(factory: DrafterFactory) -> DrafterFactory:
        _FACTORIES[prefix] = factory
        return factory

    return wrap


@register("none")
def _none(arg: str, target: "Target", context: dict[str, Any]) -> Drafter:
    return NoDrafter()


def make_drafter(spec: str, target: "Target", **context: Any) -> Drafter:
    """Build the drafter a spec names, e.g. ``make_drafter("ngram:amh.ngram", target)``."""
    _load_builtin_drafters()
    prefix, _, arg = spec.partition(":")
    if prefix not in _FACTORIES:
        known = ", ".join(sorted(f"{p}:..." if p != "none" else p for p in _FACTORIES))
        raise ValueError(f"unknown drafter spec {spec!r}; known forms: {known}")
    drafter = _FACTORIES[prefix](arg, target, context)
    if drafter.vocab_size is not None and drafter.vocab_size != target.vocab_size:
        raise ValueError(
            f"drafter {spec!r} has a vocabulary of {drafter.vocab_size} tokens but the target has "
            f"{target.vocab_size}; a drafter must use the target's tokenizer"
        )
    return drafter


def _load_builtin_drafters() -> None:
    # Imported lazily so that `import babelspec` stays light. One line per drafter module.
    import babelspec.drafters.model  # noqa: F401
    import babelspec.drafters.auto  # noqa: F401
    import babelspec.drafters.selfdraft  # noqa: F401
    import babelspec.drafters.vocabhead  # noqa: F401
    import babelspec.drafters.ngram  # noqa: F401
    import babelspec.drafters.distilled  # noqa: F401


__all__ = ["Draft", "Drafter", "NoDrafter", "make_drafter", "register"]
