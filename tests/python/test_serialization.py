"""Issue 12 item 2: dygrad.save / dygrad.load read and write torch 2.13's checkpoint format: files saved by
torch load in dygrad and the other way round (state dicts of every dtype, shared and strided storages,
optimizer states that resume exactly, nested containers), mmap, map_location, safetensors, and the
weights_only allow-list that refuses a crafted file instead of running it."""
import collections
import dataclasses
import io
import os
import pickle
import zipfile

import numpy as np
import pytest
import torch

import dygrad as dg
from dygrad.safetensors_io import save_file


def torch_state():
    torch.manual_seed(0)
    base = torch.randn(6, 5)
    return collections.OrderedDict([
        ("w", torch.randn(4, 3)), ("b16", torch.randn(3).to(torch.bfloat16)), ("h", torch.randn(2, 2).half()),
        ("d", torch.randn(3, dtype=torch.float64)), ("i", torch.arange(5)), ("i32", torch.arange(3, dtype=torch.int32)),
        ("u8", torch.arange(4, dtype=torch.uint8)), ("mask", torch.tensor([True, False, True])),
        ("scalar", torch.tensor(2.5)), ("empty", torch.zeros(0, 3)),
        ("view", base[1:4, ::2]), ("transposed", base.t()), ("same", base),  # one storage, three tensors
    ])


def to_numpy(t):
    return t.float().numpy() if str(t.dtype).endswith("bfloat16") else t.numpy()


def assert_same_tensors(d, t):
    assert str(d.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    assert tuple(d.shape) == tuple(t.shape)
    np.testing.assert_array_equal(to_numpy(d.detach()), to_numpy(t.detach()))


@pytest.mark.parametrize("mmap", [False, True])
def test_torch_save_then_dygrad_load(tmp_path, mmap):
    path = str(tmp_path / "model.pt")
    state = torch_state()
    torch.save(state, path)
    loaded = dg.load(path, mmap=mmap)
    assert type(loaded) is collections.OrderedDict and list(loaded) == list(state)
    for key in state:
        assert isinstance(loaded[key], dg.Tensor)
        assert_same_tensors(loaded[key], state[key])


@pytest.mark.parametrize("mmap", [False, True])
def test_dygrad_save_then_torch_load(tmp_path, mmap):
    path = str(tmp_path / "model.pt")
    state = torch_state()
    ours = dg.load(_saved_by_torch(tmp_path, state))  # dygrad tensors of every kind, views included
    dg.save(ours, path)
    back = torch.load(path, mmap=mmap)  # weights_only=True: torch's own allow-list accepts the file
    assert list(back) == list(state)
    for key in state:
        assert_same_tensors(back[key], state[key])
    # a tensor saved twice is one storage in the file, as torch writes it
    tied = {"a": ours["w"], "b": ours["w"], "other": ours["d"]}
    dg.save(tied, path)
    back = torch.load(path)
    assert back["a"].data_ptr() == back["b"].data_ptr() != back["other"].data_ptr()


def _saved_by_torch(tmp_path, obj):
    path = str(tmp_path / "from_torch.pt")
    torch.save(obj, path)
    return path


def test_nested_containers_round_trip_both_ways(tmp_path):
    obj = {"list": [1, 2.5, "s", None, True], "tuple": (torch.ones(2), (3, 4)), "nested": {"x": {"y": [torch.zeros(1)]}},
           "dtype": torch.float16, "size": torch.Size([2, 3]), "device": torch.device("cpu"), "set": {1, 2},
           "bytes": b"\x00\x01", "ordered": collections.OrderedDict(a=1)}
    loaded = dg.load(_saved_by_torch(tmp_path, obj))
    assert loaded["list"] == obj["list"] and loaded["set"] == {1, 2} and loaded["bytes"] == b"\x00\x01"
    assert loaded["dtype"] is dg.float16 and loaded["size"] == dg.Size([2, 3]) and loaded["device"] == "cpu"
    assert loaded["tuple"][0].tolist() == [1.0, 1.0] and loaded["tuple"][1] == (3, 4)
    assert loaded["nested"]["x"]["y"][0].tolist() == [0.0]
    buffer = io.BytesIO()
    dg.save(loaded, buffer)
    buffer.seek(0)
    back = torch.load(buffer)
    assert back["dtype"] is torch.float16 and back["size"] == torch.Size([2, 3]) and back["device"] == torch.device("cpu")
    assert back["list"] == obj["list"] and back["ordered"] == obj["ordered"] and back["set"] == {1, 2}
    assert back["nested"]["x"]["y"][0].tolist() == [0.0]
    buffer.seek(0)
    again = dg.load(buffer)
    assert again["tuple"][0].tolist() == [1.0, 1.0]


def test_parameters_and_requires_grad_survive(tmp_path):
    obj = {"p": torch.nn.Parameter(torch.ones(2)), "g": torch.ones(3).requires_grad_()}
    loaded = dg.load(_saved_by_torch(tmp_path, obj))
    assert isinstance(loaded["p"], dg.nn.Parameter) and loaded["p"].requires_grad and loaded["g"].requires_grad
    path = str(tmp_path / "p.pt")
    dg.save(loaded, path)
    back = torch.load(path)
    assert isinstance(back["p"], torch.nn.Parameter) and back["g"].requires_grad


def model_pair():
    torch.manual_seed(1)
    t_model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 3))
    d_model = dg.nn.Sequential(dg.nn.Linear(4, 8), dg.nn.Linear(8, 3))
    return d_model, t_model


def train(model, opt, framework, steps, seed):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        x = framework.tensor(rng.standard_normal((5, 4)).astype(np.float32))
        loss = (model(x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.parametrize("name,options", [("AdamW", dict(lr=1e-2, weight_decay=0.1)), ("SGD", dict(lr=0.1, momentum=0.9))])
def test_model_and_optimizer_state_round_trip_both_ways(tmp_path, name, options):
    d_model, t_model = model_pair()
    t_opt = getattr(torch.optim, name)(t_model.parameters(), **options)
    train(t_model, t_opt, torch, 3, seed=0)
    path = str(tmp_path / "ckpt.pt")
    torch.save({"model": t_model.state_dict(), "optimizer": t_opt.state_dict(), "step": 3}, path)
    # torch.save -> dygrad.load: dygrad resumes and follows torch's trajectory
    ckpt = dg.load(path)
    d_model.load_state_dict(ckpt["model"])
    d_opt = getattr(dg.optim, name)(d_model.parameters(), **options)
    d_opt.load_state_dict(ckpt["optimizer"])
    if name == "AdamW":
        assert d_opt.state[next(iter(d_model.parameters()))]["step"].dtype == dg.float32
    train(d_model, d_opt, dg, 3, seed=1)
    # dygrad.save -> torch.load: torch resumes from dygrad's state and both agree
    dg.save({"model": d_model.state_dict(), "optimizer": d_opt.state_dict(), "step": 6}, path)
    train(t_model, t_opt, torch, 3, seed=1)
    back = torch.load(path)
    for key, value in t_model.state_dict().items():
        np.testing.assert_allclose(back["model"][key].numpy(), value.numpy(), rtol=1e-5, atol=1e-7)
    fresh_model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 3))
    fresh_model.load_state_dict(back["model"])
    fresh = getattr(torch.optim, name)(fresh_model.parameters(), **options)
    fresh.load_state_dict(back["optimizer"])
    for (k, theirs), ours in zip(t_opt.state_dict()["state"].items(), back["optimizer"]["state"].values()):
        for field, value in theirs.items():
            assert value.dtype == ours[field].dtype, field
            np.testing.assert_allclose(ours[field].numpy(), value.numpy(), rtol=1e-5, atol=1e-7)
    assert back["optimizer"]["param_groups"] == t_opt.state_dict()["param_groups"]
    train(fresh_model, fresh, torch, 1, seed=2)  # torch steps on from dygrad's optimizer state


def crafted_checkpoint(path, payload_pickle):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", payload_pickle)
        zf.writestr("archive/byteorder", "little")
        zf.writestr("archive/version", "3\n")


class RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("wrap", ["zip", "in_a_state_dict"])
def test_a_crafted_file_that_runs_code_is_refused(tmp_path, wrap):
    marker = tmp_path / "pwned"
    payload = RunsCode(str(marker)) if wrap == "zip" else {"weight": [1.0], "evil": RunsCode(str(marker))}
    path = str(tmp_path / "evil.pt")
    crafted_checkpoint(path, pickle.dumps(payload, protocol=2))
    with pytest.raises(pickle.UnpicklingError, match=r"(posix|os)\.system"):
        torch.load(path)  # torch refuses it too
    with pytest.raises(pickle.UnpicklingError, match=r"Weights only load failed.*(posix|os)\.system"):
        dg.load(path)
    assert not marker.exists()
    # an attempt through the storage channel is refused as well
    crafted_checkpoint(path, b"\x80\x02(X\x07\x00\x00\x00storagecos\nsystem\nq\x00tQ.")
    with pytest.raises(pickle.UnpicklingError, match="os.system"):
        dg.load(path)
    with pytest.raises(RuntimeError, match="Can not safely load weights"):
        dg.load(path, pickle_module=pickle)


@dataclasses.dataclass
class Config:
    n_layer: int = 2
    dropout: float = 0.0


def test_safe_globals_allow_named_classes_only(tmp_path):
    path = _saved_by_torch(tmp_path, {"config": Config(3), "w": torch.ones(2)})
    with pytest.raises(pickle.UnpicklingError, match="Config"):
        dg.load(path)
    with dg.serialization.safe_globals([Config]):
        assert dg.load(path)["config"] == Config(3)
    assert Config not in dg.serialization.get_safe_globals()
    dg.serialization.add_safe_globals([Config])
    try:
        assert dg.load(path)["config"].n_layer == 3
    finally:
        dg.serialization.clear_safe_globals()
    assert dg.load(path, weights_only=False)["config"] == Config(3)  # the caller trusts the file


def test_map_location_as_torch_accepts_it(tmp_path):
    path = _saved_by_torch(tmp_path, {"w": torch.arange(3.0)})
    for location in ("cpu", dg.device("cpu"), {"cpu": "cpu"}, lambda storage, loc: storage, None):
        assert dg.load(path, map_location=location)["w"].tolist() == [0.0, 1.0, 2.0]
    for lib in (dg, torch):  # as torch without CUDA (devices: tests/python/test_devices.py)
        with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device"):
            lib.load(path, map_location="cuda")


def test_mmap_needs_a_path_and_garbage_is_refused(tmp_path):
    path = _saved_by_torch(tmp_path, {"w": torch.ones(2)})
    with open(path, "rb") as fh:
        with pytest.raises(ValueError, match="file path"):
            dg.load(fh, mmap=True)
    bad = tmp_path / "bad.pt"
    bad.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(RuntimeError, match="legacy"):
        dg.load(str(bad))


def test_load_reads_safetensors(tmp_path):
    path = str(tmp_path / "model.safetensors")
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "ids": np.arange(4, dtype=np.int64)}
    save_file(arrays, path)
    loaded = dg.load(path)
    assert sorted(loaded) == ["ids", "w"]
    assert loaded["w"].tolist() == arrays["w"].tolist() and loaded["ids"].dtype == dg.int64
