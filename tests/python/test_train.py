"""The main job end to end on a small setting: the loss falls, metrics.jsonl and the checkpoint are written,
and a run stopped mid-way and resumed reproduces the uninterrupted run's losses exactly."""
import json
import os

import dygrad as dg
from dygrad import train

SMALL = ["--config", "tiny", "--seq-len", "32", "--batch-size", "2", "--lr", "3e-3", "--warmup", "1",
         "--eval-interval", "3", "--eval-batches", "1", "--sample-tokens", "8", "--quiet"]


def losses(out):
    with open(os.path.join(out, "metrics.jsonl")) as fh:
        return {r["step"]: r["loss"] for r in map(json.loads, fh)}


def test_train_loss_falls_and_writes_outputs(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert train.main(SMALL + ["--steps", "8", "--out", out]) == 0
    rec = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    assert [r["step"] for r in rec] == list(range(1, 9))
    assert rec[-1]["loss"] < rec[0]["loss"] - 0.5
    assert all(r["tokens_per_s"] > 0 and 0 < r["mfu"] for r in rec)
    assert "val_loss" in rec[2] and "val_loss" in rec[-1]
    assert os.path.exists(os.path.join(out, "checkpoint.safetensors"))
    assert "sample:" in capsys.readouterr().out


def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    full, split = str(tmp_path / "full"), str(tmp_path / "split")
    train.main(SMALL + ["--steps", "6", "--out", full, "--sample-tokens", "0"])
    train.main(SMALL + ["--steps", "6", "--out", split, "--save-interval", "1", "--halt-after", "3",
                        "--sample-tokens", "0"])
    assert sorted(losses(split)) == [1, 2, 3]
    train.main(SMALL + ["--steps", "6", "--out", split, "--resume", "--sample-tokens", "0"])
    assert losses(split) == losses(full)  # bitwise: same batches, weights, optimizer state and RNG


def test_help_lists_the_options(capsys):
    try:
        train.main(["--help"])
    except SystemExit as e:
        assert e.code == 0
    text = capsys.readouterr().out
    for opt in ("--config", "--steps", "--data", "--out", "--resume", "--profile"):
        assert opt in text
