"""`nb translate`: load a translation checkpoint (`nb train --task translation`) with its tokenizers and
decode a file of source sentences, one a line, into detokenised translations in the same order.

A run directory stands for its best checkpoint (`best.safetensors`, by validation BLEU unless the run
gave --select-by: paper 000 app. A's early stopping), else its last `step-N.safetensors`
(`nbcli.checkpoint.runs.run_checkpoint`, the rule of every reader of a run). A run keeps its tokenizers beside its
checkpoints (`source-tokenizer.*`, `target-tokenizer.*`), so a checkpoint in a run directory needs no
tokenizer option; `--src-tokenizer`/`--tgt-tokenizer` (or `-t` for both) name others, which must be
the ones it was trained with (sha256 in the checkpoint's metadata).

Conventions (docs/training.md): each source line is encoded and the source tokenizer's EOS appended;
decoding starts from the model's `decoder_start_id` and stops at the target EOS or the length
limit; the output drops special tokens and is the target tokenizer's decoding. An empty or
whitespace-only line gives an empty line (it is not decoded).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbcli.errors import CheckpointError, ConfigError, TokenizerError

if TYPE_CHECKING:
    from nbcli.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
    from nbcli.tokenizers import Tokenizer

SIDES = ("source", "target")


def run_tokenizer_name(side: str, tokenizer: Tokenizer) -> str:
    """The file name a run keeps its `side` ("source"/"target") tokenizer under."""
    return f"{side}-tokenizer" + (".json" if tokenizer.kind == "tokenizer.json" else ".model")


def run_tokenizer_path(directory: Path, side: str) -> Path | None:
    for suffix in (".model", ".json"):
        path = directory / f"{side}-tokenizer{suffix}"
        if path.is_file():
            return path
    return None


@dataclass
class TranslationModel:
    """A loaded translation checkpoint: the model (eval mode, on its device) and its two tokenizers."""

    path: Path
    model: Seq2SeqTransformer
    cfg: Seq2SeqConfig
    metadata: dict[str, str]
    source_tokenizer: Tokenizer
    target_tokenizer: Tokenizer

    @property
    def step(self) -> int | None:
        value = self.metadata.get("nb.step", "")
        return int(value) if value.isdigit() else None

    def decoding_defaults(self) -> dict[str, Any]:
        """nb's decoding unless a command is given its own: paper 000's beam 5 (app. A: "length-normalised
        beam search with a beam size of 5"), lenpen 1 and fairseq's length limit 1.2 x S + 10. Not the
        run's --valid-beam/--valid-lenpen: those set the validation BLEU decoded during training only (a
        run validated greedily for CPU time still decodes with beam 5)."""
        return dict(DECODING_DEFAULTS)

    def languages(self) -> tuple[str, str] | None:
        """(source, target) language the run was trained on (its --src-lang/--tgt-lang, recorded in the
        checkpoint's training config), None when the checkpoint does not say."""
        try:
            train = json.loads(self.metadata.get("nb.train_config", "{}"))
        except json.JSONDecodeError:
            return None
        options = train.get("task_options") if isinstance(train, dict) else None
        if not isinstance(options, dict):
            return None
        src, tgt = options.get("src_lang"), options.get("tgt_lang")
        return (src, tgt) if isinstance(src, str) and isinstance(tgt, str) and src and tgt else None


DECODING_DEFAULTS: dict[str, Any] = {"beam": 5, "lenpen": 1.0, "max_len_a": 1.2, "max_len_b": 10}
"""Decoding of nb translate / nb eval --task translation / nb export unless given (paper 000 app. A)."""


def read_seq2seq_config(metadata: dict[str, str], path: Path) -> Seq2SeqConfig:
    """The Seq2SeqConfig in a checkpoint's nb.config; CheckpointError naming the file otherwise."""
    from nbcli.models.seq2seq import OBJECTIVE, Seq2SeqConfig

    found = metadata.get("nb.format", "")
    if found.startswith("nb-classifier/"):
        from nbcli.tasks.inference import FORMAT as CLASSIFIER

        raise CheckpointError(f"{path}: a classifier or tagger run (nb.format {CLASSIFIER}, nb train --task "
                              "classification|tagging), not a translation model; label text with nb predict, "
                              "score a labelled file with nb eval --task classification|tagging")
    if not found.startswith("nb-model/"):
        what = f"nb.format {found!r}" if found else "no nb.format metadata"
        raise CheckpointError(f"{path}: not an nb translation checkpoint ({what}); nb translate reads the "
                              "checkpoints of nb train --task translation")
    try:
        data = json.loads(metadata["nb.config"])
    except (KeyError, json.JSONDecodeError):
        raise CheckpointError(f"{path}: nb checkpoint without a readable nb.config") from None
    if not isinstance(data, dict) or data.get("objective") != OBJECTIVE:
        found = data.get("objective") if isinstance(data, dict) else None
        raise CheckpointError(f"{path}: a {found or 'non-translation'} checkpoint, not a translation model "
                              "(nb train --task translation)")
    try:
        return Seq2SeqConfig(**data)
    except (ConfigError, TypeError) as err:
        raise CheckpointError(f"{path}: nb.config is not a valid translation model config ({err})") from None


def _tokenizer(given: Path | str | None, directory: Path, side: str, expected: str | None, path: Path) -> Tokenizer:
    from nbcli.tokenizers import load_tokenizer

    source = given if given is not None else run_tokenizer_path(directory, side)
    if source is None:
        raise TokenizerError(f"{path}: no {side}-tokenizer.* beside the checkpoint; name it with "
                             f"--{'src' if side == 'source' else 'tgt'}-tokenizer (or -t for a joint one)")
    tokenizer = load_tokenizer(source)
    if expected and tokenizer.sha256 != expected:
        raise TokenizerError(f"{tokenizer.path}: not the {side} tokenizer {path} was trained with (sha256 "
                             f"{tokenizer.sha256[:12]}... vs {expected[:12]}... in the checkpoint)")
    return tokenizer


def load_translation_model(path: Path | str, *, source_tokenizer: Path | str | None = None,
                           target_tokenizer: Path | str | None = None, device: str = "auto") -> TranslationModel:
    """Load RUN_OR_CKPT (module docstring) for decoding: model in eval mode on `device`, tokenizers checked."""
    from nbcli.checkpoint.reader import open_checkpoint
    from nbcli.checkpoint.runs import run_checkpoint
    from nbcli.models.seq2seq import Seq2SeqTransformer
    from nbcli.train.runtime import resolve_device

    if not Path(path).exists():
        raise CheckpointError(f"{path}: no such file or directory")
    ckpt_path = run_checkpoint(path)
    with open_checkpoint(ckpt_path) as ckpt:
        metadata = dict(ckpt.metadata)
        cfg = read_seq2seq_config(metadata, ckpt_path)
        tensors = {name: ckpt.get(name).clone() for name in ckpt.names()}
    model = Seq2SeqTransformer(cfg)
    try:
        model.load_nb_state_dict({k: v.float() for k, v in tensors.items()})
    except ConfigError as err:
        raise CheckpointError(f"{ckpt_path}: {err}") from None
    model = model.to(resolve_device(device)).eval()
    src = _tokenizer(source_tokenizer, ckpt_path.parent, "source", metadata.get("nb.src_tokenizer_sha256"), ckpt_path)
    tgt = _tokenizer(target_tokenizer, ckpt_path.parent, "target", metadata.get("nb.tgt_tokenizer_sha256"), ckpt_path)
    for tok, size, side in ((src, cfg.src_vocab_size, "source"), (tgt, cfg.tgt_vocab_size, "target")):
        if tok.vocab_size > size:
            raise TokenizerError(f"{tok.path}: {tok.vocab_size} tokens do not fit the model's {size}-row {side} "
                                 f"embedding ({ckpt_path})")
    return TranslationModel(ckpt_path, model, cfg, metadata, src, tgt)


def source_ids(tm: TranslationModel, texts: list[str]) -> list[list[int]]:
    """Source token ids: each text encoded, the source EOS appended (the model's convention)."""
    eos = tm.cfg.src_eos_id
    return [ids + ([eos] if eos is not None else []) for ids in tm.source_tokenizer.encode_batch(texts)]


def translate_texts(tm: TranslationModel, texts: list[str], *, beam: int = 5, lenpen: float = 1.0,
                    batch_size: int = 64, max_len_a: float = 1.2, max_len_b: int = 10,
                    progress: Callable[[int], None] | None = None, where: str = "input") -> list[str]:
    """Detokenised translations of `texts` in order (an empty text gives ""). Sentences are decoded in
    batches of similar source length; a sentence's output does not depend on its batch. A sentence
    longer than the model's position table is a ConfigError naming `where`:LINE."""
    from nbcli.decoding.search import check_length_limit, check_search
    from nbcli.decoding.seq2seq import translate_ids

    check_search(beam, lenpen)
    check_length_limit(max_len_a, max_len_b)
    if batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {batch_size}")
    out = [""] * len(texts)
    todo = [i for i, t in enumerate(texts) if t.strip()]
    ids = dict(zip(todo, source_ids(tm, [texts[i] for i in todo])))
    limit = tm.cfg.max_positions
    for i in todo:
        if len(ids[i]) > limit:
            raise ConfigError(f"{where}:{i + 1}: {len(ids[i])} source tokens exceed the model's {limit} positions")
    order = sorted(todo, key=lambda i: len(ids[i]))
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        hyps = translate_ids(tm.model, [ids[i] for i in chunk], beam=beam, lenpen=lenpen, max_len_a=max_len_a,
                             max_len_b=max_len_b)
        for i, h in zip(chunk, hyps):
            out[i] = tm.target_tokenizer.decode(h.tokens)
        if progress is not None:
            progress(len(chunk))
    return out


def eval_translation_model(run_or_ckpt: Path | str, corpus: list[str], src_lang: str | None, tgt_lang: str | None,
                           *, beam: int | None = None, lenpen: float | None = None, batch_size: int = 64,
                           source_tokenizer: Path | str | None = None, target_tokenizer: Path | str | None = None,
                           device: str = "auto", columns: str | None = None,
                           by_frequency: dict[str, Any] | None = None) -> dict[str, Any]:
    """`nb eval --task translation RUN_OR_CKPT`: test BLEU and chrF (`nbcli.translation_eval`) of the
    model's translations of the corpus's source side; a run stands for its best checkpoint by validation
    BLEU (paper 000 app. A); decoding defaults to nb's (DECODING_DEFAULTS: beam 5, lenpen 1, 1.2 x S + 10).
    The corpus's languages default to the run's (its training --src-lang/--tgt-lang) and must be them
    (`check_languages`). `by_frequency`: paper 000 fig. 4's section as well
    (`nbcli.translation_frequency.translation_by_frequency`'s keywords: counts, bins, smoothing_k, ...)."""
    from nbcli.translation_eval import eval_translation

    tm = load_translation_model(run_or_ckpt, source_tokenizer=source_tokenizer, target_tokenizer=target_tokenizer,
                                device=device)
    run = tm.languages()
    if run is not None:   # the corpus's sides must be the run's: default to them, refuse others
        check_languages(tm, src_lang, tgt_lang)
        src_lang, tgt_lang = src_lang or run[0], tgt_lang or run[1]
    decoding = {**tm.decoding_defaults(), **({"beam": beam} if beam is not None else {}),
                **({"lenpen": lenpen} if lenpen is not None else {})}
    model = {"path": str(tm.path), "step": tm.step, **decoding}

    fitted = None
    if by_frequency is not None:   # the counts checked before anything is decoded
        from nbcli.translation_frequency import fit_target_counts, translation_by_frequency

        options = dict(by_frequency)
        fitted = fit_target_counts(tm.model, tm.target_tokenizer, options.pop("counts"), label=str(tm.path),
                                   allow_vocab_mismatch=options.pop("allow_vocab_mismatch", False))

    def frequency_section(pairs: list[Any]) -> dict[str, Any]:   # on the pairs eval_translation read
        section = translation_by_frequency(tm.model, tm.target_tokenizer, source_ids(tm, [p.source for p in pairs]),
                                           [p.target for p in pairs], fitted, batch_size=batch_size, **options)
        return {"warnings": section.pop("warnings"), "by_frequency": section}

    return eval_translation(corpus, src_lang, tgt_lang, model=model, columns=columns,
                            sections=frequency_section if fitted is not None else None,
                            translate=lambda texts: translate_texts(tm, texts, batch_size=batch_size, **decoding))


def check_languages(tm: TranslationModel, src_lang: str | None, tgt_lang: str | None,
                    what: str = "--src-lang/--tgt-lang") -> None:
    """ConfigError, in one line naming both directions, when a given language is not the run's (its
    training --src-lang/--tgt-lang); nothing to check for a checkpoint that does not record them."""
    run = tm.languages()
    if run is None:
        return
    given = (src_lang or run[0], tgt_lang or run[1])
    if given != run:
        raise ConfigError(f"{what} {given[0]}->{given[1]}: {tm.path} translates {run[0]}->{run[1]} (the "
                          "--src-lang/--tgt-lang it was trained with); give input in its languages")


def check_input_language(tm: TranslationModel, input_path: Path | str, src_lang: str | None) -> None:
    """Refuse an --input named for the run's target language (`test.en` for a de->en run: the reverse
    direction) unless --src-lang says it is the source language anyway."""
    from nbcli.corpus.sources import COMPRESSION_SUFFIXES

    run = tm.languages()
    if run is None or src_lang is not None or str(input_path) == "-":
        return
    name = Path(input_path).name
    for suffix in COMPRESSION_SUFFIXES:
        name = name.removesuffix(suffix)
    if Path(name).suffix == f".{run[1]}":
        raise ConfigError(f"--input {input_path}: named for {run[1]}, the target language of {tm.path} "
                          f"({run[0]}->{run[1]}); give {run[0]} sentences (or --src-lang {run[0]} if this file is "
                          f"{run[0]})")


@dataclass
class TranslateReport:
    checkpoint: str
    step: int | None
    input: str
    output: str
    sentences: int
    beam: int
    lenpen: float
    max_len_a: float
    max_len_b: int
    seconds: float
    sentences_per_s: float
    device: str
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def translate_file(run_or_ckpt: Path | str, input_path: Path | str, output: Path | str, *, beam: int | None = None,
                   lenpen: float | None = None, batch_size: int = 64, max_len_a: float | None = None,
                   max_len_b: int | None = None,
                   source_tokenizer: Path | str | None = None, target_tokenizer: Path | str | None = None,
                   device: str = "auto", progress: Callable[[int], None] | None = None,
                   src_lang: str | None = None, tgt_lang: str | None = None) -> TranslateReport:
    """`nb translate`: translate every line of `input_path` into `output` (written atomically, only
    when every line is translated; `-`: standard output). beam, lenpen, max_len_a/b None: nb's defaults
    (DECODING_DEFAULTS: beam 5, lenpen 1, 1.2, 10). `src_lang`/`tgt_lang`, when given, must be the run's
    (`check_languages`); an input named for the run's target language is refused (`check_input_language`)."""
    from nbcli.decoding.search import check_length_limit, check_search
    from nbcli.outputs import guard_outputs, model_inputs, write_text_output
    from nbcli.translation_eval import read_hypotheses

    check_search(1 if beam is None else beam, 1.0 if lenpen is None else lenpen)
    check_length_limit(1.2 if max_len_a is None else max_len_a, 10 if max_len_b is None else max_len_b)
    guard_outputs([output], [input_path, *model_inputs(run_or_ckpt), source_tokenizer, target_tokenizer],
                  stdout=True)
    texts, _ = read_hypotheses(input_path, what="--input", strict=True)
    tm = load_translation_model(run_or_ckpt, source_tokenizer=source_tokenizer, target_tokenizer=target_tokenizer,
                                device=device)
    check_languages(tm, src_lang, tgt_lang)
    check_input_language(tm, input_path, src_lang)
    defaults = tm.decoding_defaults()
    beam = defaults["beam"] if beam is None else beam
    lenpen = defaults["lenpen"] if lenpen is None else lenpen
    max_len_a = defaults["max_len_a"] if max_len_a is None else max_len_a
    max_len_b = defaults["max_len_b"] if max_len_b is None else max_len_b
    t0 = time.perf_counter()
    lines = translate_texts(tm, texts, beam=beam, lenpen=lenpen, batch_size=batch_size, max_len_a=max_len_a,
                            max_len_b=max_len_b, progress=progress, where=str(input_path))
    seconds = time.perf_counter() - t0
    write_text_output(output, "".join(line.replace("\n", " ") + "\n" for line in lines))
    return TranslateReport(checkpoint=str(tm.path), step=tm.step, input=str(input_path), output=str(output),
                           sentences=len(texts), beam=beam, lenpen=lenpen, max_len_a=max_len_a,
                           max_len_b=max_len_b, seconds=seconds,
                           sentences_per_s=len(texts) / seconds if seconds > 0 else 0.0,
                           device=str(next(tm.model.parameters()).device))
