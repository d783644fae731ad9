"""`nb attention-maps`: paper 001 figs. 1, 2 and 4 for a run of `nb train`.

The attention maps of chosen heads for one sentence at chosen checkpoints of the run, next to the
[Next]/[Prev]/[First]/[Delim]/[Period] patterns nb trains towards, with each map's distance to each
pattern (`nbcli.analysis.attention`). Reads the run directory's step-N.safetensors (never a
pickle), the run's settings from the checkpoints' metadata (nb.config, nb.train_config) and the
tokenizer, which must be the one the run was trained with (its sha256 is in every checkpoint).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from nbcli.analysis.attention import (DEFAULT_STEPS, METRICS, Pick, closest_pattern, map_distances, parse_heads,
                                      parse_steps, pick_checkpoints, sentence_patterns)
from nbcli.analysis.patterns import assign_heads, pattern_token_ids
from nbcli.checkpoint.runs import saved_steps
from nbcli.errors import CheckpointError, ConfigError, TokenizerError
from nbcli.figure_style import FigureOptions
from nbcli.models.lm import ModelConfig, Transformer


def sentence_ids(tokenizer: Any, sentence: str, delimiters: bool) -> list[int]:
    """The sentence's token ids, between BOS (else EOS) and EOS when `delimiters` and the tokenizer
    has them, as paper 001 fig. 2 shows "<s> Welcome to EMNLP. </s>"."""
    ids = tokenizer.encode(sentence)
    if delimiters:
        first = tokenizer.bos_id if tokenizer.bos_id is not None else tokenizer.eos_id
        ids = ([first] if first is not None else []) + ids + ([tokenizer.eos_id] if tokenizer.eos_id is not None else [])
    if not ids:
        raise ConfigError("--sentence: the sentence has no tokens")
    return ids


def _metadata(path: Path) -> dict[str, str]:
    from nbcli.checkpoint.reader import open_checkpoint

    with open_checkpoint(path) as ckpt:
        return dict(ckpt.metadata)


def _load(path: Path, metadata: dict[str, str], mcfg: ModelConfig) -> Transformer:
    from nbcli.train.state import load_model_tensors

    tensors, _ = load_model_tensors(path)
    model = Transformer(mcfg)
    try:
        model.load_nb_state_dict(tensors)
    except ConfigError as err:
        raise CheckpointError(f"{path}: {err}") from None
    return model.eval()


def _model_config(path: Path, metadata: dict[str, str]) -> tuple[ModelConfig, dict[str, Any]]:
    if not metadata.get("nb.format", "").startswith("nb-model/"):
        raise CheckpointError(f"{path}: not an nb train checkpoint (no nb.format nb-model/* metadata)")
    try:
        mcfg = ModelConfig.from_json(metadata["nb.config"])
        train = json.loads(metadata.get("nb.train_config", "{}"))
    except (KeyError, ValueError, TypeError, ConfigError) as err:
        raise CheckpointError(f"{path}: unreadable nb.config / nb.train_config metadata ({err})") from None
    return mcfg, train if isinstance(train, dict) else {}


def _assigned(train: dict[str, Any], mcfg: ModelConfig) -> dict[int, str]:
    """Head -> pattern as the run's AG assigned them (`nbcli.analysis.patterns.assign_heads`), {} without AG."""
    fraction = train.get("ag_fraction") or 0.0
    patterns = train.get("ag_patterns")
    try:
        return assign_heads(mcfg.n_head, float(fraction), tuple(patterns) if patterns else None, mcfg.causal)
    except (ConfigError, TypeError, ValueError):
        return {}


def resolve_checkpoints(run_dir: Path, steps: str | None, checkpoints: Sequence[Path]) -> list[Pick]:
    """The checkpoints to draw: `checkpoints` as given (a bare name is looked up in the run directory),
    else `steps` (default 0%,1%,100%) among the run's step-N.safetensors."""
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: not a directory (give an nb train run directory)")
    requests = parse_steps(DEFAULT_STEPS if steps is None else steps)
    if checkpoints:
        if steps is not None:
            raise ConfigError("give --at or --checkpoint, not both")
        picks = []
        for given in checkpoints:
            path = given if given.is_file() else run_dir / given
            if not path.is_file():
                raise ConfigError(f"--checkpoint {given}: no such file (nor in {run_dir})")
            step = _metadata(path).get("nb.step", "?")
            picks.append(Pick(str(given), int(step) if step.isdigit() else -1, path, None))
        return picks
    saved = saved_steps(run_dir)
    if not saved:
        raise ConfigError(f"{run_dir}: no step-N.safetensors checkpoints (not an nb train run directory, or "
                          "the run saved none yet)")
    last = saved[max(saved)]
    _, train = _model_config(last, _metadata(last))
    total = train.get("steps") if isinstance(train.get("steps"), int) else max(saved)
    try:
        return pick_checkpoints(saved, total, requests)
    except ConfigError as err:
        raise ConfigError(f"{run_dir}: {err}") from None


def distinct_picks(picks: Sequence[Pick]) -> tuple[list[Pick], list[str]]:
    """The checkpoints to compute and draw, each once (requests that found the same saved step share
    it: 0 % and 1 % of a short run are often both step 0), and a note for each request merged."""
    kept: dict[Path, Pick] = {}
    notes = []
    for pick in picks:
        first = kept.setdefault(pick.path, pick)
        if first is not pick:
            notes.append(f"{pick.request} found step {pick.step}, the checkpoint already shown for {first.request}: "
                         "drawn once (no other saved step is nearer)")
    return list(kept.values()), notes


def attention_maps_report(run_dir: Path, sentence: str, tokenizer_path: Path, *, steps: str | None = None,
                          checkpoints: Sequence[Path] = (), heads: str | None = None, delimiters: bool = True,
                          metric: str = "l1", plot: Path | None = None,
                          looks: FigureOptions | None = None) -> dict[str, Any]:
    """The report `nb attention-maps --json` prints (see docs/training.md#nb-attention-maps), and the
    figure (.pdf, .svg, .png) when `plot` is given, drawn with `looks` (--dpi, --figsize, --title)."""
    from types import SimpleNamespace

    from nbcli.checkpoint.vocab import check_vocab, model_vocab, tokenizer_vocabulary
    from nbcli.tokenizers import load_tokenizer

    if metric not in METRICS:
        raise ConfigError(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")
    requested = resolve_checkpoints(run_dir, steps, checkpoints)
    picks, merged = distinct_picks(requested)
    metas = [_metadata(p.path) for p in picks]
    configs = [_model_config(p.path, m) for p, m in zip(picks, metas)]
    mcfg, train = configs[-1]
    for pick, (other, _) in zip(picks, configs):
        if other != mcfg:
            raise CheckpointError(f"{pick.path}: another architecture than {picks[-1].path} (one figure needs "
                                  "one model's checkpoints)")
    assigned = _assigned(train, mcfg)
    chosen = parse_heads(heads, mcfg.n_layer, mcfg.n_head, assigned)
    tokenizer = load_tokenizer(tokenizer_path)
    for pick, meta in zip(picks, metas):  # the tokenizer each was trained with (nb's one policy)
        check_vocab(tokenizer_vocabulary(tokenizer, f"--tokenizer {tokenizer.path}"),
                    model_vocab(SimpleNamespace(path=pick.path, metadata=meta), mcfg.vocab_size), error=TokenizerError)
    ids = sentence_ids(tokenizer, sentence, delimiters)
    if len(ids) > mcfg.seq_len:
        raise ConfigError(f"--sentence: {len(ids)} tokens{' with delimiters' if delimiters else ''} exceed the "
                          f"model's context of {mcfg.seq_len}")
    if max(ids) >= mcfg.vocab_size:
        raise TokenizerError(f"{tokenizer.path}: id {max(ids)} is outside the model's vocabulary of {mcfg.vocab_size}")
    delim_ids, period_ids = pattern_token_ids(tokenizer)
    patterns = sentence_patterns(ids, mcfg.causal, delim_ids, period_ids)
    layers = sorted({layer for layer, _ in chosen})
    idx = torch.tensor([ids], dtype=torch.long)
    maps: dict[tuple[int, int], list[torch.Tensor]] = {h: [] for h in chosen}
    for pick, meta in zip(picks, metas):
        by_layer = _load(pick.path, meta, mcfg).attention_maps(idx, layers)
        for layer, head in chosen:
            maps[(layer, head)].append(by_layer[layer][0, head])
    rows = []
    for (layer, head), matrices in maps.items():
        for pick, H in zip(picks, matrices):
            distances = {name: map_distances(H, P) for name, P in patterns.items()}
            rows.append({"layer": layer, "head": head, "assigned": assigned.get(head), "step": pick.step,
                         "checkpoint": str(pick.path), "distances": distances,
                         "closest": closest_pattern(distances, metric), "matrix": H.tolist()})
    notes = [p.note for p in requested if p.note] + merged
    if "period" in patterns and not any(i in period_ids for i in ids):
        notes.append("the sentence has no period token: [Period] rows are uniform (guidance.py's convention)")
    report = {
        "run": str(run_dir), "sentence": sentence, "tokenizer": str(tokenizer.path), "ids": ids,
        "tokens": [tokenizer.piece(i) for i in ids], "delimiters": delimiters, "objective": mcfg.objective,
        "causal": mcfg.causal, "metric": metric, "ag_heads": {str(h): p for h, p in sorted(assigned.items())},
        "checkpoints": [{"request": p.request, "step": p.step, "path": str(p.path), "note": p.note}
                        for p in requested],
        "heads": [{"layer": layer, "head": head, "assigned": assigned.get(head)} for layer, head in chosen],
        "patterns": {name: P.tolist() for name, P in patterns.items()},
        "maps": rows, "notes": notes,
    }
    if plot is not None:
        from nbcli import plots
        from nbcli.figure_style import provenance

        layers_shown = sorted({layer for layer, _ in chosen})
        where = f"layer {layers_shown[0]}" if len(layers_shown) == 1 else f"{len(layers_shown)} layers"
        plots.plot_attention_maps(plot, report, title=f"{run_dir.name or run_dir}: attention maps, {where}, for "
                                  f"\"{sentence}\"", metadata=provenance("attention-maps", run=run_dir,
                                                                          tokenizer=tokenizer.path),
                                  options=looks)
        report["plot"] = str(plot)
    return report
