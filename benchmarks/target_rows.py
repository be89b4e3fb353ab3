"""Self-drafters' caches taking the target's keys and values at each commit, measured.

A self-drafter (``head:LANG``, ``self:K@LANG``, ``int8:LANG``) starts from the target's cache of
the prompt; after each verification its commit may take the target's rows of the tokens just
kept (``SelfDrafter.TARGET_ROWS``): ``none`` (its own rows; after a fully accepted draft it then
starts the next one with a two-token forward, since it never forwarded its last drafted token),
``missing`` (the target's row of that token only) or ``accepted`` (the target's rows of every
token kept, so it attends over exactly the target's context). This runs ``babelspec bench
quant``'s int8 drafter (and ``--drafters``) once per mode under the paper's sampling on held-out
FLORES-200 translations: α, c and speedup over plain decoding per language, each run timed
against plain decoding in the same run. ``benchmarks/int8_rounding.py`` measures the same choice
without sampling noise (``int8, target's context``: total variation to bf16).

    .venv/bin/python benchmarks/target_rows.py -o benchmarks/results/target_rows.json
"""

from __future__ import annotations

import argparse

from babelspec.bench.quant import QUANT_LANGS, QuantBenchConfig, quant_bench
from babelspec.drafters.selfdraft import SelfDrafter
from babelspec.fileio import emit_json

MODES = ("none", "missing", "accepted")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--drafters", default="int8")
    parser.add_argument("--gammas", default="3")
    parser.add_argument("--prompts-per-lang", type=int, default=4)
    parser.add_argument("-o", "--output")
    args = parser.parse_args()
    modes = args.modes.split(",")
    if unknown := set(modes) - set(MODES):
        raise SystemExit(f"--modes: unknown {sorted(unknown)}; use some of {', '.join(MODES)}")
    cfg = QuantBenchConfig(langs=QUANT_LANGS, prompts_per_lang=args.prompts_per_lang,
                           drafters=tuple(args.drafters.split(",")), modes=("sample",),
                           gammas=tuple(int(g) for g in args.gammas.split(",")))  # fmt: skip
    runs = {}
    default = SelfDrafter.TARGET_ROWS
    try:
        for mode in modes:
            SelfDrafter.TARGET_ROWS = mode
            result = quant_bench(cfg, progress=False)
            runs[mode] = {name: {"speedup": row["speedup"], "alpha": row["alpha"], "c": row["c"],
                                 "worst_lang_speedup": row["worst_lang_speedup"],
                                 "per_lang": {lang: {k: v[k] for k in ("alpha", "c", "speedup")}
                                              for lang, v in row["per_lang"].items()}}
                          for name, row in result["modes"]["sample"].items()
                          if isinstance(row, dict) and "per_lang" in row and name != "plain"}  # fmt: skip
            runs[mode]["execution"] = result["execution"]
            print(mode, {name: (r["speedup"], r["worst_lang_speedup"]) for name, r in runs[mode].items()
                         if name != "execution"}, flush=True)  # fmt: skip
    finally:
        SelfDrafter.TARGET_ROWS = default
    out = {"benchmark": "target_rows", "langs": list(QUANT_LANGS), "prompts_per_lang": args.prompts_per_lang,
           "mode": "sample", "gammas": list(cfg.gammas), "default": default, "runs": runs}  # fmt: skip
    emit_json(out, args.output)


if __name__ == "__main__":
    main()
