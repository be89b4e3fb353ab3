"""`babelspec data ...` through the real typer app."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from babelspec.cli import app

runner = CliRunner()


def test_data_list_json_covers_all_languages() -> None:
    result = runner.invoke(app, ["data", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["languages"]
    totals = {r["lang"]: r for r in rows if r["source"] == "TOTAL"}
    assert sorted(totals) == ["amh", "ber", "chr", "grn", "haw", "ibo", "npi", "oci", "que", "yor", "zgh"]
    assert {c for c, r in totals.items() if r["scarce"]} == {"chr", "haw", "que", "zgh"}
    assert all(r["words"] > 0 and r["domain"] for r in rows if r["source"] != "TOTAL")


def test_data_list_table_says_when_a_language_has_almost_nothing() -> None:
    result = runner.invoke(app, ["data", "list"])
    assert result.exit_code == 0
    assert result.output.count("ALMOST NOTHING") == 4
    assert "legal (UDHR)" in result.output


def test_data_show() -> None:
    result = runner.invoke(app, ["data", "show", "ne", "--split", "test", "-n", "3"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("npi — Nepali")
    assert result.output.count("\nEN  ") + result.output.startswith("EN  ") == 3
    mono = runner.invoke(app, ["data", "show", "haw", "--kind", "monolingual", "-n", "2"])
    assert mono.exit_code == 0 and "Hawaiian" in mono.output


def test_data_show_bad_input() -> None:
    bad_lang = runner.invoke(app, ["data", "show", "xx"])
    assert bad_lang.exit_code != 0 and "name a FLORES-200 code" in bad_lang.output
    bad_split = runner.invoke(app, ["data", "show", "amh", "--split", "dev"])
    assert bad_split.exit_code != 0 and "unknown split 'dev'" in bad_split.output
