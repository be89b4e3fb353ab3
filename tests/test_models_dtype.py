"""dtype is a choice: auto follows the hardware's native bf16, names are checked, and every
measurement says which dtype (exact or fast mode), threads and CPU it ran on."""

from __future__ import annotations

import pytest
import torch

from babelspec.machine import describe, execution_info, precision_mode
from babelspec.models import loader


def _cpuinfo(tmp_path, flags: str):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu sse2 {flags}\n")
    return str(path)


@pytest.mark.parametrize("flags,native", [("avx512f avx512_bf16", True), ("amx_tile amx_bf16", True),
                                          ("avx512f avx512_vnni", False), ("", False)])
def test_native_bf16_is_read_from_the_cpu_flags(tmp_path, flags, native) -> None:
    assert loader.cpu_has_native_bf16(_cpuinfo(tmp_path, flags)) is native


def test_auto_is_bf16_only_on_a_cpu_with_native_bf16(tmp_path) -> None:
    cpu = torch.device("cpu")
    native = _cpuinfo(tmp_path, "avx512f avx512_bf16")
    assert loader.resolve_dtype("auto", cpu, cpuinfo=native) == torch.bfloat16
    assert loader.resolve_dtype(None, cpu, cpuinfo=native) == torch.bfloat16
    assert loader.resolve_dtype("auto", cpu, cpuinfo=_cpuinfo(tmp_path, "avx512f avx2")) == torch.float32


def test_dtype_names_and_aliases() -> None:
    assert loader.resolve_dtype("bfloat16") == loader.resolve_dtype("bf16") == torch.bfloat16
    assert loader.resolve_dtype("float32") == loader.resolve_dtype("FP32") == torch.float32
    assert loader.resolve_dtype(torch.float32) == torch.float32
    with pytest.raises(ValueError, match="unknown dtype 'half'; choose one of auto, bfloat16, float32"):
        loader.resolve_dtype("half")


def test_execution_info_names_dtype_mode_threads_and_cpu() -> None:
    info = execution_info(dtype=torch.bfloat16)
    assert info["dtype"] == "bfloat16" and info["mode"] == "fast"
    assert info["threads"] == torch.get_num_threads() and info["cpu"]
    assert precision_mode(torch.float32) == "exact" and precision_mode("bfloat16") == "fast"
    assert describe(info).startswith(f"bfloat16 (fast mode), {info['threads']} threads, ")


def test_a_config_with_a_bad_dtype_says_what_to_write() -> None:
    from babelspec.experiments.config import ConfigError, config_from_dict

    with pytest.raises(ConfigError, match="dtype must be auto, bfloat16 or float32"):
        config_from_dict({"dtype": "half", "languages": ["yor"]})
