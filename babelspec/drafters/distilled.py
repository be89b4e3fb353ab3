"""``distilled:DIR`` -- a drafter distilled with ``babelspec distill`` (see babelspec.distill).

The directory holds the trained student; ``self`` students are rebuilt on the target's own
(shared, frozen) embedding, so the target given here must be the one it was distilled from.
"""

from __future__ import annotations

from typing import Any

from babelspec.drafters.base import Drafter
from babelspec.errors import UserError


def distilled_drafter(arg: str, target: Any, context: dict[str, Any]) -> Drafter:
    from babelspec.drafters.artifact import load_distilled, read_metadata
    from babelspec.drafters.model import ModelDrafter

    if not arg:
        raise UserError("distilled:DIR needs the directory written by `babelspec distill -o DIR`")
    meta = read_metadata(arg)
    student = load_distilled(arg, target.model)
    student.model.to(target.device)
    return ModelDrafter(target.sibling(student.model), name=f"distilled:{meta.get('mode')}:{meta.get('lang')}")
