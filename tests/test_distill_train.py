"""Distillation training: the loss falls, rows line up, the target is left alone, a killed
run resumes from its checkpoint to the same step count and the same weights."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import distill_tiny
import numpy as np
import pytest
import torch
from distill_tiny import VOCAB, teacher_and_examples
from safetensors.torch import load_file
from tiny import tiny_qwen3

from babelspec.distill.evaluate import acceptance_on, kd_loss_on
from babelspec.distill.losses import topk_kd_loss
from babelspec.distill.teacher import warped_targets
from babelspec.distill.trainer import TrainConfig, train
from babelspec.drafters.students import Student, StudentSpec, StudentSpecError, build_student
from babelspec.sampling import SamplingConfig

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def setup():
    return teacher_and_examples()


def quick(steps=12, **kw):
    return TrainConfig(steps=steps, batch_size=4, grad_accum=2, lr=1e-2, warmup_ratio=0.1,
                       checkpoint_every=100, **kw)


@pytest.mark.parametrize("spec", ["self:1", "self:1,head=corpus"])
@pytest.mark.parametrize("loss", ["ce", "kl"])
def test_loss_falls_and_acceptance_rises(setup, tmp_path, spec, loss):
    teacher, examples, seqs = setup
    sampling = SamplingConfig(top_k=20, top_p=0.9)
    targets = [warped_targets(teacher, s, 1, sampling) for s in seqs[:6]]
    kept = torch.arange(0, VOCAB - 8)  # a head that cannot emit the last 8 tokens
    student = build_student(StudentSpec.parse(spec), teacher, kept_ids=kept)
    before_loss = kd_loss_on(student, examples, loss)
    before_acc = acceptance_on(student, targets, sampling)["expected_acceptance"]
    state = train(student, examples, quick(loss=loss), tmp_path, progress=False)
    assert state.step == 12 and len(state.losses) == 12
    assert kd_loss_on(student, examples, loss) < before_loss - 0.05
    assert np.mean(state.losses[-3:]) < np.mean(state.losses[:3])
    assert acceptance_on(student, targets, sampling)["expected_acceptance"] > before_acc + 0.02


def test_a_full_copy_of_the_teacher_scores_as_the_teacher(setup):
    """Rows line up: a student that *is* the teacher has loss -sum p log p over the top-k and
    expected acceptance 1 against the teacher's warped distributions."""
    teacher, examples, seqs = setup
    student = build_student(StudentSpec.parse("self:3"), teacher)
    own = np.mean([-(np.exp(e.topk_values) * e.topk_values).sum(1).mean() for e in examples[:4]])
    per_example = [kd_loss_on(student, [e]) for e in examples[:4]]
    assert np.mean(per_example) == pytest.approx(own, abs=1e-4)
    sampling = SamplingConfig.paper()
    targets = [warped_targets(teacher, s, 5, sampling) for s in seqs[:4]]
    assert acceptance_on(student, targets, sampling)["expected_acceptance"] == pytest.approx(1.0, abs=1e-4)


def test_training_a_self_student_leaves_the_target_unchanged(setup, tmp_path):
    teacher, examples, _ = setup
    before = {n: t.clone() for n, t in teacher.state_dict().items()}
    student = build_student(StudentSpec.parse("self:2"), teacher)
    # The embedding (and tied head) is shared, not copied; the layers are copies.
    assert student.model.model.embed_tokens.weight.data_ptr() == \
        teacher.model.embed_tokens.weight.data_ptr()
    assert student.model.model.layers[0].mlp.up_proj.weight.data_ptr() != \
        teacher.model.layers[0].mlp.up_proj.weight.data_ptr()
    assert len(student.model.model.layers) == 2 and student.model.config.num_hidden_layers == 2
    assert len(teacher.model.layers) == 3 and teacher.config.num_hidden_layers == 3
    train(student, examples, quick(steps=3), tmp_path, progress=False)
    for name, tensor in teacher.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    trainable = {n for n, p in student.named_parameters() if p.requires_grad}
    assert not any("embed_tokens" in n for n in trainable)


def test_a_real_small_model_student_trains_all_its_parameters(setup, tmp_path):
    _, examples, _ = setup
    model = tiny_qwen3(vocab=VOCAB, seed=5)
    student = Student(model, StudentSpec(kind="model", path="tiny"), VOCAB)
    before = kd_loss_on(student, examples)
    train(student, examples, quick(), tmp_path, progress=False)
    assert kd_loss_on(student, examples) < before - 0.05


def test_topk_loss_matches_its_definition():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 30, generator=g)
    teacher = torch.log_softmax(torch.randn(5, 30, generator=g) * 2, -1)
    t_logp, t_ids = teacher.topk(6, -1)
    s_logp = torch.log_softmax(logits, -1).gather(1, t_ids)
    ce = -(t_logp.exp() * s_logp).sum(1).mean()
    assert topk_kd_loss(logits, t_ids, t_logp, "ce") == pytest.approx(float(ce), abs=1e-6)
    renorm = torch.softmax(t_logp, -1)
    kl = (renorm * (renorm.log() - s_logp)).sum(1).mean()
    assert topk_kd_loss(logits, t_ids, t_logp, "kl") == pytest.approx(float(kl), abs=1e-6)
    with pytest.raises(ValueError, match="unknown loss"):
        topk_kd_loss(logits, t_ids, t_logp, "mse")


def run_tiny(out_dir: Path, slow: bool) -> subprocess.Popen:
    args = [sys.executable, str(HERE / "distill_tiny.py"), str(out_dir)] + (["--slow"] if slow else [])
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_a_killed_run_resumes_to_the_same_step_count_and_weights(tmp_path):
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    proc = run_tiny(killed, slow=True)
    pointer = killed / "checkpoints" / "latest.json"
    deadline = time.time() + 600  # a busy machine can take minutes to start a Python with torch
    while time.time() < deadline and proc.poll() is None:
        if pointer.exists() and json.loads(pointer.read_text())["step"] >= 4:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stopped_at = json.loads(pointer.read_text())["step"]
    assert 4 <= stopped_at < 10

    resumed = run_tiny(killed, slow=False)
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    assert f"done step=10 resumed_from=[{stopped_at}]" in out
    threads = torch.get_num_threads()
    try:  # the uninterrupted reference run, in this process (same single-thread arithmetic)
        distill_tiny.run(str(clean), slow=False)
    finally:
        torch.set_num_threads(threads)

    state_k = json.loads((killed / "checkpoints" / "step-0000010" / "state.json").read_text())
    state_c = json.loads((clean / "checkpoints" / "step-0000010" / "state.json").read_text())
    assert state_k["state"]["step"] == state_c["state"]["step"] == 10
    assert np.allclose(state_k["state"]["losses"], state_c["state"]["losses"], atol=1e-6)
    curve_k, curve_c = state_k["state"]["curve"], state_c["state"]["curve"]
    assert [p["step"] for p in curve_k] == [p["step"] for p in curve_c] == [0, 2, 4, 6, 8, 10]
    assert np.allclose([p["dev_loss"] for p in curve_k], [p["dev_loss"] for p in curve_c], atol=1e-6)
    assert state_k["state"]["best_step"] == state_c["state"]["best_step"]
    wk = load_file(str(killed / "checkpoints" / "step-0000010" / "student.safetensors"))
    wc = load_file(str(clean / "checkpoints" / "step-0000010" / "student.safetensors"))
    assert wk.keys() == wc.keys()
    for name in wk:
        assert torch.allclose(wk[name], wc[name], atol=1e-6), name
    assert not list((killed / "checkpoints").glob(".*tmp*"))


def test_bad_training_settings_and_student_specs_are_rejected():
    with pytest.raises(ValueError, match="train.steps"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="train.loss"):
        TrainConfig(loss="mse")
    with pytest.raises(ValueError, match="warmup_ratio"):
        TrainConfig(warmup_ratio=1.5)
    with pytest.raises(ValueError, match=r"unknown \[train\] keys"):
        TrainConfig.from_dict({"stpes": 3})
    for bad in ["self:x", "self:0", "self:2,head=tiny", "lora:3", "model:"]:
        with pytest.raises(StudentSpecError, match="student spec|self:K"):
            StudentSpec.parse(bad)
    teacher = teacher_and_examples(n=1, length=3)[0]
    with pytest.raises(StudentSpecError, match="has 3 layers"):
        build_student(StudentSpec.parse("self:7"), teacher)


def test_training_stops_when_the_dev_loss_stops_improving_and_keeps_the_best_weights(setup, tmp_path):
    """The dev split is another teacher's text: fitting the training teacher soon stops helping
    on it. Training stops after `patience` evaluations without a gain, and the student holds
    the weights of the best dev loss, not the last step's."""
    from babelspec.distill.trainer import dev_loss

    teacher, examples, _ = setup
    _, other, _ = teacher_and_examples(n=8, seed=1)
    student = build_student(StudentSpec.parse("self:1"), teacher)
    config = quick(steps=200, eval_every=2, dev_examples=len(other), patience=3)
    state = train(student, examples, config, tmp_path, dev=other, progress=False)
    curve = [p["dev_loss"] for p in state.curve]
    assert state.stopped == "patience" and state.step < 200
    assert [p["step"] for p in state.curve] == list(range(0, state.step + 1, 2))  # step 0, then every 2
    assert state.best_step == state.curve[int(np.argmin(curve))]["step"] < state.step
    assert all(later >= min(curve) for later in curve[-3:])  # the last `patience` points gained nothing
    assert dev_loss(student, other, config) == pytest.approx(state.best_dev_loss, rel=1e-5)
    # A rerun of the finished run trains no further.
    again = train(build_student(StudentSpec.parse("self:1"), teacher), examples, config, tmp_path, dev=other,
                  progress=False)
    assert (again.step, again.stopped, again.best_step) == (state.step, "patience", state.best_step)


def test_a_time_budget_ends_training(setup, tmp_path):
    teacher, examples, _ = setup
    student = build_student(StudentSpec.parse("self:1"), teacher)
    state = train(student, examples, quick(steps=50, budget_seconds=1e-6), tmp_path, progress=False)
    assert state.stopped == "budget" and state.step == 1


def test_early_stopping_needs_a_dev_split_and_evaluations():
    with pytest.raises(ValueError, match="train.patience needs train.eval_every and train.dev_examples"):
        TrainConfig(patience=3, dev_examples=0)
