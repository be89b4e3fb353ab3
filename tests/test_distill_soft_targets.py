"""The teacher soft-target shards: exact round trip, resume after an interruption, clear errors."""


import numpy as np
import pytest

from babelspec.distill.soft_targets import Example, SoftTargetsError, SoftTargetShards, build_soft_targets


def random_examples(n: int, k: int = 20, dtype=np.float16, seed: int = 0) -> list[Example]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        length = int(rng.integers(3, 40))
        start = int(rng.integers(1, length))
        mask = np.zeros(length, dtype=bool)
        mask[start:] = True
        rows = int(mask.sum())
        logits = rng.normal(size=(rows, 300)) * 3
        logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
        idx = np.argsort(-logp, axis=1)[:, :k].astype(np.int32)
        out.append(Example(ids=rng.integers(0, 262144, length), mask=mask, topk_ids=idx,
                           topk_values=np.take_along_axis(logp, idx, 1).astype(dtype)))
    return out


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_cache_round_trips_exactly(tmp_path, dtype):
    examples = random_examples(23, dtype=dtype)
    cache = build_soft_targets(tmp_path / "c", {"teacher": "t"}, len(examples),
                        lambda s, e: examples[s:e], shard_size=5)
    assert cache.complete and len(cache.shard_indices()) == 5
    loaded = SoftTargetShards(tmp_path / "c").load_all()
    assert len(loaded) == len(examples)
    for a, b in zip(examples, loaded):
        assert np.array_equal(a.ids, b.ids) and a.ids.dtype == b.ids.dtype == np.int32
        assert np.array_equal(a.mask, b.mask)
        assert np.array_equal(a.topk_ids, b.topk_ids) and b.topk_ids.dtype == np.int32
        assert b.topk_values.dtype == dtype
        assert np.array_equal(a.topk_values.view(np.uint8), b.topk_values.view(np.uint8))  # bitwise


def test_interrupted_build_resumes_and_skips_finished_shards(tmp_path):
    examples = random_examples(20)
    calls: list[tuple[int, int]] = []

    def crashing(start, stop):
        calls.append((start, stop))
        if start == 8:
            raise KeyboardInterrupt  # an interruption in the middle of the third shard
        return examples[start:stop]

    with pytest.raises(KeyboardInterrupt):
        build_soft_targets(tmp_path, {"teacher": "t"}, 20, crashing, shard_size=4)
    partial = SoftTargetShards(tmp_path)
    assert not partial.complete and partial.shard_indices() == [0, 1]
    assert not list(tmp_path.glob(".*tmp*"))  # no half-written file left under a real name

    calls.clear()
    cache = build_soft_targets(tmp_path, {"teacher": "t"}, 20, lambda s, e: calls.append((s, e))
                        or examples[s:e], shard_size=4)
    assert calls == [(8, 12), (12, 16), (16, 20)]  # finished shards were not recomputed
    assert cache.complete and len(cache.load_all()) == 20
    calls.clear()
    build_soft_targets(tmp_path, {"teacher": "t"}, 20, lambda s, e: calls.append((s, e)) or [], 4)
    assert calls == []


def test_empty_shards_are_recorded_and_skipped(tmp_path):
    examples = random_examples(6)
    cache = build_soft_targets(tmp_path, {"t": 1}, 6, lambda s, e: examples[s:e] if s else [], 3)
    assert len(cache.load_all()) == 3 and cache.manifest["examples"] == 3
    assert SoftTargetShards(tmp_path).read_shard(0) == []


def test_cache_for_another_teacher_is_refused(tmp_path):
    examples = random_examples(3)
    build_soft_targets(tmp_path, {"teacher": "a"}, 3, lambda s, e: examples[s:e], 3)
    with pytest.raises(SoftTargetsError, match="was built for"):
        build_soft_targets(tmp_path, {"teacher": "b"}, 3, lambda s, e: examples[s:e], 3)


def test_corrupted_shard_and_manifest_are_reported(tmp_path):
    examples = random_examples(4)
    cache = build_soft_targets(tmp_path, {"teacher": "a"}, 4, lambda s, e: examples[s:e], 4)
    path = cache.shard_path(0)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(SoftTargetsError, match="checksum"):
        SoftTargetShards(tmp_path).load_all()
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(SoftTargetsError, match="not valid JSON"):
        SoftTargetShards(tmp_path)
    with pytest.raises(SoftTargetsError, match="no soft-target shards"):
        SoftTargetShards(tmp_path / "missing")


def test_bad_examples_are_rejected():
    with pytest.raises(SoftTargetsError, match="mask\\[0\\]"):
        Example(ids=np.arange(3), mask=np.array([True, False, False]),
                topk_ids=np.zeros((1, 2), np.int32), topk_values=np.zeros((1, 2), np.float16))
    with pytest.raises(SoftTargetsError, match="one row per response token"):
        Example(ids=np.arange(3), mask=np.array([False, True, True]),
                topk_ids=np.zeros((1, 2), np.int32), topk_values=np.zeros((1, 2), np.float16))
    with pytest.raises(SoftTargetsError, match="shard_size"):
        build_soft_targets("unused", {}, 1, lambda s, e: [], shard_size=0)
