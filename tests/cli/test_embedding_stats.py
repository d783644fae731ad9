"""`nb embedding-stats` (paper 002 tables 2, 6, 8) through CliRunner and a real `nb` process."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from tests.checkpoint.builders import gpt2_tensors, nb_tensors, save
from tests.cli.helpers import assert_one_line_error, invoke, run_nb


def stats(x: np.ndarray) -> dict[str, float]:
    return {"min": x.min(), "max": x.max(), "mean": x.mean(), "std": x.std(ddof=1)}


def test_roles_and_initialisations_match_numpy(tmp_path: Path) -> None:
    tensors, meta = nb_tensors(tied=False)
    src = save(tmp_path / "m.safetensors", tensors, meta)
    result = invoke("embedding-stats", src, "--inits", "all", "--seed", "2", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    rows = {r["label"]: r for r in report["rows"]}
    assert list(rows) == ["input_embedding", "output_weight", "xavier", "pretrained", "pretrained-xavier",
                          "xavier-pretrained", "pretrained-shuffled"]
    emb = tensors["tok_emb.weight"].double().numpy()
    n, d = emb.shape
    for label, x in (("input_embedding", emb), ("output_weight", tensors["head.weight"].double().numpy()),
                     ("pretrained", emb), ("pretrained-shuffled", emb),
                     ("pretrained-xavier", (emb - emb.mean()) * math.sqrt(2 / (n + d)) / emb.std(ddof=1))):
        for key, value in stats(x).items():
            assert rows[label][key] == pytest.approx(value, rel=1e-6, abs=1e-7), (label, key)
            assert rows[label]["scaled"][key] == pytest.approx(value * math.sqrt(d), rel=1e-6, abs=1e-6)
    assert rows["xavier-pretrained"]["mean"] == pytest.approx(emb.mean(), rel=1e-5)
    assert rows["xavier-pretrained"]["std"] == pytest.approx(emb.std(ddof=1), rel=1e-5)
    bound = math.sqrt(6 / (n + d))
    assert -bound <= rows["xavier"]["min"] and rows["xavier"]["max"] <= bound


def test_tensor_option_text_table_and_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    glove = tmp_path / "glove.safetensors"
    save_file({"vectors": torch.randn(50, 6) * 3}, str(glove))
    out = tmp_path / "stats.png"
    proc = run_nb("embedding-stats", glove, "--tensor", "vectors", "--inits", "pretrained,pretrained-xavier",
                  "--plot", out)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.decode()
    assert "table 6" in text and "pretrained-xavier" in text and "D = 6" in text
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and b"embedding-stats" in out.read_bytes()


def test_bad_inputs_are_one_line_errors(tmp_path: Path) -> None:
    src = save(tmp_path / "g.safetensors", gpt2_tensors(), {"format": "pt"})
    for args, name in ((("--inits", "glove"), "glove"), (("--tensor", "absent"), "absent"),
                       (("--tensor", "ln_f.bias"), "ln_f.bias"), (("--plot", str(tmp_path / "x.jpg")), "x.jpg"),
                       (("--plot", str(src)), "g.safetensors")):
        result = invoke("embedding-stats", src, *args)
        assert result.exit_code != 0, args
        assert_one_line_error(result.stderr, name)
    assert not (tmp_path / "x.jpg").exists()
