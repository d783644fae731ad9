"""The task fuzzer's cases (tests/fuzz/test_tasks_fuzz.py): seeded command lines over the task input
surfaces that tests/fuzz/cases.py does not reach, each with its input files and what its outcome must be.

Surfaces: tag-train / tag-eval / tag-predict (CoNLL text, HF token-classification records), cls-train /
cls-eval / cls-predict (TSV, CSV, JSONL, parquet), mt-train (aligned files, TSV, JSONL), words-spec
(`-t words:SPEC`), pretrained (`--embedding-init pretrained:VECTORS`), analogy (vectors + questions).
A case is (surface, index, seed): `build_case` makes the same case from the same triple. Half the cases
with a huge line run under a line cap below it (NB_MAX_LINE_MB=0.1).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz.tasks_files import LABELS, WORDS, Conll, Rows, sentences, text
from tests.fuzz.tasks_inputs import (Input, classification_file, hostile, tagging_file, translation_files, utf8_broken,
                                     vectors_file)

Shared = dict[str, Path]


@dataclass
class Case:
    surface: str
    index: int
    args: list[str]
    files: dict[str, bytes | None]          # None: a directory
    mutations: list[str]
    valid: bool                             # only structural mutations: must exit 0
    expected: int | None = None             # the record count the command must report (valid cases)
    count_key: str | None = None            # where: "predictions" (len), or a key of the JSON report
    env: dict[str, str] = field(default_factory=dict)
    bad_utf8: bool = False                  # some input holds invalid UTF-8: a warning (or error) must say so
    must_fail: bool = False                 # an input nb must refuse (exit 0 is a silently wrong result)
    labels: list[str] | None = None         # the label set a valid training run must report

    @property
    def name(self) -> str:
        return f"{self.surface}:{self.index}"


BASE_TAG = ["--steps", "1", "--batch-size", "4", "--max-len", "16", "--device", "cpu", "--json"]
Builder = Callable[[str, int, random.Random, Shared], Case]


def tag_train(surface: str, index: int, rng: random.Random, shared: Shared) -> Case:
    inp = tagging_file(rng)
    must_fail = False
    if inp.args and inp.valid and rng.random() < 0.3:   # CoNLL-U / GermEval read without their columns
        inp.args, inp.valid, must_fail = [], False, True
        inp.mutations.append("columns-not-given")
    args = ["train", "--task", "tagging", "--init", str(shared["bert"]), "--corpus", "{DIR}/" + inp.name,
            "--out", "{DIR}/run", *inp.args, *BASE_TAG]
    return Case(surface, index, args, inp.files, inp.mutations, inp.valid, bad_utf8=inp.bad_utf8,
                must_fail=must_fail, labels=inp.labels if inp.valid else None)


def _eval_or_predict(surface: str, run: Path, task: str, inp: Input, rng: random.Random) -> tuple[list[str], str]:
    """nb eval (the count under `examples`/`sentences`) or nb predict (maybe with -o) of `run` on `inp`."""
    if surface.endswith("eval"):
        return (["eval", str(run), "--task", task, "--corpus", "{DIR}/" + inp.name, "--json"],
                "sentences" if task == "tagging" else "examples")
    return (["predict", str(run), "--corpus", "{DIR}/" + inp.name, "--json"]
            + (["-o", "{DIR}/preds.jsonl"] if rng.random() < 0.5 else []), "predictions")


def tag_use(surface: str, index: int, rng: random.Random, shared: Shared) -> Case:
    inp = tagging_file(rng)
    args, key = _eval_or_predict(surface, shared["tag_run"], "tagging", inp, rng)
    must_fail = False
    if inp.args:   # the shared run reads CoNLL column 0: a CoNLL-U/GermEval file's column 0 numbers the tokens
        inp.mutations.append("layout-needs-columns")
        must_fail, inp.valid = inp.valid, False
    return Case(surface, index, args, inp.files, inp.mutations, inp.valid, inp.records, key,
                bad_utf8=inp.bad_utf8, must_fail=must_fail)


def cls_train(surface: str, index: int, rng: random.Random, shared: Shared) -> Case:
    inp = classification_file(rng)
    args = ["train", "--task", "classification", "--init", str(shared["bert"]), "--corpus", "{DIR}/" + inp.name,
            "--out", "{DIR}/run", *inp.args, *BASE_TAG]
    return Case(surface, index, args, inp.files, inp.mutations, inp.valid, bad_utf8=inp.bad_utf8,
                labels=inp.labels if inp.valid else None)


def cls_use(surface: str, index: int, rng: random.Random, shared: Shared) -> Case:
    inp = classification_file(rng)
    if "pair" in inp.mutations:   # the shared run reads one text (`text`, else `sentence`)
        inp.mutations.append("pair-file-for-single-run")
        inp.valid = False
    if "labels:ints" in inp.mutations and surface == "cls-eval":
        inp.mutations.append("int-labels-against-names")
        inp.valid = False
    args, key = _eval_or_predict(surface, shared["cls_run"], "classification", inp, rng)
    return Case(surface, index, args, inp.files, inp.mutations, inp.valid, inp.records, key, bad_utf8=inp.bad_utf8)


def mt_train(surface: str, index: int, rng: random.Random, shared: Shared) -> Case:
    inp = translation_files(rng)
    args = ["train", "--task", "translation", "--corpus", "{DIR}/" + inp.name, "--src-lang", "de", "--tgt-lang",
            "en", "-t", str(shared["spm"]), "--steps", "1", "--batch-size", "4", "--eval-every", "1",
            "--eval-batches", "1", "--eval-sentences", "2", "--beam", "1", "--d-model", "16", "--val-fraction",
            "0.25", "--device", "cpu", "--out", "{DIR}/run", "--json"]
    return Case(surface, index, args, inp.files, inp.mutations, inp.valid, inp.records, "pairs", bad_utf8=inp.bad_utf8)


WORD_SPECS = [("min-freq=1", True), ("min-freq=2,lower", True), ("min-freq=1,lower", True), ("min-freq=0", False),
              ("min-freq=-1", False), ("min-freq=", False), ("min-freq=x", False), ("min-freq=1e3", False),
              ("min-freq=2.5", False), ("min-freq=99999999999999999999", False), ("min-freq=1,upper", False),
              ("min-freq=1,lower,lower", False), ("min-freq=1,,lower", False), ("", False), ("min-freq=1 ", False),
              ("MIN-FREQ=1", False), ("min_freq=1", False), ("min-freq=\uff11", False), ("min-freq=50", False),
              ("lower", False), ("min-freq=1,lower,min-freq=2", False), ("min-freq=+1", False)]


def words_spec(surface: str, index: int, rng: random.Random, shared: Shared) -> Case:
    spec, valid = rng.choice(WORD_SPECS)
    inp = classification_file(rng)
    muts = [repr(spec), *inp.mutations]
    if rng.choice(["classification", "classification", "lm"]) == "lm":   # an LM reads `text`: these files have none
        args = ["train", "-t", f"words:{spec}", "--corpus", "{DIR}/" + inp.name, "--out", "{DIR}/run", *BASE_TAG]
        muts.append("task:lm")
        valid = False
    else:
        args = ["train", "--task", "classification", "-t", f"words:{spec}", "--corpus", "{DIR}/" + inp.name,
                "--d-model", "8", "--n-head", "2", "--out", "{DIR}/run", *inp.args, *BASE_TAG]
    return Case(surface, index, args, inp.files, muts, valid and inp.valid, bad_utf8=inp.bad_utf8)


def pretrained(surface: str, index: int, rng: random.Random, shared: Shared) -> Case:
    muts: list[str] = []
    rows = [(text(rng), None, LABELS[i % 2]) for i in range(6)]
    vocab = sorted({w for r in rows for w in r[0].split()})
    vname, vdata, valid = vectors_file(rng, muts, 4, vocab[: rng.randint(1, len(vocab))])
    args = ["train", "--task", "classification", "-t", "words:min-freq=1", "--corpus", "{DIR}/train.tsv",
            "--embedding-init", f"pretrained:{{DIR}}/{vname}", "--d-model", "4", "--n-head", "2",
            "--out", "{DIR}/run", *BASE_TAG]
    return Case(surface, index, args, {"train.tsv": Rows(rows).render(), vname: vdata}, muts, valid,
                bad_utf8=utf8_broken(vdata) and vname.endswith(".txt"))


def analogy(surface: str, index: int, rng: random.Random, shared: Shared) -> Case:
    muts: list[str] = []
    words = list(WORDS[:24])
    q_lines = [": section-a"] + [" ".join(rng.sample(words, 4)) for _ in range(6)] + \
        [": section-b"] + [" ".join(rng.sample(words, 4)) for _ in range(4)]
    questions = ("\n".join(q_lines) + "\n").encode()
    vname, vdata, vvalid = vectors_file(rng, muts, 5, words, rate=0.5)
    qvalid = True
    if rng.random() < 0.6:
        muts.append("questions")
        questions = hostile(rng, questions, muts, 3)
        qvalid = False
    args = ["analogy", "{DIR}/" + vname, "--questions", "{DIR}/q.txt", "--json"]
    if rng.random() < 0.3:
        args += rng.choice([["--transform", "xavier-std,pos-enc"], ["--limit", "3"], ["--restrict-vocab", "2"],
                            ["--duplicates", "keep-first"], ["--case-sensitive"]])
    return Case(surface, index, args, {vname: vdata, "q.txt": questions}, muts, vvalid and qvalid,
                bad_utf8=(utf8_broken(vdata) and vname.endswith(".txt")) or utf8_broken(questions))


BUILDERS: dict[str, Builder] = {
    "tag-train": tag_train, "tag-eval": tag_use, "tag-predict": tag_use, "cls-train": cls_train,
    "cls-eval": cls_use, "cls-predict": cls_use, "mt-train": mt_train, "words-spec": words_spec,
    "pretrained": pretrained, "analogy": analogy}
SURFACES = tuple(BUILDERS)
WEIGHTS = {"tag-train": 3, "tag-eval": 1.5, "tag-predict": 1.5, "cls-train": 3, "cls-eval": 1.5, "cls-predict": 1.5,
           "mt-train": 2, "words-spec": 1.5, "pretrained": 1.5, "analogy": 2}


def build_case(surface: str, index: int, seed: int, shared: Shared) -> Case:
    """The seeded case `index` of `surface` (its files relative to the case folder, `{DIR}` in args)."""
    case = BUILDERS[surface](surface, index, random.Random(f"{seed}:{surface}:{index}"), shared)
    if "huge_line" in case.mutations and random.Random(f"{seed}:{surface}:{index}:env").random() < 0.5:
        case.env["NB_MAX_LINE_MB"] = "0.1"
        case.mutations.append("NB_MAX_LINE_MB=0.1")
    return case


def plan(cases: int, surfaces: tuple[str, ...] = SURFACES) -> list[tuple[str, int]]:
    """About `cases` (surface, index) pairs spread by WEIGHTS (at least one a surface), interleaved."""
    total = sum(WEIGHTS[s] for s in surfaces)
    counts = {s: max(1, round(cases * WEIGHTS[s] / total)) for s in surfaces}
    return [(s, i) for i in range(max(counts.values())) for s in surfaces if i < counts[s]]


def build_shared(root: Path, spm: Path) -> Shared:
    """What the cases read and must not change: a tiny BERT folder, a tagging and a classification run
    of it (one update each) to evaluate and predict with, and the SentencePiece model `spm`."""
    import contextlib
    import io


    from tests.cli.helpers import run_cli
    from tests.tasks.builders import encoder_folder

    with contextlib.redirect_stderr(io.StringIO()):   # transformers' progress bar
        shared: Shared = {"bert": encoder_folder(root / "bert", "bert"), "spm": spm}
    rng = random.Random(0)
    (root / "tag.conll").write_bytes(Conll(sentences(rng, 8)).render())
    (root / "cls.tsv").write_bytes(Rows([(text(rng), None, LABELS[i % 2]) for i in range(8)]).render())
    for key, task, corpus in (("tag_run", "tagging", "tag.conll"), ("cls_run", "classification", "cls.tsv")):
        result = run_cli(["train", "--task", task, "--init", str(shared["bert"]), "--corpus",
                                          str(root / corpus), "--steps", "1", "--batch-size", "4", "--max-len", "16",
                                          "--device", "cpu", "--out", str(root / key)])
        if result.exit_code != 0:
            raise RuntimeError(f"building the shared {task} run failed: {result.stderr}")
        shared[key] = root / key
    return shared
