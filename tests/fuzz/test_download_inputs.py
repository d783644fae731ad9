"""Hostile inputs of `nb reproduce --download` (hypothesis): any text as a recipe role's `hub` and
`licence`, and any dataset card on a (fake) Hub. A recipe either loads with a hub source of a valid
form or fails with one line naming the file and the key; a fetch either reads the split or fails with
one InputError/HubError line naming the dataset, and writes nothing outside the Hugging Face cache."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbcli.errors import ConfigError, InputError
from nbcli.resolve import HubError, looks_like_repo_id
from nbcli.resolve_datasets import fetch_dataset, parse_dataset_spec
from nbcli.sweeps.recipe import load_recipe
from tests.corpus.test_hub_datasets import parquet_bytes
from tests.reproduce.test_download import FakeHub

RECIPE = """task = "translation"
seeds = [0]
[data.train]
help = "pairs"
{extra}
[options]
corpus = ["{{train}}"]
src_lang = "de"
tgt_lang = "en"
tokenizer = "t.model"
"""
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hub=TEXT, licence=st.one_of(st.none(), TEXT))
def test_any_hub_source_loads_valid_or_is_one_line_naming_the_key(tmp_path: Path, hub: str, licence: str | None) -> None:
    extra = f"hub = {json.dumps(hub, ensure_ascii=False)}" + (
        "" if licence is None else f"\nlicence = {json.dumps(licence, ensure_ascii=False)}")
    path = tmp_path / "r.toml"
    path.write_text(RECIPE.format(extra=extra), encoding="utf-8")
    try:
        recipe = load_recipe(path)
    except ConfigError as err:
        message = str(err)
        assert "\n" not in message and str(path) in message
        assert "[data.train].hub" in message or "[data.train].licence" in message or "not valid TOML" in message
        return
    role = recipe.data[0]
    if role.hub:
        assert role.licence
        assert (parse_dataset_spec(role.hub) is not None) if ":" in role.hub else looks_like_repo_id(role.hub)


CARD_TEXT = st.one_of(
    TEXT,
    st.builds(lambda body: f"---\n{body}\n---\n", TEXT),
    st.builds(lambda name, pattern: f"---\nconfigs:\n- config_name: {name}\n  data_files:\n  - split: train\n"
                                    f"    path: {pattern}\n---\n", TEXT, TEXT),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(card=CARD_TEXT, split=st.sampled_from(["train", "test", "validation"]))
def test_any_card_fetches_the_split_or_is_one_line(monkeypatch: pytest.MonkeyPatch, card: str, split: str) -> None:
    with tempfile.TemporaryDirectory() as root:
        cache = Path(root) / "hf" / "hub"
        monkeypatch.setenv("HF_HOME", str(Path(root) / "hf"))
        monkeypatch.setenv("HF_HUB_CACHE", str(cache))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        table = parquet_bytes({"sentence": ["a b", "c d"], "label": [0, 1]})
        hub = FakeHub(cache, {"org/hostile": {"README.md": card.encode("utf-8", "surrogatepass"),
                                              "data/train-00000-of-00001.parquet": table}})
        hub.install(monkeypatch)
        try:
            found = fetch_dataset(f"org/hostile::{split}")
        except (InputError, HubError) as err:
            message = str(err)
            assert "\n" not in message and ("org/hostile" in message or "datasets--org--hostile" in message)
        else:
            assert found.files and all(Path(f).is_file() for f in found.files)
        made = {p.relative_to(root).parts[0] for p in Path(root).iterdir()}
        assert made <= {"hf"}
