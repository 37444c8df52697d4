"""Data pipeline: byte tokenizer, token files, corpus builder, the default corpus, the prefetching loader,
and safetensors checkpoints (format round trip, atomic replace)."""
import os
import struct
import json

import numpy as np
import pytest

import dygrad as dg
from dygrad import data as dgdata
from dygrad.safetensors_io import load_file, save_file


def test_byte_tokenizer_round_trip():
    tok = dgdata.ByteTokenizer()
    text = "héllo, wörld ✓\n"
    ids = tok.encode(text)
    assert ids.dtype == np.uint16 and ids.max() < 256 and len(ids) == len(text.encode("utf-8"))
    assert tok.decode(ids) == text


def test_token_file_and_windows(tmp_path):
    path = str(tmp_path / "t.bin")
    dgdata.TokenDataset.write(path, np.arange(1000) % 300)
    ds = dgdata.TokenDataset(path, seq_len=16)
    assert len(ds) == 1000 and ds.tokens.dtype == np.uint16
    x, y = ds.sample(4, np.random.default_rng(0))
    assert x.shape == (4, 16) and y.shape == (4, 16) and x.dtype == np.int64
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])  # targets are inputs shifted by one
    with pytest.raises(ValueError):
        dgdata.TokenDataset.write(path, np.array([70000]))
    with pytest.raises(FileNotFoundError):
        dgdata.TokenDataset(str(tmp_path / "missing.bin"), 16)


def test_build_corpus_from_text_file_and_token_file(tmp_path):
    src = tmp_path / "c.txt"
    src.write_text("abcdefghij" * 100)
    train, val, name = dgdata.build_corpus(str(tmp_path / "out"), path=str(src), val_fraction=0.1)
    assert name == str(src)
    assert os.path.getsize(train) == 2 * 900 and os.path.getsize(val) == 2 * 100
    again = dgdata.build_corpus(str(tmp_path / "out2"), path=train)
    assert os.path.getsize(again[0]) + os.path.getsize(again[1]) == 2 * 900


def test_default_corpus_exists_offline():
    name, text = dgdata.default_corpus_text()
    assert name in dgdata.DEFAULT_CORPUS_DIRS and len(text) > 10000
    if os.path.isdir("/usr/share/games/fortunes"):  # make deps installs Debian's fortunes
        assert name == "/usr/share/games/fortunes" and len(text) > 1_000_000


def test_loader_prefetches_deterministic_batches(tmp_path):
    path = str(tmp_path / "t.bin")
    dgdata.TokenDataset.write(path, np.arange(5000) % 256)
    ds = dgdata.TokenDataset(path, seq_len=8)
    a = dgdata.DataLoader(ds, 3, seed=7)
    batches = [next(a) for _ in range(4)]
    a.close()
    assert isinstance(batches[0][0], dg.Tensor) and tuple(batches[0][0].shape) == (3, 8)
    b = dgdata.DataLoader(ds, 3, seed=7, start_step=2)  # a resumed run sees the same batches
    x2, y2 = next(b)
    b.close()
    np.testing.assert_array_equal(x2.numpy(), batches[2][0].numpy())
    np.testing.assert_array_equal(y2.numpy(), batches[2][1].numpy())
    assert a.wait_seconds >= 0.0


def test_safetensors_round_trip_and_format(tmp_path):
    path = str(tmp_path / "ck.safetensors")
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "n": np.array([1, 2], dtype=np.int64),
              "h": np.ones(3, dtype=np.float16)}
    save_file(arrays, path, {"step": 5})
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    assert header["w"] == {"dtype": "F32", "shape": [2, 3], "data_offsets": header["w"]["data_offsets"]}
    assert header["__metadata__"] == {"step": "5"}
    back, meta = load_file(path)
    assert meta == {"step": "5"}
    for k, v in arrays.items():
        np.testing.assert_array_equal(back[k], v)
        assert back[k].dtype == v.dtype


def test_safetensors_save_is_atomic(tmp_path, monkeypatch):
    path = str(tmp_path / "ck.safetensors")
    save_file({"a": np.zeros(4, dtype=np.float32)}, path, {"step": 1})

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        save_file({"a": np.ones(4, dtype=np.float32)}, path, {"step": 2})
    monkeypatch.undo()
    back, meta = load_file(path)  # the previous checkpoint is intact
    assert meta["step"] == "1" and back["a"].sum() == 0


def test_loader_shares_are_the_whole_batchs_rows(tmp_path):
    """share=(i, n): the i-th contiguous n-th of each batch's rows (dygrad.train --batch-split: the ranks together
    see the single process's batches)."""
    path = str(tmp_path / "t.bin")
    dgdata.TokenDataset.write(path, np.arange(5000) % 256)
    ds = dgdata.TokenDataset(path, seq_len=8)
    whole = dgdata.DataLoader(ds, 6, seed=3)
    parts = [dgdata.DataLoader(ds, 6, seed=3, share=(i, 3)) for i in range(3)]
    for _ in range(2):
        x, y = next(whole)
        shares = [next(p) for p in parts]
        assert all(tuple(s[0].shape) == (2, 8) for s in shares)
        np.testing.assert_array_equal(np.concatenate([s[0].numpy() for s in shares]), x.numpy())
        np.testing.assert_array_equal(np.concatenate([s[1].numpy() for s in shares]), y.numpy())
    for loader in [whole, *parts]:
        loader.close()
    for bad in ((0, 4), (3, 3), (-1, 3), (0, 0)):
        with pytest.raises(ValueError, match=r"\[DataLoader\] share"):
            dgdata.DataLoader(ds, 6, share=bad)
