"""torch.nn.attention.flex_attention: stand-ins (dygrad's attention takes a causal flag or a mask, not score and
mask modifiers yet). The names import, so libraries that gate flex attention on torch's version load; calling
flex_attention or building a block mask raises NotProvidedError. The mask combinators are plain functions and
work."""
from typing import NamedTuple

from ..._not_provided import stand_in, stand_in_function

_DEFAULT_SPARSE_BLOCK_SIZE = 128  # torch's block size of a BlockMask, which libraries read at import


class AuxRequest(NamedTuple):
    """Which auxiliary outputs flex_attention should return (torch's request; a plain value)."""
    lse: bool = False
    max_scores: bool = False


_WHY = "no flex attention (score_mod / block masks) yet; use scaled_dot_product_attention"
BlockMask = stand_in("BlockMask", __name__, _WHY)
flex_attention = stand_in_function("torch.nn.attention.flex_attention.flex_attention", _WHY)
create_block_mask = stand_in_function("torch.nn.attention.flex_attention.create_block_mask", _WHY)
create_mask = stand_in_function("torch.nn.attention.flex_attention.create_mask", _WHY)


def and_masks(*mask_mods):
    """The mask_mod that keeps a position when every one of mask_mods does."""
    def combined(b, h, q_idx, kv_idx):
        result = True
        for mod in mask_mods:
            result = result & mod(b, h, q_idx, kv_idx)
        return result
    return combined


def or_masks(*mask_mods):
    """The mask_mod that keeps a position when any of mask_mods does."""
    def combined(b, h, q_idx, kv_idx):
        result = False
        for mod in mask_mods:
            result = result | mod(b, h, q_idx, kv_idx)
        return result
    return combined
