"""The default corpus and the corpus builder.

Default corpus: the fortune-cookie database of Debian's `fortunes` package (quotations, poems, literature
and jokes in English, about 2.5 MB of real text), which the project installs from Debian (`make deps`) and
which therefore exists offline on every machine that ran it. Debian's `common-licenses` (always present,
but only ~0.3 MB of legal prose) is the fallback, so training still works on a machine without `fortunes`.
"""
import glob
import os

import numpy as np

from .tokenizer import ByteTokenizer
from .tokens import TokenDataset

DEFAULT_CORPUS_DIRS = ("/usr/share/games/fortunes", "/usr/share/fortunes", "/usr/share/common-licenses")


def default_corpus_text():
    """(name, text) of the default corpus, or raises FileNotFoundError naming what to install."""
    for directory in DEFAULT_CORPUS_DIRS:
        files = sorted(f for f in glob.glob(os.path.join(directory, "**", "*"), recursive=True)
                       if os.path.isfile(f) and not f.endswith((".dat", ".u8")) and not os.path.islink(f))
        if not files:
            continue
        parts = []
        for f in files:
            with open(f, "rb") as fh:
                parts.append(fh.read().decode("utf-8", errors="replace"))
        text = "\n".join(parts)
        if len(text) > 10000:
            return directory, text
    raise FileNotFoundError("no default corpus found: install Debian's 'fortunes' package (make deps does) or "
                            "pass --data FILE")


def build_corpus(out_dir, text=None, path=None, val_fraction=0.1):
    """Tokenises a text (or a text file, or a token file `*.bin` used as is) into out_dir/train.bin and
    out_dir/val.bin (the last `val_fraction` of the tokens). Returns (train_path, val_path, source_name)."""
    os.makedirs(out_dir, exist_ok=True)
    train_path, val_path = os.path.join(out_dir, "train.bin"), os.path.join(out_dir, "val.bin")
    if path is not None and path.endswith(".bin"):
        ids = np.fromfile(path, dtype="<u2")
        name = path
    else:
        if path is not None:
            with open(path, "rb") as fh:
                text = fh.read().decode("utf-8", errors="replace")
            name = path
        elif text is None:
            name, text = default_corpus_text()
        else:
            name = "<text>"
        ids = ByteTokenizer().encode(text)
    n_val = max(int(len(ids) * val_fraction), 1)
    TokenDataset.write(train_path, ids[:-n_val])
    TokenDataset.write(val_path, ids[-n_val:])
    return train_path, val_path, name
