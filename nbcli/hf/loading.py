"""nb's transformers loader: `from_pretrained` on a model folder, plus the output bias it carries.

    model = nbcli.load_model("gpt2-unigram/")        # what `nb patch-checkpoint --set-output-bias` wrote

`patch-checkpoint --set-output-bias --bias-name lm_head.bias` on a GPT-2 or Llama folder writes a
bias their transformers classes have no parameter for, so `from_pretrained` drops it ("unexpected
key"). `load_model` loads the folder with transformers and installs the carried bias into the output
layer (`nbcli.hf.output_bias.install_carried_bias`), so forward uses it; `nb eval` and `nb generate`
load the same way (`from_pretrained` here is the one call both make). The same holds for a model saved
by `save_pretrained` after `nbcli.init_output_bias`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nbcli.errors import CheckpointError, ConfigError


def transformers_class(name: str) -> Any:
    """A transformers class by name (AutoModelForCausalLM, GPT2LMHeadModel, ...); ConfigError without
    transformers installed or for a name it does not have."""
    try:
        import transformers
        from transformers.utils import logging as hf_logging
    except ImportError:
        raise ConfigError("loading a Hugging Face model needs transformers: pip install 'nbcli[hf]'") from None
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    found = getattr(transformers, name, None)
    if found is None:
        raise ConfigError(f"transformers {transformers.__version__} has no class {name!r}")
    return found


def from_pretrained(directory: Path, class_name: str = "AutoModelForCausalLM", what: str = "causal LM",
                    **kwargs: Any) -> Any:
    """`class_name.from_pretrained(directory)` from local safetensors files only, in the dtype the
    weights were saved in; CheckpointError (one line) when transformers cannot load it."""
    import transformers

    cls = transformers_class(class_name)
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    saved_dtype = {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": "auto"}  # renamed in 4.56
    try:
        return cls.from_pretrained(str(directory), local_files_only=True, use_safetensors=True,
                                   **{**saved_dtype, **kwargs})
    except (OSError, ValueError, KeyError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{directory}: transformers cannot load this {what} ({first})") from None


def saved_class(directory: Path) -> str:
    """The class `save_pretrained` recorded (config.json `architectures`), else AutoModelForCausalLM."""
    from nbcli.errors import NbError
    from nbcli.jsonsafe import load_file

    try:
        names = load_file(directory / "config.json", what="config.json").get("architectures")
    except (OSError, NbError, AttributeError):
        names = None
    return names[0] if isinstance(names, list) and names and isinstance(names[0], str) else "AutoModelForCausalLM"


def load_model(path: Path | str, *, model_class: str | None = None, arch: str = "auto",
               mapping: dict[str, str] | None = None, trainable: bool = True, **kwargs: Any) -> Any:
    """A transformers model folder (or Hub repo id) loaded with `from_pretrained` as the class it was
    saved as (`model_class` to choose another), with the output bias its checkpoint carries
    installed and live (trainable unless `trainable=False`). `kwargs` go to from_pretrained
    (attn_implementation="eager", ...). The model is in eval mode, as from_pretrained leaves it."""
    from nbcli.checkpoint import open_checkpoint, resolve_roles
    from nbcli.hf.output_bias import install_carried_bias
    from nbcli.resolve import local_path

    folder = local_path(path, "model")
    directory = folder if folder.is_dir() else folder.parent
    if not (directory / "config.json").is_file():
        raise CheckpointError(f"{path}: not a transformers model folder (no config.json in {directory})")
    model = from_pretrained(directory, model_class or saved_class(directory), "model", **kwargs)
    with open_checkpoint(folder) as checkpoint:
        try:
            roles = resolve_roles(checkpoint, arch, mapping)
        except CheckpointError:
            if arch != "auto" or mapping:
                raise
            return model  # not in the architecture table (Marian: its final_logits_bias loads as it is)
        install_carried_bias(model, checkpoint, roles, trainable=trainable)
    return model


def loaded_names(model: Any, names: list[str], live: dict[str, Any]) -> dict[str, str]:
    """Checkpoint tensor name -> the loaded transformers model's state-dict name of that tensor, for
    each name the model loaded as one tensor: the key renaming transformers applied on load, found
    with transformers' own machinery (5.x: `get_model_conversion_mapping` + `rename_source_key`,
    e.g. GPT-NeoX's embed_out loads as lm_head; 4.x: `_checkpoint_conversion_mapping` and the legacy
    LayerNorm.gamma/beta fix), then the base-model prefix added or removed. Names that a converter
    merges or splits into other tensors (MoE experts) are left out: no live tensor is theirs alone."""
    rename = _renamer(model, live)
    prefix = f"{getattr(model, 'base_model_prefix', '')}."
    found = {}
    for name in names:
        loaded = rename(name)
        if loaded is None:
            continue
        if loaded not in live and name in live:
            loaded = name
        if loaded not in live and prefix != "." and prefix + loaded in live:
            loaded = prefix + loaded
        if loaded not in live and loaded.startswith(prefix) and prefix != "." and loaded[len(prefix):] in live:
            loaded = loaded[len(prefix):]
        if loaded in live:
            found[name] = loaded
    return found


def _renamer(model: Any, live: dict[str, Any]) -> Callable[[str], str | None]:
    """name -> the name transformers loads it under (None: merged into another tensor by a converter)."""
    import re

    try:  # transformers 5: the conversion mapping from_pretrained applies, applied the way it applies it
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key
    except ImportError:
        mapping = getattr(model, "_checkpoint_conversion_mapping", None) or {}
        fix = getattr(model, "_fix_state_dict_key_on_load", None)

        def legacy(name: str) -> str | None:  # transformers 4: its key_mapping default and legacy fixes
            for pattern, replacement in mapping.items():
                name, hits = re.subn(pattern, replacement, name)
                if hits:
                    break
            fixed = fix(name) if callable(fix) else name  # (name, changed) since 4.48
            return fixed[0] if isinstance(fixed, tuple) else fixed
        return legacy

    transforms = get_model_conversion_mapping(model)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]

    def current(name: str) -> str | None:
        try:
            loaded, converted = rename_source_key(name, renamings, converters, model.base_model_prefix, live)
        except TypeError:  # a transformers whose loader helpers changed shape: the name as saved
            return name
        return None if converted is not None else loaded
    return current
