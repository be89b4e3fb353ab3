"""The real sets each language has, as source strings, and where the corpora folder is.

One table says, per language, which published sets a run or a distillation reads when a
corpora folder (the layout of FLORES-200 as published in SIB-200, NTREX-128, OLDI Seed,
FLoRes v1, Tatoeba) is at hand: ``test`` holds the translation test sentences, ``shots`` the
few-shot pairs of their prompts, ``train`` the English-aligned sentences task distillation
translates, ``monolingual`` the text n-grams are counted on and general distillation reads.
Never the test split anywhere else. The ``real`` and ``paper`` profiles spell the
same table out; ``babelspec distill`` takes it when no source is given.

Every other FLORES-200 language reads the same sets by its codes in the language table:
SIB-200's test split for prompts, its dev split for shots, and for monolingual text SIB-200's
train and dev splits, NTREX-128 and OLDI Seed where they hold the language (``generic_real_data``).

Stand-ins where FLORES-200 has no code of the paper's: ber = Kabyle (kab_Latn); zgh = Central
Atlas Tamazight in Tifinagh (tzm_Tfng) for FLORES-200 and Standard Moroccan Tamazight (zgh_Tfng)
for OLDI Seed; que = Ayacucho Quechua (quy_Latn); npi = nep/ne. chr and haw: no openly licensed
set holds them, so they have no entry and use the bundled dataset.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from babelspec.data.languages import get_language
from babelspec.errors import UserError

CORPORA_ENV = "BABELSPEC_CORPORA"


@dataclass(frozen=True)
class RealData:
    test: str = "sib200:sib200@test"
    shots: str = "sib200:sib200@dev"
    train: str = "sib200:sib200@train"
    monolingual: tuple[str, ...] = ("sib200:sib200@train",)


REAL_DATA: dict[str, RealData] = {
    "amh": RealData(monolingual=("sib200:sib200@train", "ntrex:ntrex", "text:hornmt/data/amh.txt")),
    "ber": RealData(monolingual=("sib200:sib200@train", "tatoeba-laser:tatoeba_laser")),
    "grn": RealData(monolingual=("oldi-seed:nllb_oldi_seed", "sib200:sib200@train")),
    "ibo": RealData(monolingual=("sib200:sib200@train", "ntrex:ntrex")),
    "npi": RealData(monolingual=("sib200:sib200@train", "ntrex:ntrex", "flores-v1:flores_v1@dev",
                                 "flores-v1:flores_v1@devtest")),
    "oci": RealData(monolingual=("sib200:sib200@train", "tatoeba-laser:tatoeba_laser")),
    "que": RealData(monolingual=("sib200:sib200@train",)),
    "yor": RealData(monolingual=("sib200:sib200@train", "ntrex:ntrex")),
    "zgh": RealData(monolingual=("oldi-seed:nllb_oldi_seed", "sib200:sib200@train")),
}


def user_corpora_dir() -> Path:
    """The user's own corpora folder: ``corpora`` in babelspec's user data directory (the
    platform's, beside the model cache's; e.g. ``~/.local/share/babelspec/corpora`` on Linux)."""
    return Path(platformdirs.user_data_dir("babelspec")) / "corpora"


def _candidates() -> list[tuple[str, str | None]]:
    """Where ``corpora_root`` looks without ``--data-root``, in order: (what to call it, its path)."""
    env = os.environ.get(CORPORA_ENV)
    return [(f"${CORPORA_ENV}" + (f" ({env})" if env else " (unset)"), env),
            (str(user_corpora_dir()), str(user_corpora_dir()))]  # fmt: skip


def corpora_searched() -> list[str]:
    """Where ``corpora_root`` looks without ``--data-root``, for messages that say so."""
    return [label for label, _ in _candidates()]


def corpora_root(explicit: str | os.PathLike | None = None) -> Path | None:
    """The corpora folder (the user's: babelspec ships none), the first of: ``explicit``
    (``--data-root``, which must be a folder), ``$BABELSPEC_CORPORA``, ``user_corpora_dir()``;
    None where none is a folder. It holds the sets as they unpack: ``sib200/`` (SIB-200,
    ``data/annotated/LANG/``), ``ntrex/`` (NTREX-128), ``nllb_oldi_seed/`` (OLDI Seed) ... (docs/study.md, "Real sentences")."""
    if explicit:
        if not Path(explicit).is_dir():
            raise UserError(f"data root {str(explicit)!r} is not a folder; pass the corpora folder "
                             f"(the one holding sib200/, ntrex/ ...) as --data-root DIR")
        return Path(explicit).resolve()
    for _, candidate in _candidates():
        if candidate and Path(candidate).is_dir():
            return Path(candidate).resolve()
    return None


def generic_real_data(lang: str) -> RealData | None:
    """The sets of a FLORES-200 language the table above does not name: SIB-200 (train and dev for
    text), NTREX-128 and OLDI Seed where the language table gives it a file; None without a
    FLORES-200 code (chr, haw)."""
    language = get_language(lang)
    if not language.flores:
        return None
    mono = ["sib200:sib200@train", "sib200:sib200@dev"]
    mono += ["ntrex:ntrex"] if language.ntrex else []
    mono += ["oldi-seed:nllb_oldi_seed"] if language.oldi else []
    return RealData(monolingual=tuple(mono))


def real_sets(lang: str) -> RealData | None:
    """The real sets of a language: the table's entry, else the generic FLORES-200 sets, else None."""
    return REAL_DATA.get(get_language(lang).code) or generic_real_data(lang)


def real_data(lang: str, root: str | os.PathLike | None) -> RealData | None:
    """The language's real sets when ``root`` holds them (SIB-200 at least), else None."""
    entry = real_sets(lang)
    if entry is None or root is None or not (Path(root) / "sib200").is_dir():
        return None
    return entry
