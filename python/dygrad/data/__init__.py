"""Data for language-model training: a byte-level tokenizer, token files in the common format (a flat
binary of uint16 ids, memory-mapped, as nanoGPT's train.bin), a corpus builder, the default offline corpus,
and a DataLoader whose background thread prefetches batches so data time hides behind compute."""
from .corpus import DEFAULT_CORPUS_DIRS, build_corpus, default_corpus_text  # noqa: F401
from .loader import DataLoader  # noqa: F401
from .tokenizer import ByteTokenizer  # noqa: F401
from .tokens import TokenDataset  # noqa: F401
