"""Drafters, one module each behind one interface (``base.Drafter``), made from a spec string.

Specs: ``none``, ``model:PATH_OR_PRESET``, ``ngram:FILE[,option=value...]``, ``self:K``,
``head:LANG``, ``self:K@LANG``, ``int8:[K@]LANG``, ``distilled:DIR``, ``auto[:ROUTER]`` and
``adaptive:SPEC`` (any of them at the gamma each step's measurements say pays most).
``self:K`` drafts with the target's first K layers; ``head:LANG`` with all its layers under an
output head restricted to LANG's corpus tokens; ``self:K@LANG`` combines the two (``head`` /
``self:K@`` take ``lang=...``); ``int8:[K@]LANG`` is either on weight-only int8 copies of the
target's weights. This module is the factory: it imports the drafter modules, never the
reverse. A new drafter is a module with a factory ``(arg, target, context) -> Drafter`` and one
line in ``_FACTORIES`` (or, from outside the package, ``register("prefix")`` on the factory).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from babelspec.drafters.base import Draft, Drafter, NoDrafter, check_vocabulary
from babelspec.errors import UserError

if TYPE_CHECKING:
    from babelspec.target import Target

# factory(argument after the colon, the target, context such as lang=..., task=...) -> Drafter
DrafterFactory = Callable[[str, "Target", dict[str, Any]], Drafter]


def _none(arg: str, target: Target, context: dict[str, Any]) -> Drafter:
    return NoDrafter()


# The drafter modules are imported when their spec is first used, so `import babelspec` stays light.
def _model(arg: str, target: Target, context: dict[str, Any]) -> Drafter:
    from babelspec.drafters.model import model_drafter

    return model_drafter(arg, target, context)


def _ngram(arg: str, target: Target, context: dict[str, Any]) -> Drafter:
    from babelspec.drafters.ngram_drafter import ngram_drafter

    return ngram_drafter(arg, target, context)


def _self(arg: str, target: Target, context: dict[str, Any]) -> Drafter:
    """``self:K`` (full output head) or ``self:K@LANG`` (head restricted to LANG's tokens)."""
    from babelspec.drafters.selfdraft import SelfDrafter, parse_layers, truncated_model

    layers, at, lang = arg.partition("@")
    k = parse_layers(layers, target)
    if at:
        from babelspec.drafters.vocabhead import restricted_drafter

        return restricted_drafter(target, k=k, lang=lang or context.get("lang"), name=f"self:{arg}")
    return SelfDrafter(truncated_model(target.model, k), target, k, name=f"self:{k}")


def _head(arg: str, target: Target, context: dict[str, Any]) -> Drafter:
    from babelspec.drafters.vocabhead import restricted_drafter

    lang = arg or context.get("lang")
    return restricted_drafter(target, k=None, lang=lang, name=f"head:{lang}" if lang else "head")


def _quantized_head(kind: str) -> DrafterFactory:
    """The factory of ``KIND:LANG`` (all layers) or ``KIND:K@LANG`` under the restricted head of
    LANG (``KIND`` / ``KIND:K@`` take ``lang=...``): ``int8``, weight-only int8 copies of the
    layers; ``gguf``, the layers on a gguf target's own products over the file's quantized blocks
    (shared: no copy, the file's bytes a step)."""

    def factory(arg: str, target: Target, context: dict[str, Any]) -> Drafter:
        from babelspec.drafters.selfdraft import num_layers, parse_layers
        from babelspec.drafters.vocabhead import restricted_drafter

        layers, at, lang = arg.rpartition("@") if "@" in arg else ("", "", arg)
        k = parse_layers(layers, target) if at else None
        lang = lang or context.get("lang")
        if k == num_layers(target.model):
            k = None
        name = f"{kind}:{layers}@{lang}" if k else f"{kind}:{lang}" if lang else kind
        return restricted_drafter(target, k=k, lang=lang, name=name, quantize=kind)

    return factory


def _adaptive(arg: str, target: Target, context: dict[str, Any]) -> Drafter:
    from babelspec.drafters.adaptive import adaptive_drafter

    return adaptive_drafter(arg, target, context, make=make_drafter)


def _distilled(arg: str, target: Target, context: dict[str, Any]) -> Drafter:
    from babelspec.drafters.distilled import distilled_drafter

    return distilled_drafter(arg, target, context)


def _auto(arg: str, target: Target, context: dict[str, Any]) -> Drafter:
    from babelspec.drafters.auto import auto_drafter

    return auto_drafter(arg, target, context, make=make_drafter)


_FACTORIES: dict[str, DrafterFactory] = {
    "none": _none, "model": _model, "ngram": _ngram, "self": _self, "head": _head,
    "int8": _quantized_head("int8"), "gguf": _quantized_head("gguf"), "distilled": _distilled, "auto": _auto, "adaptive": _adaptive,
}  # fmt: skip


def register(prefix: str) -> Callable[[DrafterFactory], DrafterFactory]:
    """Decorator adding a factory for ``prefix:...`` specs (a drafter defined outside babelspec)."""

    def wrap(factory: DrafterFactory) -> DrafterFactory:
        _FACTORIES[prefix] = factory
        return factory

    return wrap


def check_spec(spec: str) -> None:
    """Refuse a spec no factory takes (its form only: a command line checks it before loading a
    target, the factory checks the rest)."""
    if spec.partition(":")[0] not in _FACTORIES:
        known = ", ".join(sorted(f"{p}:..." if p != "none" else p for p in _FACTORIES))
        raise UserError(f"unknown drafter spec {spec!r}; known forms: {known}")


def make_drafter(spec: str, target: Target, **context: Any) -> Drafter:
    """Build the drafter a spec names, e.g. ``make_drafter("ngram:amh.ngram", target)``."""
    check_spec(spec)
    prefix, _, arg = spec.partition(":")
    drafter = _FACTORIES[prefix](arg, target, context)
    check_vocabulary(drafter, target, name=spec)
    return drafter


__all__ = ["Draft", "Drafter", "NoDrafter", "check_spec", "make_drafter", "register"]
