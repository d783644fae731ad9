"""`nb export` of a translation run (`TranslationTask.export`; the command finds the run's task,
`nbcli.tasks.runs.export_run`): an nb translation checkpoint -> a transformers model folder (Marian
layout) that `AutoModelForSeq2SeqLM.from_pretrained` loads with the same logits, so `generate`,
pipelines and the Hub work on it.

nb's encoder-decoder (`nbcli.models.seq2seq`) names its tensors as Marian does without the `model.`
prefix, so the export is a rename: `model.` + name, except the output layer's `lm_head.weight`
(written only when W is not tied) and the output bias b, `final_logits_bias` [1, V] (zeros for a
model trained with --bias-init none: the same logits). Marian is post-LN with scale_embedding and
sinusoidal positions computed from the config (not saved); a model with learned positions writes
its tables as `model.{encoder,decoder}.embed_positions.weight`, one with none writes zero tables.
A pre-LN model (--norm pre) has final LayerNorms Marian lacks: refused.

Files: model.safetensors, config.json (MarianConfig: vocab sizes, widths, activation, scale_embedding,
share_encoder_decoder_embeddings / tie_word_embeddings from the embedding sharing, pad / eos /
decoder_start ids; forced_eos_token_id null), generation_config.json (decoder_start_token_id,
eos_token_id, pad_token_id, num_beams / length_penalty: nb's decoding defaults, beam 5 and lenpen 1
(paper 000 app. A), not the run's validation beam, early_stopping true: nb's beam search,
`nbcli.decoding.search`; max_new_tokens the position table: `generation_config`), and the tokenizer: for
SentencePiece models MarianTokenizer's files (source.spm, target.spm, vocab.json [+ target_vocab.json
for separate vocabularies], tokenizer_config.json), which encode as nb does and append EOS; for
tokenizer.json models the source tokenizer as tokenizer.json (+ target-tokenizer.json when the target's
differs), and README.md, the model card (`translation_card`, `nbcli.hf.model_card`). All are written
through the one safetensors writer into a folder staged beside `out` and
renamed into place as a whole (`write_model_folder`, `nbcli.atomic.staged_folder`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbcli.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from nbcli.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
    from nbcli.tokenizers import Tokenizer
    from nbcli.translate import TranslationModel


def marian_tensors(model: Seq2SeqTransformer) -> dict[str, torch.Tensor]:
    """The model's tensors under MarianMTModel's names (module docstring), float32 on the CPU."""
    import torch

    cfg = model.cfg
    if cfg.norm != "post":
        raise ConfigError("nb export writes the Marian layout, which is post-LN: a --norm pre model has final "
                          "LayerNorms Marian has no place for")
    out: dict[str, torch.Tensor] = {}
    for name, tensor in model.nb_state_dict().items():
        value = tensor.detach().to("cpu", torch.float32).contiguous()
        if name == "final_logits_bias":
            out[name] = value[None].contiguous()
        elif name == "lm_head.weight":
            out[name] = value
        else:
            out[f"model.{name}"] = value
    if "final_logits_bias" not in out:   # --bias-init none: Marian always adds a bias; zeros change nothing
        out["final_logits_bias"] = torch.zeros(1, cfg.tgt_vocab_size)
    if cfg.positions == "none":
        for stack in ("encoder", "decoder"):
            out[f"model.{stack}.embed_positions.weight"] = torch.zeros(cfg.max_positions, cfg.d_model)
    return out


def marian_config(cfg: Seq2SeqConfig) -> dict[str, Any]:
    """config.json of the exported model (transformers' MarianConfig fields)."""
    return {
        "architectures": ["MarianMTModel"], "model_type": "marian", "is_encoder_decoder": True,
        "vocab_size": cfg.src_vocab_size, "decoder_vocab_size": cfg.tgt_vocab_size, "d_model": cfg.d_model,
        "encoder_layers": cfg.encoder_layers, "decoder_layers": cfg.decoder_layers,
        "encoder_attention_heads": cfg.n_head, "decoder_attention_heads": cfg.n_head,
        "encoder_ffn_dim": cfg.d_ff, "decoder_ffn_dim": cfg.d_ff, "activation_function": cfg.activation,
        "dropout": cfg.dropout, "attention_dropout": 0.0, "activation_dropout": 0.0,
        "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0,
        "max_position_embeddings": cfg.max_positions, "scale_embedding": cfg.scale_embedding,
        "share_encoder_decoder_embeddings": cfg.share_embeddings == "all",
        "tie_word_embeddings": cfg.share_embeddings != "none",
        "pad_token_id": cfg.pad_id, "eos_token_id": cfg.eos_id, "decoder_start_token_id": cfg.decoder_start_id,
        "bos_token_id": None, "forced_eos_token_id": None, "use_cache": True, "dtype": "float32",
        "init_std": cfg.d_model ** -0.5,
    }


def generation_config(cfg: Seq2SeqConfig, beam: int, lenpen: float) -> dict[str, Any]:
    """generation_config.json: nb's conventions and what transformers can express of nb's decoding
    (`nbcli.decoding.search`). Beam search: num_beams, length_penalty, early_stopping true; greedy
    (beam 1): num_beams 1 alone (transformers flags early_stopping and a length_penalty as beam-only).
    Length: nb stops sentence i after min(P, int(max_len_a * S_i + max_len_b)) generated tokens (S_i
    its source tokens, EOS included; P the position table), a limit per sentence that a generation
    config cannot hold (its max_new_tokens is one number for a whole batch). The export writes
    max_new_tokens P, nb's ceiling (the decoder's position table; max_length would count the decoder's
    start token too, so max_length P would cut one token sooner than nb): every sentence nb
    ends with EOS before its limit gets nb's translation; one that nb cuts at its limit goes on in
    generate until EOS or P tokens. Pass max_new_tokens=int(1.2 * S + 10) for one sentence (or a batch
    of equal source length) to cut where nb cuts (docs/training.md 'nb export')."""
    search: dict[str, Any] = {"num_beams": beam}
    if beam > 1:
        search.update(length_penalty=lenpen, early_stopping=True)
    return {"decoder_start_token_id": cfg.decoder_start_id, "eos_token_id": cfg.eos_id, "pad_token_id": cfg.pad_id,
            "bos_token_id": None, "forced_eos_token_id": None, **search, "max_new_tokens": cfg.max_positions}


def _json(data: Any) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _piece(tokenizer: Tokenizer, token_id: int | None, fallback: str) -> str:
    return tokenizer.piece(token_id) if token_id is not None else fallback


def tokenizer_files(source: Tokenizer, target: Tokenizer, cfg: Seq2SeqConfig) -> dict[str, bytes]:
    """The tokenizer files of the export (module docstring)."""
    joint = source.sha256 == target.sha256
    if source.kind == "sentencepiece" and target.kind == "sentencepiece":
        files = {"source.spm": source.serialized(), "target.spm": target.serialized(),
                 "vocab.json": _json({p: i for i, p in enumerate(source.pieces())})}
        if not joint:
            files["target_vocab.json"] = _json({p: i for i, p in enumerate(target.pieces())})
        files["tokenizer_config.json"] = _json({
            "tokenizer_class": "MarianTokenizer", "separate_vocabs": not joint,
            "unk_token": _piece(source, source.unk_id, "<unk>"), "eos_token": _piece(target, target.eos_id, "</s>"),
            "pad_token": _piece(target, cfg.pad_id, "<pad>"), "model_max_length": cfg.max_positions,
            **({"target_vocab_file": "target_vocab.json"} if not joint else {})})
        return files
    files = {"tokenizer.json": source.serialized(),
             "tokenizer_config.json": _json({"tokenizer_class": "PreTrainedTokenizerFast",
                                             "eos_token": _piece(target, target.eos_id, "</s>"),
                                             "pad_token": _piece(target, cfg.pad_id, "<pad>"),
                                             "model_max_length": cfg.max_positions})}
    if not joint:
        files["target-tokenizer" + (".json" if target.kind == "tokenizer.json" else ".model")] = target.serialized()
    return files


@dataclass
class ExportReport:
    checkpoint: str
    out: str
    step: int | None
    layout: str
    tensors: int
    parameters: int
    files: list[str]
    decoder_start_token_id: int
    eos_token_id: int
    pad_token_id: int
    num_beams: int
    length_penalty: float
    max_new_tokens: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


USAGE_SENTENCEPIECE = """\
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

path = "{path}"   # this folder, from its parent (or the Hub repo it is pushed to)
tokenizer = AutoTokenizer.from_pretrained(path)
model = AutoModelForSeq2SeqLM.from_pretrained(path)
batch = tokenizer(["A sentence to translate."], return_tensors="pt")   # the tokenizer appends EOS, as nb does
print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))
"""
USAGE_TOKENIZER_JSON = """\
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

path = "{path}"   # this folder, from its parent (or the Hub repo it is pushed to)
tokenizer = AutoTokenizer.from_pretrained(path)
model = AutoModelForSeq2SeqLM.from_pretrained(path)
ids = tokenizer.encode("A sentence to translate.") + [tokenizer.eos_token_id]   # nb's sources end with EOS
print(tokenizer.batch_decode(model.generate(torch.tensor([ids])), skip_special_tokens=True))
"""


def translation_card(tm: TranslationModel, out: Path, beam: int, lenpen: float) -> bytes:
    """README.md of a translation export (`nbcli.hf.model_card`): the run's languages, settings, the
    validation BLEU/chrF logged at the exported step, the decoding defaults and what they cannot hold."""
    from nbcli.hf.model_card import (CardFacts, Metric, file_names, hub_datasets, logged_at, metadata_inputs,
                                     model_card, papers_used, run_files)

    config, summary, records = run_files(tm.path)
    config = config or json.loads(tm.metadata.get("nb.train_config", "{}") or "{}")
    languages = tm.languages()
    src, tgt = languages if languages else ("?", "?")
    inputs = metadata_inputs(tm.metadata)
    at = logged_at(records, tm.step, "val_bleu")
    metrics = [] if at is None else [
        Metric("validation", "nb-validation", kind, name, float(at[key]), summary.get(signature))
        for kind, name, key, signature in (("bleu", "BLEU (sacreBLEU)", "val_bleu", "bleu_signature"),
                                           ("chrf", "chrF (sacreBLEU)", "val_chrf", "chrf_signature"))
        if isinstance(at.get(key), (int, float))]
    cfg = tm.cfg
    usage = USAGE_SENTENCEPIECE if tm.source_tokenizer.kind == "sentencepiece" else USAGE_TOKENIZER_JSON
    facts = CardFacts(
        name=out.name, task="translation", languages=[x for x in (src, tgt) if x != "?"],
        summary=f"A {src}→{tgt} Transformer encoder-decoder (Marian layout, {cfg.encoder_layers}+{cfg.decoder_layers} "
                f"layers, d_model {cfg.d_model}) from step {tm.step} of an nb translation run.",
        usage=usage.format(path=out.name), datasets=hub_datasets(inputs), papers=papers_used(config), metrics=metrics,
        notes=["`from_pretrained` loads every tensor; the output bias b is Marian's final_logits_bias.",
               f"generation_config.json: num_beams {beam}, length_penalty {lenpen:g} (nb's decoding: beam search, "
               f"paper 000 app. A), max_new_tokens {cfg.max_positions} (the position table).",
               "nb also stops each sentence after int(1.2 x S + 10) generated tokens (S: its source tokens, EOS "
               "included), a per-sentence limit a generation config cannot hold; pass "
               "max_new_tokens=int(1.2 * S + 10) per sentence to cut where nb does."],
        settings=[("task", f"translation {src}→{tgt}"), ("preset", str(config.get("preset", "-"))),
                  ("updates", str(config.get("steps", "-"))), ("batch (sentences)", str(config.get("batch_size", "-"))),
                  ("learning rate", f"{config.get('lr', '-')} ({config.get('lr_schedule', '-')}, warm-up "
                                    f"{config.get('warmup', '-')})"),
                  ("output bias init", str(config.get("bias_init", "-"))),
                  ("embedding init", str(config.get("embedding_init", "-"))), ("seed", str(config.get("seed", "-"))),
                  ("best checkpoint chosen by", str(summary.get("select_by", "-"))),
                  ("data", file_names(inputs))])
    return model_card(facts)


def export_model(tm: TranslationModel, out: Path | str, *, beam: int | None = None, lenpen: float | None = None,
                 ) -> ExportReport:
    """Write the Marian model folder of a loaded translation model into `out` (new or empty)."""
    from nbcli.checkpoint.writer import write_model_folder
    from nbcli.decoding.search import check_search
    from nbcli.provenance import tool_version

    cfg = tm.cfg
    defaults = tm.decoding_defaults()
    beam = defaults["beam"] if beam is None else beam
    lenpen = defaults["lenpen"] if lenpen is None else lenpen
    check_search(beam, lenpen)
    tensors = marian_tensors(tm.model)
    extra = {"config.json": _json(marian_config(cfg)),
             "generation_config.json": _json(generation_config(cfg, beam, lenpen)),
             **tokenizer_files(tm.source_tokenizer, tm.target_tokenizer, cfg),
             "README.md": translation_card(tm, Path(out), beam, lenpen)}
    metadata = {"format": "pt", "nb.version": tool_version(), "nb.exported_from": str(tm.path),
                **({"nb.step": tm.metadata["nb.step"]} if "nb.step" in tm.metadata else {})}
    written = write_model_folder(out, tensors, metadata, extra)
    return ExportReport(checkpoint=str(tm.path), out=str(out), step=tm.step, layout="marian", tensors=len(tensors),
                        parameters=sum(t.numel() for t in tensors.values()), files=[p.name for p in written],
                        decoder_start_token_id=cfg.decoder_start_id, eos_token_id=cfg.eos_id, pad_token_id=cfg.pad_id,
                        num_beams=beam, length_penalty=lenpen, max_new_tokens=cfg.max_positions)


def export_translation(checkpoint: Path | str, out: Path | str, *, source_tokenizer: Path | str | None = None,
                       target_tokenizer: Path | str | None = None, beam: int | None = None,
                       lenpen: float | None = None) -> Any:
    """`nb export` of a translation run or checkpoint (a run directory stands for its best checkpoint,
    as for nb translate): the Marian folder (`export_model`)."""
    from nbcli.decoding.search import check_search
    from nbcli.outputs import guard_outputs, model_inputs
    from nbcli.translate import load_translation_model

    check_search(1 if beam is None else beam, 1.0 if lenpen is None else lenpen)
    guard_outputs([], [*model_inputs(checkpoint), source_tokenizer, target_tokenizer], folder=out)
    tm = load_translation_model(checkpoint, source_tokenizer=source_tokenizer, target_tokenizer=target_tokenizer,
                                device="cpu")
    return export_model(tm, out, beam=beam, lenpen=lenpen)
