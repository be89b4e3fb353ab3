"""A distilled drafter on disk: ``distilled.json`` (what it is and how it was trained), the
student's config, and its trained tensors (safetensors). Students built on the target (``self``)
store only what they do not share with it; ``model:`` students are a full ``save_pretrained``
checkpoint under ``model/``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save

from babelspec.drafters.students import (
    Student,
    StudentSpec,
    embedding_fingerprint,
    load_trained,
)
from babelspec.errors import UserError
from babelspec.fileio import write_bytes_atomic, write_json_atomic

FORMAT = "babelspec-distilled-drafter"
VERSION = 1
METADATA = "distilled.json"
WEIGHTS = "student.safetensors"


class DistilledDrafterError(UserError):
    """A directory that is not a usable distilled drafter for this target."""


def save_distilled(out_dir: str | os.PathLike, student: Student, target_model: torch.nn.Module,
                   metadata: dict[str, Any], tokenizer: Any = None) -> Path:
    """Write the trained student into ``out_dir`` (weights first, metadata last, each atomic:
    a directory with ``distilled.json`` is always complete)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if student.spec.kind == "model":
        tmp = out_dir / f".model.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        student.model.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        shutil.rmtree(out_dir / "model", ignore_errors=True)
        os.replace(tmp, out_dir / "model")
    else:
        write_bytes_atomic(out_dir / WEIGHTS, save(student.trainable_state()))
        body = student.model.lm if hasattr(student.model, "lm") else student.model
        write_json_atomic(out_dir / "config.json", body.config.to_dict())
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "student": student.spec.to_dict(),
        "target_vocab_size": student.full_vocab_size,
        "target_fingerprint": embedding_fingerprint(target_model),
        "trainable_parameters": sum(p.numel() for p in student.parameters() if p.requires_grad),
        **metadata,
    }
    write_json_atomic(out_dir / METADATA, meta)
    return out_dir


def read_metadata(directory: str | os.PathLike) -> dict[str, Any]:
    path = Path(directory) / METADATA
    if not path.exists():
        raise DistilledDrafterError(
            f"{directory} is not a distilled drafter (no {METADATA}); make one with "
            "`babelspec distill ... -o DIR`")
    meta = json.loads(path.read_text())
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise DistilledDrafterError(f"{path} is not a {FORMAT} v{VERSION} file")
    return meta


def load_distilled(directory: str | os.PathLike, target_model: torch.nn.Module) -> Student:
    """Rebuild the distilled student on top of ``target_model`` (checked to be the target it
    was trained against, since ``self`` students share its embedding)."""
    directory = Path(directory)
    meta = read_metadata(directory)
    spec = StudentSpec(**meta["student"])
    if spec.kind == "self":
        fingerprint = embedding_fingerprint(target_model)
        if meta["target_fingerprint"] not in (fingerprint, embedding_fingerprint(target_model, legacy=True)):
            raise DistilledDrafterError(
                f"{directory} was distilled on another target (embedding fingerprint "
                f"{meta['target_fingerprint']}, this target has {fingerprint}); use the target "
                f"it was trained for ({meta.get('teacher', 'see distilled.json')})")
        state = load_file(str(directory / WEIGHTS))
        return load_trained(state, spec, target_model)
    return load_trained({}, spec, target_model, model_dir=directory / "model")
