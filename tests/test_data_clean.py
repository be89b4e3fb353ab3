"""Cleaning and parsing of the raw sources, and topic generation, on small inputs."""

from __future__ import annotations

import numpy as np

from babelspec.data.build import assign_splits
from babelspec.data.clean import (
    align_udhr,
    clean_pair,
    clean_ui_string,
    is_sentence_like,
    parse_ftl,
    parse_properties,
    parse_udhr_html,
    strip_accelerators,
)
from babelspec.data.splits import near_duplicates
from babelspec.data.topics import make_topics


def test_accelerators() -> None:
    assert strip_accelerators("~Open File") == "Open File"
    assert strip_accelerators("_Save As…") == "Save As…"
    assert strip_accelerators("&Help") == "Help"
    assert strip_accelerators("ፋይል (_F)") == "ፋይል"
    assert strip_accelerators("file_name & more") == "file_name & more"


def test_placeholders_and_markup_are_dropped() -> None:
    assert clean_ui_string("Delete %s?") is None
    assert clean_ui_string("Copied %1$d files") is None
    assert clean_ui_string("Hello { $user }") is None
    assert clean_ui_string("Click <b>here</b>") is None
    assert clean_ui_string("Page $1 of $2") is None
    assert clean_ui_string("12 - 34") is None
    assert clean_ui_string("%PRODUCTNAME   saves\\nfiles.") == "LibreOffice saves files."
    assert clean_ui_string("{ -brand-short-name } is updating.") == "Firefox is updating."
    assert clean_ui_string("Tom &amp; Jerry") == "Tom & Jerry"


def test_pairs() -> None:
    assert clean_pair("_Open", "_Ouvrir") == ("Open", "Ouvrir")
    assert clean_pair("OK", "ok") is None  # untranslated
    assert is_sentence_like("The file could not be saved.")
    assert not is_sentence_like("Save file.")
    assert not is_sentence_like("The file could not be saved")


def test_udhr_html() -> None:
    page = """<html><body><header><h1>Title</h1><p>Whereas one,</p><p>Whereas two.</p></header>
    <article data-number="1"><h1>Article 1</h1><p>All are free.</p></article>
    <article data-number="2"><h1>Article 2</h1><ol><li>First &amp; a.</li><li>Second.</li></ol></article>
    </body></html>"""
    other = """<html><body><header><h1>T</h1><p>Uno,</p><p>Dos.</p></header>
    <article data-number="1"><h1>A 1</h1><p>Libres.</p></article>
    <article data-number="2"><h1>A 2</h1><p>Primero y segundo.</p></article></body></html>"""
    en, tg = parse_udhr_html(page), parse_udhr_html(other)
    assert en["preamble"] == ["Whereas one,", "Whereas two."]
    assert en["article-2"] == ["First & a.", "Second."]
    pairs = align_udhr(en, tg)
    assert pairs[:3] == [("Whereas one,", "Uno,"), ("Whereas two.", "Dos."), ("All are free.", "Libres.")]
    assert pairs[3] == ("First & a. Second.", "Primero y segundo.")  # counts differ: joined


def test_ftl_and_properties() -> None:
    ftl = """# comment
msg-a = Open a new window
msg-b =
    .label = Causir un dossièr…
    .accesskey = C
msg-c =
    First line
    second line
-brand = Firefox
msg-d = { PLATFORM() ->
        [macos] Quit
       *[other] Exit
    }
"""
    parsed = parse_ftl(ftl)
    assert parsed["msg-a"] == "Open a new window"
    assert parsed["msg-b.label"] == "Causir un dossièr…"
    assert "msg-b.accesskey" not in parsed
    assert parsed["msg-c"] == "First line second line"
    assert "-brand" not in parsed
    assert clean_ui_string(parsed["msg-d"]) is None
    props = parse_properties("# c\nkey1 = Hello \\u00e9\nkey1.accesskey = H\nkey2=World\n")
    assert props == {"key1": "Hello é", "key2": "World"}


def test_near_duplicates() -> None:
    test = ["Everyone has the right to life, liberty and security of person."]
    train = ["Everyone has the right to life, liberty and the security of person.",  # near
             "EVERYONE has the right to life liberty and security of person",  # exact after norm
             "Preamble: everyone has the right to life, liberty and security of person. And more text here.",  # contains
             "No one shall be held in slavery or servitude."]
    assert near_duplicates(train, test).tolist() == [True, True, True, False]


def test_assign_splits_is_deterministic_and_leak_free() -> None:
    rng = np.random.default_rng(0)

    def words(k: int) -> str:
        return " ".join("".join(rng.choice(list("abcdefghijklmnoprstuvz"), size=6)) for _ in range(k))

    recs = [{"text": words(8) + ".", "en": words(8) + ".", "source": "udhr", "domain": "legal (UDHR)",
             "sent": True} for _ in range(60)]
    recs += [{"text": r["text"] + " ", "en": r["en"], "source": "gnome", "domain": "software UI", "sent": True}
             for r in recs[:30]]  # near copies from another source
    a = assign_splits(list(recs), "xx")
    b = assign_splits(list(reversed(recs)), "xx")
    key = lambda rs: sorted((r["text"], r["split"]) for r in rs)  # noqa: E731
    assert key(a) == key(b)
    test = {r["text"].strip() for r in a if r["split"] == "test"}
    train = {r["text"].strip() for r in a if r["split"] == "train"}
    assert test and train and not test & train
    assert sum(1 for r in a if r["split"] == "test" and r["source"] == "udhr" and r["en"]) == 20


def test_topics_deterministic_and_paired_by_similarity() -> None:
    words = ["apple", "car", "tree", "red", "fast", "green", "shiny", "tasty", "idea"]
    rng = np.random.default_rng(1)
    vecs = rng.normal(size=(len(words), 8)).astype(np.float32)
    index = {w: i for i, w in enumerate(words)}
    conc = {"apple": 4.9, "car": 4.8, "tree": 4.9, "idea": 1.6, "red": 4.0}
    nouns = {"apple", "car", "tree", "idea"}
    adj_counts = {"red": 20, "fast": 9, "green": 30, "shiny": 5, "tasty": 3}
    adjs = {"red", "fast", "green", "shiny", "tasty"}
    t1, c1 = make_topics(conc, nouns, adj_counts, adjs, index, vecs, n=3, seed=0)
    t2, _ = make_topics(conc, nouns, adj_counts, adjs, index, vecs, n=3, seed=0)
    assert t1 == t2
    assert c1 == {"candidate_nouns": 3, "candidate_adjectives": 4, "topics": 3}  # idea: abstract; tasty: rare
    assert {t["noun"] for t in t1} == {"apple", "car", "tree"}
    assert {t["adjective"] for t in t1} <= {"red", "fast", "green", "shiny"}
    for t in t1:
        a, b = vecs[index[t["adjective"]]], vecs[index[t["noun"]]]
        assert abs(t["similarity"] - float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))) < 1e-3
