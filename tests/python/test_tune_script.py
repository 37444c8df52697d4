"""python3 -m dygrad.tune -- SCRIPT.py: a training script of the user's own, tuned unchanged (docs/tune.md, "A script
of your own"): the scratch overlay and its write guard, a tuner run on a tiny script that leaves the user's
directory untouched, and `python3 -m dygrad.tune.script --settings` applying a settings file to a script."""
import hashlib
import json
import os
import subprocess
import sys
import textwrap

from dygrad.tune import load

GUARD = r"""
import os, shutil, sys
from dygrad.tune.scratch import ScratchGuard, link_entries
user, root = sys.argv[1], sys.argv[2]
link_entries(user, os.path.join(root, "run"))
os.chdir(os.path.join(root, "run"))
guard = ScratchGuard(root).install()
print(open("data/a.txt").read())                                  # reads go through the links
with open("new.txt", "w") as f: f.write("new")                    # a new file: in the scratch directory
with open("notes.txt", "a") as f: f.write(" appended")            # a linked file: copied up, then appended to
with open("data/a.txt", "w") as f: f.write("over")                # through a linked directory: copied up
fd = os.open("data/c.txt", os.O_WRONLY | os.O_TRUNC); os.write(fd, b"c2"); os.close(fd)
os.makedirs("data/sub/deeper", exist_ok=True)
os.remove("data/b.txt")                                           # removes the link only
os.rename("notes.txt", "renamed.txt")
print(open("renamed.txt").read())
shutil.rmtree("data")                                             # the scratch copy and its links
for path in (os.path.join(user, "x.txt"), os.path.join(user, "notes.txt")):
    try:
        open(path, "a")
    except PermissionError as e:
        print("refused", e)
print(guard.refused == [os.path.join(user, "x.txt"), os.path.join(user, "notes.txt")])
"""


def snapshot(root):
    """Every file under root: its content's digest, size and modification time (a write changes one of them)."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            digest = hashlib.sha256(open(path, "rb").read()).hexdigest() if name in files else "dir"
            found[os.path.relpath(path, root)] = (digest, st.st_size, st.st_mtime_ns)
    return found


def test_the_scratch_overlay_reads_the_users_files_and_copies_up_writes(tmp_path):
    user, root = tmp_path / "user", tmp_path / "scratch"
    (user / "data").mkdir(parents=True)
    root.mkdir()
    (user / "notes.txt").write_text("original")
    for name, text in (("a.txt", "a"), ("b.txt", "b"), ("c.txt", "c")):
        (user / "data" / name).write_text(text)
    before = snapshot(user)
    done = subprocess.run([sys.executable, "-c", GUARD, str(user), str(root)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["a", "original appended"]
    assert len([line for line in lines if line.startswith("refused [dygrad.tune] a trial writes only inside its "
                                                          "scratch directory")]) == 2
    assert lines[-1] == "True"
    assert snapshot(user) == before  # not one byte, name or time changed
    assert (root / "run" / "new.txt").read_text() == "new" and not (root / "run" / "data").exists()


SCRIPT = """
import os, sys
import numpy as np
import dygrad as dg
import mylib                                        # the script's own module, beside it

dg.set_num_threads(1)                               # its own choice: the tuner cannot change it from outside
data = np.load("data.npy")                          # a relative read of the user's file
x, y = dg.tensor(data[:, :-1]), dg.tensor(data[:, -1:])
dg.manual_seed(0)
model = mylib.model()
opt = dg.optim.AdamW(model.parameters(), lr=1e-2)
os.makedirs("out", exist_ok=True)
log = open("log.txt", "a")                          # the user's log, appended to
for step in range(int(sys.argv[1])):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    log.write(f"{step} {loss.item()}\\n")
    dg.save(model.state_dict(), "out/model.pt")     # a checkpoint every step
"""


def user_directory(tmp_path):
    import numpy as np
    user = tmp_path / "user"
    user.mkdir()
    (user / "train_script.py").write_text(SCRIPT)
    (user / "mylib.py").write_text("import dygrad as dg\n\ndef model():\n    return dg.nn.Sequential(dg.nn.Linear("
                                   "16, 64), dg.nn.GELU(), dg.nn.Linear(64, 1))\n")
    np.save(user / "data.npy", np.random.default_rng(0).standard_normal((256, 17)).astype(np.float32))
    (user / "log.txt").write_text("a previous run\n")
    (user / "out").mkdir()
    (user / "out" / "model.pt").write_bytes(b"the user's checkpoint")
    return user


def test_a_script_is_tuned_unchanged_without_touching_the_users_directory(tmp_path):
    user = user_directory(tmp_path)
    before = snapshot(user)
    results = tmp_path / "results"
    results.mkdir()
    cmd = [sys.executable, "-m", "dygrad.tune", "--budget", "40s", "--steps", "6", "--warmup", "2",
           "--output", str(results / "tune.json"), "--report", str(results / "report.html"),
           "--", "python3", "train_script.py", "100"]
    done = subprocess.run(cmd, cwd=user, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr + done.stdout
    assert snapshot(user) == before  # its checkpoint and log were written in the scratch directory only
    trials = json.load(open(results / "report.trials.json"))
    assert trials["target"] == "script" and trials["baseline"]["threads"] == 1
    by_name = {t["candidate"]: t for t in trials["trials"]}
    assert [t["candidate"] for t in trials["trials"]].count("threads: all cores") == 1  # not retried: it cannot be
    threads = by_name["threads: all cores"]  # the script sets its threads itself: detected, not measured wrong
    assert not threads["kept"] and "the script sets threads itself (to 1, not the trial's 2)" in threads["reason"]
    allocator = by_name["allocator: keep cached segments"]  # measured A B (A B), kept or not by its time
    assert allocator["rounds"] >= 1 and allocator["loss_difference"] == 0.0
    assert allocator["reason"] and not allocator["reason"].startswith("failed"), allocator["reason"]
    assert "python3 -m dygrad.tune.script" in allocator["reproduce"] and "DYGRAD_ALLOC_RELEASE_FRACTION=-1" in \
        allocator["reproduce"]
    refused = {r["candidate"]: r["reason"] for r in trials["refused"]}
    assert "needs dygrad.train's --no-unfused" in refused["fused ops"]
    assert "needs dygrad.train's --jit" in refused["jit"]
    data = load(results / "tune.json")
    assert data["target"] == "script" and data["settings"]["threads"] == 1
    kept = any(t["kept"] for t in trials["trials"] if t["candidate"] == allocator["candidate"])
    assert data["environment"] == ({"DYGRAD_ALLOC_RELEASE_FRACTION": "-1"} if kept else {})
    assert f"python3 -m dygrad.tune.script --settings {results / 'tune.json'} -- train_script.py 100" in done.stdout


def test_a_settings_file_applies_to_a_script_module(tmp_path):
    from dygrad.tune.settings import save
    (tmp_path / "show.py").write_text(textwrap.dedent("""
        import sys
        import dygrad as dg
        c = dg.get_context()
        print(sys.argv[1:], c.num_threads, c.synchronize, c.deterministic)
    """))
    save(str(tmp_path / "tune.json"), {"threads": 1, "synchronize": True, "deterministic": True, "unfused": False})
    done = subprocess.run([sys.executable, "-m", "dygrad.tune.script", "--settings", "tune.json", "--no-synchronize",
                           "--", "-m", "show", "--flag"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['--flag']", "1", "False", "True"]  # the option overrides the file's
    assert "unfused shape the model or the loop" in done.stderr


def test_the_profilers_exports_written_by_cpp_are_seen_by_the_guard(tmp_path):
    """export_chrome_trace and its siblings write from C++: they raise Python's "open" audit event first, so a trial
    that exports a trace over the user's file writes a scratch copy."""
    user, root = tmp_path / "user", tmp_path / "scratch"
    user.mkdir()
    root.mkdir()
    (user / "trace.json").write_text("the user's trace")
    code = textwrap.dedent("""
        import os, sys
        import dygrad as dg
        from dygrad.tune.scratch import ScratchGuard, link_entries
        link_entries(sys.argv[1], os.path.join(sys.argv[2], "run"))
        os.chdir(os.path.join(sys.argv[2], "run"))
        ScratchGuard(sys.argv[2]).install()
        with dg.profiler.profile() as prof:
            (dg.ones(4) * 2).sum().item()
        prof.export_chrome_trace("trace.json")
        try:
            prof.export_breakdown_json(os.path.join(sys.argv[1], "breakdown.json"))
        except PermissionError:
            print("refused")
    """)
    done = subprocess.run([sys.executable, "-c", code, str(user), str(root)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.split() == ["refused"], done.stderr
    assert (user / "trace.json").read_text() == "the user's trace" and not (user / "breakdown.json").exists()
    assert '"traceEvents"' in (root / "run" / "trace.json").read_text()
