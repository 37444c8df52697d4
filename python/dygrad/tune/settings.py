"""tune.json: the settings the tuner chose, in the names of dygrad.train's options, and the environment (allocator
settings read when dygrad loads) they need; loaded by `dygrad.train --settings` and dg.tune.apply (docs/tune.md)."""
import json
import os
import sys

FORMAT = "dygrad.tune/1"

# Each setting: its type; the name is dygrad.train's option with '-' as '_' (--grad-accum: grad_accum).
SETTINGS = {
    "threads": int, "synchronize": bool, "deterministic": bool, "unfused": bool, "jit": bool, "jit_level": str,
    "recompute": str, "recompute_budget": str, "dtype": str, "batch_size": int, "grad_accum": int, "bucket_cap_mb": float,
    "gradient_as_bucket_view": bool,
    "batch_split": bool, "ranks": int,  # ranks per machine: checked by dygrad.train, started by the launcher
}
# The environment variables a settings file may carry: the allocator's, read once when dygrad loads (docs/memory.md).
ENVIRONMENT = ("DYGRAD_ALLOC_RELEASE_FRACTION", "DYGRAD_ALLOC_EXPANDABLE_SEGMENTS", "DYGRAD_ALLOC_MEDIUM_SEGMENT")
# The settings a user's own script applies through dg.tune.apply (the others shape the model or the loop).
CONTEXT_SETTINGS = ("threads", "synchronize", "deterministic")


def check(settings, environment=None, where="settings"):
    """Raises ValueError naming an unknown setting or a value of the wrong type; returns (settings, environment)."""
    settings, environment = dict(settings), dict(environment or {})
    for name, value in settings.items():
        kind = SETTINGS.get(name)
        if kind is None:
            raise ValueError(f"[dygrad.tune] {where}: unknown setting {name!r} (known: {', '.join(SETTINGS)})")
        ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            settings[name], ok = float(value), True
        if value is None and name in ("batch_size", "bucket_cap_mb"):
            ok = True  # the default (the config's batch, DDP's bucket size)
        if not ok:
            raise ValueError(f"[dygrad.tune] {where}: setting {name!r} must be {kind.__name__}, got {value!r}")
    for name, value in environment.items():
        if name not in ENVIRONMENT:
            raise ValueError(f"[dygrad.tune] {where}: environment variable {name!r} is not a tunable one "
                             f"({', '.join(ENVIRONMENT)})")
        environment[name] = str(value)
    return settings, environment


def load(path):
    """A settings file as {"settings": {...}, "environment": {...}, ...the rest as written}."""
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"[dygrad.tune] {path}: not a settings file (expected \"format\": \"{FORMAT}\")")
    data["settings"], data["environment"] = check(data.get("settings", {}), data.get("environment"), where=path)
    return data


def save(path, settings, environment=None, **extra):
    settings, environment = check(settings, environment)
    data = {"format": FORMAT, "settings": settings, "environment": environment, **extra}
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    return data


def parser_defaults(data, parser):
    """The settings as argparse defaults of dygrad.train's parser (each must be one of its options)."""
    dests = {a.dest for a in parser._actions}
    missing = [name for name in data["settings"] if name not in dests]
    if missing:
        raise ValueError(f"[dygrad.train] --settings: {', '.join(missing)} not an option of this program")
    return dict(data["settings"])


def train_flags(settings):
    """dygrad.train options that set each setting explicitly (appended last, they override earlier ones)."""
    flags = []
    for name, value in settings.items():
        option = "--" + name.replace("_", "-")
        if SETTINGS[name] is bool:
            flags.append(option if value else "--no-" + name.replace("_", "-"))
        elif value is not None:
            flags += [option, str(value)]
    return flags


def without_settings(args):
    """dygrad.train options with those of the settings taken out (`--opt V`, `--opt=V`, `--flag`, `--no-flag`),
    so `args + ["--settings", file]` trains under the file's settings."""
    options = {"--" + name.replace("_", "-"): kind for name, kind in SETTINGS.items()}
    options.update({"--no-" + name.replace("_", "-"): bool for name, kind in SETTINGS.items() if kind is bool})
    kept, i = [], 0
    while i < len(args):
        option = args[i].split("=", 1)[0]
        kind = options.get(option)
        if kind is None:
            kept.append(args[i])
        elif kind is not bool and "=" not in args[i]:
            i += 1  # its value
        i += 1
    return kept


def environment_missing(data):
    return {k: v for k, v in data.get("environment", {}).items() if os.environ.get(k) != v}


def run_with_environment(data, module, argv):
    """Makes the settings' environment this process's: re-executes `python -m module` with it when run as a
    program (argv None); in-process (argv given) only later processes can see it, and this says so."""
    missing = environment_missing(data)
    if not missing:
        return
    if argv is None:
        os.execve(sys.executable, [sys.executable, "-m", module] + sys.argv[1:], {**os.environ, **missing})
    os.environ.update(missing)
    print(f"[{module}] --settings: {', '.join(f'{k}={v}' for k, v in missing.items())} is read when dygrad loads: "
          "not applied in this process (run it as a program)", file=sys.stderr)


def apply(path=None):
    """dg.tune.apply: applies a settings file's context settings (threads, synchronize, deterministic) to this
    process and returns its settings dict for the script to use (fused ops, jit, recompute, dtype, micro-batch and
    accumulation shape the model and the loop). `path` None: the file named by DYGRAD_TUNE_SETTINGS. The
    environment (allocator settings) is read when dygrad loads: apply warns when this process lacks it."""
    import dygrad as dg
    path = path or os.environ.get("DYGRAD_TUNE_SETTINGS")
    if not path:
        raise ValueError("[dygrad.tune.apply] no settings file given and DYGRAD_TUNE_SETTINGS is not set")
    data = load(path)
    settings = data["settings"]
    if settings.get("threads"):
        dg.set_context(num_threads=settings["threads"])
    dg.set_context(**{k: settings[k] for k in ("synchronize", "deterministic") if k in settings})
    missing = environment_missing(data)
    if missing:
        import warnings
        warnings.warn(f"[dygrad.tune.apply] {path}: {', '.join(f'{k}={v}' for k, v in missing.items())} is read "
                      "when dygrad loads: set it in the environment before starting the script", stacklevel=2)
    return dict(settings)
