"""Byte-level tokenizer: every UTF-8 byte is a token (vocabulary 256), so any text round-trips exactly."""
import numpy as np


class ByteTokenizer:
    vocab_size = 256

    def encode(self, text):
        """str -> uint16 array of byte values."""
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)

    def decode(self, ids):
        """ids (iterable of ints) -> str; invalid UTF-8 sequences become U+FFFD, as bytes.decode(errors='replace')."""
        return bytes(int(i) & 0xFF for i in ids).decode("utf-8", errors="replace")
