"""Writes the golden payloads of kvevents' tests with vLLM's own classes and msgspec.

Run with vLLM 0.32's venv (tests never need Python; rerun after a vLLM upgrade):
    .vllm-cpu/venv/bin/python kvevents/testdata/golden.py kvevents/testdata
"""
import sys
from typing import Optional

import msgspec
from vllm.distributed.kv_events import (AllBlocksCleared, BlockRemoved,
                                        BlockStored, KVEventBatch)

out = sys.argv[1]
enc = msgspec.msgpack.Encoder()


def write(name, batch):
    with open(f"{out}/{name}.msgpack", "wb") as f:
        f.write(enc.encode(batch))


def stored(hashes, parent, tokens, medium="GPU", session=None, group=0, lora=None):
    return BlockStored(block_hashes=hashes, parent_block_hash=parent,
                       token_ids=tokens, block_size=16, lora_id=None,
                       medium=medium, lora_name=lora, group_idx=group,
                       session_id=session)


# Tagged events (0.32), every kind, a rank; encodable by kvevents.Encode byte for byte.
write("tagged", KVEventBatch(ts=1700000000.5, events=[
    stored([1, 2**64 - 1], None, list(range(32)), session="sess-a"),
    stored([3], 2**63 + 5, [7] * 16, medium="CPU"),
    BlockRemoved(block_hashes=[1], medium="GPU", group_idx=0),
    AllBlocksCleared(),
], data_parallel_rank=2))

# Integer widths, long arrays and strings; rank 0.
write("widths", KVEventBatch(ts=0.25, events=[
    stored([127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**63],
           200, [i % 70000 for i in range(0, 160 * 700, 700)],
           session="s" * 40, lora="adapter-x", group=1),
    BlockRemoved(block_hashes=[70000], medium="CPU", group_idx=1),
], data_parallel_rank=0))

# No rank (omitted from the array), a removal without group_idx: decode only.
write("norank", KVEventBatch(ts=3.0, events=[
    BlockRemoved(block_hashes=[5, 6], medium=None),
]))

# sha256 bytes hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0): decode only.
h1 = bytes(range(32))
h2 = bytes(range(100, 132))
write("bytes", KVEventBatch(ts=4.0, events=[
    stored([h2], h1, [1] * 16),
    BlockRemoved(block_hashes=[h2], medium="GPU", group_idx=0),
], data_parallel_rank=1))


# Positional events as older vLLM releases sent them (array_like tagged structs).
class Old(msgspec.Struct, array_like=True, omit_defaults=True, tag=True):
    pass


class OldStored(Old, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: Optional[int]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]


class OldRemoved(Old, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: Optional[str]


class OldCleared(Old, tag="AllBlocksCleared"):
    pass


class OldBatch(msgspec.Struct, array_like=True, omit_defaults=True):
    ts: float
    events: list
    data_parallel_rank: Optional[int] = None


write("positional", OldBatch(ts=5.5, events=[
    OldStored([11, 12], 10, list(range(32)), 16, None, "GPU"),
    OldRemoved([11], "GPU"),
    OldCleared(),
], data_parallel_rank=3))
