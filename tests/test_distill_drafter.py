"""A distilled drafter directory loads as ``distilled:DIR`` and keeps the engine lossless."""

import pytest
import torch
from distill_tiny import VOCAB, teacher_and_examples
from stats import chi_square_pvalue, exact_pair_distribution
from tiny import tiny_gemma3, tiny_qwen3

from babelspec.distill.trainer import TrainConfig, train
from babelspec.drafters import NoDrafter, make_drafter
from babelspec.drafters.artifact import DistilledDrafterError, load_distilled, save_distilled
from babelspec.drafters.students import StudentSpec, build_student
from babelspec.engine import generate
from babelspec.sampling import SamplingConfig
from babelspec.target import Target

SPECS = ["self:1", "self:2,head=corpus"]


@pytest.fixture(scope="module")
def setup():
    return teacher_and_examples()


def distilled_dir(tmp_path, teacher, examples, spec):
    kept = torch.arange(0, VOCAB, 2)  # the restricted head drafts only even tokens
    student = build_student(StudentSpec.parse(spec), teacher, kept_ids=kept)
    config = TrainConfig(steps=4, batch_size=4, grad_accum=1, lr=1e-2, checkpoint_every=10)
    state = train(student, examples, config, tmp_path / "run", progress=False)
    save_distilled(tmp_path / "run", student, teacher, {"mode": "general", "lang": "yor",
                                                         "steps": state.step})
    return tmp_path / "run", student


@pytest.mark.parametrize("spec", SPECS)
def test_saved_drafter_reloads_with_the_same_weights(setup, tmp_path, spec):
    teacher, examples, seqs = setup
    directory, student = distilled_dir(tmp_path, teacher, examples, spec)
    loaded = load_distilled(directory, teacher)
    ids = torch.tensor([seqs[0]])
    with torch.no_grad():
        a = student.model(input_ids=ids).logits
        b = loaded.model(input_ids=ids).logits
    assert torch.equal(a, b)
    if "corpus" in spec:  # zero probability outside the kept tokens, full-vocabulary layout
        assert a.shape[-1] == VOCAB and torch.isinf(a[..., 1::2]).all()
    # Only what is not shared with the target is stored.
    assert (directory / "student.safetensors").stat().st_size < 4 * sum(
        p.numel() for p in teacher.parameters())


@pytest.mark.parametrize("spec", SPECS)
def test_distilled_greedy_output_equals_plain_greedy(setup, tmp_path, spec):
    teacher, examples, seqs = setup
    directory, _ = distilled_dir(tmp_path, teacher, examples, spec)
    target = Target(teacher)
    drafter = make_drafter(f"distilled:{directory}", target)
    assert drafter.name == "distilled:general:yor"
    greedy = SamplingConfig(greedy=True)
    for prompt in (seqs[1][:4], seqs[2][:7]):
        plain = generate(target, NoDrafter(), prompt, gamma=1, max_new_tokens=20, sampling=greedy)
        for gamma in (1, 3, 5):
            spec_out = generate(target, drafter, prompt, gamma=gamma, max_new_tokens=20,
                                sampling=greedy)
            assert spec_out.token_ids == plain.token_ids
            assert spec_out.proposed > 0


@pytest.mark.parametrize("spec", ["self:1,head=corpus"])
def test_distilled_sampling_follows_the_target_distribution(tmp_path, spec):
    """Pairs of sampled tokens follow the target's exact (warped) pair distribution."""
    vocab, prompt = 8, [1, 5, 2]
    teacher = tiny_qwen3(vocab=vocab, seed=3)
    student = build_student(StudentSpec.parse(spec), teacher, kept_ids=torch.tensor([0, 2, 3, 5]))
    save_distilled(tmp_path, student, teacher, {"mode": "task", "lang": "yor", "steps": 0})
    target = Target(teacher)
    drafter = make_drafter(f"distilled:{tmp_path}", target)
    config = SamplingConfig(top_k=6, top_p=0.95, repetition_penalty=1.3, repetition_window=2)
    counts = torch.zeros(vocab * vocab)
    proposed = accepted = 0
    for seed in range(800):
        cfg = SamplingConfig(**{**config.to_dict(), "seed": seed})
        result = generate(target, drafter, prompt, gamma=2, max_new_tokens=2, sampling=cfg)
        t1, t2 = result.token_ids
        counts[t1 * vocab + t2] += 1
        proposed += result.proposed
        accepted += result.accepted
    assert proposed > 0 and 0 < accepted < proposed
    assert chi_square_pvalue(counts, exact_pair_distribution(teacher, prompt, config)) > 1e-3


def test_a_drafter_for_another_target_or_no_drafter_is_refused(setup, tmp_path):
    teacher, examples, _ = setup
    directory, _ = distilled_dir(tmp_path, teacher, examples, "self:1")
    other = Target(tiny_gemma3(vocab=VOCAB, seed=9, layers=3))
    with pytest.raises(DistilledDrafterError, match="distilled on another target"):
        make_drafter(f"distilled:{directory}", other)
    with pytest.raises(DistilledDrafterError, match="not a distilled drafter"):
        make_drafter(f"distilled:{tmp_path / 'nothing'}", Target(teacher))
    with pytest.raises(ValueError, match="needs the directory"):
        make_drafter("distilled:", Target(teacher))


def test_a_drafter_distilled_in_float32_runs_on_the_bf16_target():
    """The embedding fingerprint hashes bf16 values: the float32 teacher a distillation trains
    with and the bf16 target the study runs are one model; another model is still refused."""
    import torch
    from tiny import tiny_gemma3

    from babelspec.drafters.students import embedding_fingerprint

    model = tiny_gemma3(seed=1)
    fp32 = embedding_fingerprint(model)
    assert embedding_fingerprint(model.to(torch.bfloat16)) == fp32
    assert embedding_fingerprint(tiny_gemma3(seed=2)) != fp32
    assert embedding_fingerprint(tiny_gemma3(seed=1), legacy=True) != embedding_fingerprint(
        tiny_gemma3(seed=1).to(torch.bfloat16), legacy=True)  # what older versions recorded
