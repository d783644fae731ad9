"""3CosAdd (nbcli.vectors.analogy): a hand-checked case, an independent numpy transcription on random
vectors (chunked and unchunked), gensim's evaluate_word_analogies on the same files, and the
questions file's rules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from nbcli.errors import InputError
from nbcli.vectors.analogy import analogy_report, read_questions, score_analogies
from tests.vectors.writers import write

E = np.eye(8)
HAND = {  # one axis per question word; each answer is b + c - a exactly, so its cosine is 1
    "king": E[1], "man": E[0], "woman": E[2], "queen": E[1] + E[2] - E[0],
    "france": E[4], "paris": E[5], "italy": E[6], "Rome": E[5] + E[6] - E[4] + 0.5 * E[7],
    "rome": E[5] + E[6] - E[4], "banana": E[3],
}


def questions(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "q.txt"
    path.write_text(text, encoding="utf-8")
    return path


def hand_report(tmp_path: Path, **kw: object) -> dict:
    words = list(HAND)
    x = np.array([HAND[w] for w in words], dtype=np.float32)
    vectors = write(tmp_path / "hand.txt", "glove", words, x)
    q = questions(tmp_path, ": royal\nman king woman queen\nman woman king banana\n"
                            ": capitals\nfrance paris italy rome\nFrance Paris Italy Rome\n"
                            "france paris italy tokyo\nnot four words\n")
    return analogy_report(vectors, q, **kw)  # type: ignore[arg-type]


def test_hand_checked_case(tmp_path: Path) -> None:
    """By hand. royal: king - man + woman is queen (cosine 1); woman - man + king is queen too, so
    the second question (expecting banana) is wrong: 1 of 2. capitals: paris - france + italy is rome
    (cosine 1; Rome, the first row of the key ROME, has 3 / sqrt(3 * 3.25) = 0.96); case-insensitively
    both 'france paris italy rome' and 'France Paris Italy Rome' are applicable and correct; tokyo is
    absent: 2 of 2 applicable, 3 in all."""
    report = hand_report(tmp_path)
    royal, capitals = report["sections"]
    assert (royal["correct"], royal["applicable"], royal["total"]) == (1, 2, 2)
    assert (capitals["correct"], capitals["applicable"], capitals["total"]) == (2, 2, 3)
    assert report["overall"] == {"section": "overall", "correct": 3, "applicable": 4, "total": 5, "accuracy": 0.75}
    assert report["skipped_lines"] == 1 and report["warnings"]
    assert report["wrong_examples"] == [{"question": ["man", "woman", "king", "banana"], "answer": "queen"}]
    sensitive = hand_report(tmp_path, case_sensitive=True)
    # 'France Paris Italy Rome' is not applicable case-sensitively (France, Paris, Italy absent)
    assert sensitive["sections"][1]["applicable"] == 1 and sensitive["sections"][1]["correct"] == 1
    # restrict_vocab 8: rows 8, 9 (rome, banana) are out: the second royal question is not applicable;
    # ROME is still present (Rome, row 7) and Rome, the best remaining candidate, is the answer
    restricted = hand_report(tmp_path, restrict_vocab=8)
    assert [(r["correct"], r["applicable"]) for r in restricted["sections"]] == [(1, 1), (2, 2)]


def numpy_3cosadd(words: list[str], x: np.ndarray, qs: list[tuple[str, str, str, str]]) -> list[bool]:
    """An independent transcription (case-sensitive, all rows): normalise, b + c - a, exclude a, b, c."""
    unit = x.astype(np.float64) / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    index = {w: i for i, w in enumerate(words)}
    out = []
    for a, b, c, d in qs:
        scores = unit @ (unit[index[b]] + unit[index[c]] - unit[index[a]])
        scores[[index[a], index[b], index[c]]] = -np.inf
        out.append(words[int(np.argmax(scores))] == d)
    return out


@pytest.mark.parametrize("budget", [1 << 25, 37])  # one block, and tiny chunks x blocks
def test_matches_an_independent_numpy_3cosadd(tmp_path: Path, budget: int) -> None:
    rng = np.random.default_rng(5)
    words = [f"w{i}" for i in range(60)]
    x = rng.standard_normal((60, 6)).astype(np.float32)
    qs = [tuple(words[j] for j in rng.choice(60, 4, replace=False)) for _ in range(300)]
    # plant answers: d = b - a + c exactly for a third of them
    for i in range(0, 60, 3):
        a, b, c, d = (words.index(w) for w in qs[i])
        x[d] = x[b] - x[a] + x[c]
    text = ": s\n" + "".join(" ".join(q) + "\n" for q in qs)
    qset = read_questions(questions(tmp_path, text))
    report = score_analogies(words, torch.from_numpy(x), qset, case_sensitive=True, budget=budget)
    expected = numpy_3cosadd(words, x, qs)  # type: ignore[arg-type]
    assert report["overall"]["correct"] == sum(expected) > 0
    assert report["overall"]["applicable"] == 300


def test_equals_gensim_on_the_same_files(tmp_path: Path) -> None:
    gensim = pytest.importorskip("gensim.models", reason="gensim is in the test extras (pyproject)")
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(300)] + ["Alpha", "ALPHA", "alpha", "Beta", "beta"]
    x = rng.standard_normal((len(words), 10)).astype(np.float32)
    def pick() -> list[str]:
        a, b, c, d = rng.choice(len(words), 4, replace=False)
        if rng.random() < 0.4:  # plant the answer (with noise) so that some are right, some not
            x[d] = x[b] - x[a] + x[c] + rng.normal(0, 0.3, x.shape[1])
        return [words[a], words[b], words[c], words[d]]

    lines = []
    for s in range(3):
        lines.append(f": section {s}")
        lines += [" ".join(pick()).lower() if k % 2 else " ".join(pick()) for k in range(200)]
        lines.append("w1 w2 absentword w3")
    q = questions(tmp_path, "\n".join(lines) + "\n")
    for kind in ("glove", "word2vec-binary"):
        path = write(tmp_path / f"v.{kind}", kind, words, x)
        kv = gensim.KeyedVectors.load_word2vec_format(str(path), binary=kind != "glove", no_header=kind == "glove")
        for case_insensitive, restrict in ((True, 300000), (False, 300000), (True, 200)):
            _, sections = kv.evaluate_word_analogies(str(q), case_insensitive=case_insensitive, restrict_vocab=restrict)
            ours = analogy_report(path, q, case_sensitive=not case_insensitive, restrict_vocab=restrict)
            theirs = [(len(s["correct"]), len(s["correct"]) + len(s["incorrect"])) for s in sections]
            mine = [(r["correct"], r["applicable"]) for r in (*ours["sections"], ours["overall"])]
            assert mine == theirs, (kind, case_insensitive, restrict)
            assert ours["overall"]["correct"] > 0


def test_questions_file_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"q.txt:1: a question before any"):
        read_questions(questions(tmp_path, "a b c d\n: s\n"))
    path = tmp_path / "q.txt"
    path.write_bytes(b": s\na b c d\na \xff c d\n")
    with pytest.raises(InputError, match=r"q.txt:3: invalid UTF-8"):
        read_questions(path)
    with pytest.raises(InputError, match="no `: section` line"):
        read_questions(questions(tmp_path, "\n"))


def test_a_checkpoints_whole_word_rows_score_as_the_same_vectors_in_a_file(tmp_path: Path) -> None:
    """A checkpoint's embedding under a word-level tokenizer (beside it, or -t; an nb run directory too)
    scores exactly as a GloVe file of the same words' rows in id order; special rows are no words."""
    from nbcli.checkpoint.writer import save_tensors
    from nbcli.tokenizers import load_tokenizer
    from tests.cli.helpers import invoke

    words = list(HAND)
    tok = load_tokenizer("words:min-freq=1", texts=lambda: iter([" ".join(words)]))
    pieces = tok.pieces()
    rows = torch.randn(len(pieces), 8)
    for i, p in enumerate(pieces):
        if p in HAND:
            rows[i] = torch.tensor(HAND[p], dtype=torch.float32)
    run = tmp_path / "run"
    run.mkdir()
    save_tensors(run / "step-3.safetensors", {"tok_emb.weight": rows}, {})
    (run / "tokenizer.json").write_bytes(tok.serialized())
    file = write(tmp_path / "same.txt", "glove", pieces[4:], rows[4:].numpy())
    q = questions(tmp_path, ": royal\nman king woman queen\nman woman king banana\n: capitals\n"
                            "france paris italy rome\nFrance Paris Italy Rome\n")
    expected = analogy_report(file, q)
    for target, kw in ((run, {}), (run / "step-3.safetensors", {"tokenizer": run / "tokenizer.json"})):
        got = analogy_report(target, q, **kw)  # type: ignore[arg-type]
        assert got["overall"] == expected["overall"] and got["sections"] == expected["sections"]
        assert got["vectors"]["rows"] == len(pieces) - 4 and got["vectors"]["format"] == "checkpoint"
    assert expected["overall"]["correct"] >= 2
    result = invoke("analogy", run, "--questions", q, "-t", run / "tokenizer.json", "--json")
    assert result.exit_code == 0, result.output
    bad = invoke("analogy", file, "--questions", q, "-t", run / "tokenizer.json")
    assert bad.exit_code == 1 and "applies to a checkpoint" in bad.stderr


@pytest.mark.parametrize(("name", "content", "message"), [
    ("glove.txt", b"", r"glove\.txt:1: expected `word v1 \.\.\. vD`"),
    ("glove.txt", b"hello world\n", r"glove\.txt:1: 'world' is not a number"),
    ("vectors.bin", b"\x00\x01garbage", r"vectors\.bin:1: binary data without a `N D` header"),
    ("pytorch_model.bin", b"\x80\x04garbage", r"pytorch_model\.bin: pickled PyTorch checkpoints are never loaded"),
    ("model.weights", b"hello world\n", r"model\.weights: not a safetensors file"),
])
def test_a_broken_file_is_named_by_the_reader_it_was_meant_for(tmp_path: Path, name: str, content: bytes,
                                                               message: str) -> None:
    """Named as vectors ship (.txt/.bin/.vec), an empty or garbled file is the vector reader's to refuse
    (not "the model carries no tokenizer", not "not a safetensors file"); a pickle stays refused as one."""
    from nbcli.errors import NbError

    questions = tmp_path / "q.txt"
    questions.write_text(": s\na b c d\n")
    bad = tmp_path / name
    bad.write_bytes(content)
    with pytest.raises(NbError, match=message):
        analogy_report(bad, questions)
