"""Allocation of KV blocks to sequences: a free list, a block table per sequence, and (optional)
automatic prefix caching.

Prefix caching (as in vLLM's automatic prefix caching and nano-vllm): every FULL block a sequence
has computed is known by a hash of its tokens chained with the hash of the blocks before it, so a
hash names the whole prefix up to the block's end, and equal hashes mean equal K and V. A new
sequence whose tokens start with known blocks takes them (their reference count goes up: several
sequences read one block) and its prefill starts after them. A block whose last holder finished
keeps its contents and its hash, in a least-recently-used list of free blocks: it is evicted (its
hash forgotten) only when a new block is needed and no block without a cached prefix is free. A
partial block is never shared, and at least a sequence's last token is always computed, so that
there is a token to sample and no sequence ever writes into a shared block.

Hybrid attention (a `window` of W tokens, as in vLLM's hybrid allocator): a model whose
sliding-window layers and full layers are equally many keeps them in the same pool of blocks,
each block holding one group's layers, and a sequence has two tables: `block_table` for the full
layers, `window_table` for the window layers. Before each step, the window blocks that hold only
tokens no query of the step attends to (all of them before num_computed - W + 1) go back to the
pool, their entries FREED; so while decoding, a sequence holds ceil(L / B) full blocks and at most
ceil(W / B) + 1 window blocks. A prefill chunk of C tokens holds up to ceil((W + C - 1) / B) + 1
window blocks during its step (its keys are written to the cache), given back before the next.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass, fields

from .sequence import Sequence

FREED = -1  # a window_table entry whose block went back to the pool


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def peak_blocks(tokens: int, block_size: int, window: int = 0, prefill: int | None = None,
                chunk: int = 0) -> int:
    """The most blocks one sequence holds at once while its cache grows to `tokens` positions:
    its first `prefill` positions (default all of them, as a recompute after a preemption
    writes) in prefill chunks of `chunk` tokens (0: one chunk), the rest one decode token a
    step. Full attention holds ceil(tokens / B). A hybrid model (window > 0) holds its full
    table and, at each step, the window blocks that step can attend to (module docstring), so
    a whole prompt in one chunk holds two tables' worth while a long decode holds about one."""
    full = blocks_for(tokens, block_size)
    if not window:
        return full
    prefill = tokens if prefill is None else max(0, min(prefill, tokens))

    def held(computed: int, new: int) -> int:  # both tables during a step of `new` tokens
        total = blocks_for(computed + new, block_size)
        first = max(0, computed - window + 1) // block_size
        return 2 * total - min(first, total)

    peak, n = 0, 0
    while n < prefill:
        new = min(chunk or prefill, prefill - n)
        peak = max(peak, held(n, new))
        n += new
    for n in range(prefill, tokens):
        peak = max(peak, held(n, 1))
    return peak


def chain_hash(parent: bytes | None, tokens: list[int]) -> bytes:
    """The hash of a block: its token ids after the hash of the blocks before it (16-byte
    BLAKE2b, so distinct prefixes do not collide in practice)."""
    h = hashlib.blake2b(parent or b"", digest_size=16)
    h.update(array("q", tokens).tobytes())
    return h.digest()


@dataclass
class PrefixCacheStats:
    """Counts since the engine started. A lookup is a sequence asking for blocks from nothing
    (a new request, or a preempted one coming back); a hit is a lookup that found at least one
    block. blocks_shared counts blocks taken while another sequence held them; the rest of
    hit_blocks were free, waiting in the cache. An eviction forgets one cached block."""

    lookups: int = 0
    lookup_tokens: int = 0
    hits: int = 0
    hit_blocks: int = 0
    tokens_skipped: int = 0
    blocks_shared: int = 0
    evictions: int = 0

    def since(self, earlier: PrefixCacheStats) -> PrefixCacheStats:
        """The counts between an earlier snapshot and this one."""
        return PrefixCacheStats(**{f.name: getattr(self, f.name) - getattr(earlier, f.name)
                                   for f in fields(self)})

    def to_json(self) -> dict:
        hit_rate = self.tokens_skipped / self.lookup_tokens if self.lookup_tokens else None
        return {**asdict(self), "token_hit_rate": hit_rate}


class BlockManager:
    """Hands out fixed-size blocks so a sequence's cache grows a block at a time, never
    reserving its whole possible length up front, and takes them back when it ends."""

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = False,
                 window: int = 0):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.window = window  # hybrid attention: the window layers' W, else 0 (module docstring)
        if window and prefix_caching:
            raise ValueError("prefix caching does not share sliding-window blocks: turn one off")
        # Free blocks holding nothing worth keeping: handed out first, in this order.
        self.free_blocks: deque[int] = deque(range(num_blocks))
        # Free blocks holding a cached prefix, least recently used first: evicted in this order.
        self.cached_free: OrderedDict[int, None] = OrderedDict()
        self.ref_counts = [0] * num_blocks
        self.block_hash: dict[int, bytes] = {}  # every block in the prefix cache -> its hash
        self.hash_to_block: dict[bytes, int] = {}
        self.stats = PrefixCacheStats()

    @property
    def num_free(self) -> int:
        """Blocks a sequence can get now: free ones, and cached ones no sequence holds."""
        return len(self.free_blocks) + len(self.cached_free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def num_cached(self) -> int:
        """Blocks holding a cached prefix, in use or free."""
        return len(self.block_hash)

    def take_scratch_block(self) -> int:
        """Withdraw one block from circulation for writes that must land somewhere harmless."""
        self.num_blocks -= 1
        return self.free_blocks.pop()

    # ---- the prefix cache -------------------------------------------------------------------
    def block_hashes(self, seq: Sequence, count: int) -> list[bytes]:
        """The chained hashes of seq's first `count` full blocks of tokens (kept on the sequence:
        its tokens never change once added)."""
        size, hashes = self.block_size, seq.block_hashes
        if len(hashes) < count:
            tokens = seq.token_ids
            for i in range(len(hashes), count):
                hashes.append(chain_hash(hashes[-1] if hashes else None,
                                         tokens[i * size:(i + 1) * size]))
        return hashes[:count]

    def match(self, seq: Sequence) -> list[int]:
        """The cached blocks a sequence starting from nothing would take: its leading full blocks
        found in the cache, never covering its last token. Nothing when caching is off."""
        if not self.prefix_caching or seq.block_table or seq.num_computed:
            return []
        hits = []
        for h in self.block_hashes(seq, (seq.num_tokens - 1) // self.block_size):
            block = self.hash_to_block.get(h)
            if block is None:
                break
            hits.append(block)
        return hits

    def cached_prefix(self, seq: Sequence) -> int:
        """Tokens of seq a prefix-cache hit would skip (0 when off or seq already started): pass
        it to can_grow / grow as `cached`."""
        return len(self.match(seq)) * self.block_size

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Offer the cache every block seq has now completely computed (after each step). A block
        whose prefix is already cached under another block stays private."""
        if not self.prefix_caching:
            return
        full = seq.num_computed // self.block_size
        hashes = self.block_hashes(seq, full)
        for i in range(seq.hashed_blocks, full):
            block, h = seq.block_table[i], hashes[i]
            if block not in self.block_hash and h not in self.hash_to_block:
                self.block_hash[block] = h
                self.hash_to_block[h] = block
        seq.hashed_blocks = max(seq.hashed_blocks, full)

    def set_prefix_caching(self, on: bool) -> None:
        """Turn prefix caching on or off between two steps (a live run's knob). Off, every
        cached prefix is forgotten (blocks in use keep their contents) and no block is offered
        to the cache; on, blocks computed from then on are offered, and admissions look up."""
        if on and self.window:
            raise ValueError("prefix caching does not share sliding-window blocks: turn one off")
        if not on:
            self.clear_cache()
        self.prefix_caching = on

    def clear_cache(self) -> None:
        """Forget every cached prefix (blocks in use keep their contents, not their hash)."""
        self.free_blocks.extend(self.cached_free)
        self.cached_free.clear()
        self.block_hash.clear()
        self.hash_to_block.clear()

    def _take_cached(self, seq: Sequence, hits: list[int]) -> None:
        """seq (starting from nothing) takes the cached blocks `hits`: its first tokens'
        K and V are there, so it starts with them computed."""
        for block in hits:
            if self.ref_counts[block] == 0:
                del self.cached_free[block]
            else:
                self.stats.blocks_shared += 1
            self.ref_counts[block] += 1
        seq.block_table.extend(hits)
        seq.hashed_blocks = len(hits)
        seq.num_computed = len(hits) * self.block_size
        self.stats.hits += 1
        self.stats.hit_blocks += len(hits)
        self.stats.tokens_skipped += seq.num_computed

    def _hits_for(self, seq: Sequence, cached: int) -> list[int]:
        hits = self.match(seq)[: cached // self.block_size] if cached else []
        if len(hits) * self.block_size != cached:
            raise ValueError(f"{cached} cached tokens asked for, {len(hits)} blocks found")
        return hits

    # ---- allocation -------------------------------------------------------------------------
    def blocks_needed(self, seq: Sequence, new_tokens: int, cached: int = 0) -> int:
        """Free blocks seq would use to hold new_tokens more tokens than it has computed, or,
        starting from nothing, `cached` tokens from the prefix cache and new_tokens after them
        (cached blocks nobody holds leave the free pool too)."""
        if cached:
            hits = self._hits_for(seq, cached)
            revived = sum(1 for b in hits if self.ref_counts[b] == 0)
            return blocks_for(cached + new_tokens, self.block_size) - len(hits) + revived
        total = blocks_for(seq.num_computed + new_tokens, self.block_size)
        needed = max(0, total - len(seq.block_table))
        if self.window:
            needed += max(0, total - len(seq.window_table)) - len(self._out_of_window(seq))
        return max(0, needed)

    # ---- hybrid attention: the window layers' table -----------------------------------------
    def _out_of_window(self, seq: Sequence) -> list[int]:
        """Indices of seq's held window blocks wholly before the window of its next token."""
        first = max(0, seq.num_computed - self.window + 1) // self.block_size
        return [i for i, b in enumerate(seq.window_table[:first]) if b != FREED]

    def window_blocks(self, seq: Sequence) -> int:
        """How many window-layer blocks seq holds now."""
        return sum(1 for b in seq.window_table if b != FREED)

    def _slide(self, seq: Sequence, total: int) -> None:
        """Give back the window blocks the next step cannot attend to; extend the window table
        to `total` blocks."""
        for i in self._out_of_window(seq):
            self._release_private(seq.window_table[i])
            seq.window_table[i] = FREED
        for _ in range(total - len(seq.window_table)):
            seq.window_table.append(self._allocate())

    def _release_private(self, block: int) -> None:
        """A block only its one holder had (never cached): straight back to the free list."""
        self.ref_counts[block] = 0
        self.free_blocks.append(block)

    def can_grow(self, seq: Sequence, new_tokens: int, cached: int = 0) -> bool:
        return self.blocks_needed(seq, new_tokens, cached) <= self.num_free

    def grow(self, seq: Sequence, new_tokens: int, cached: int = 0) -> None:
        """Give seq enough blocks for new_tokens more tokens; the caller checked can_grow. With
        `cached` (from cached_prefix, for a sequence starting from nothing) it first takes those
        tokens' cached blocks, and the new tokens come after them."""
        needed = self.blocks_needed(seq, new_tokens, cached)
        if needed > self.num_free:
            raise MemoryError(f"need {needed} KV blocks, {self.num_free} free")
        if self.prefix_caching and not seq.block_table and not seq.num_computed:
            self.stats.lookups += 1
            self.stats.lookup_tokens += seq.num_tokens
        if cached:  # cached blocks first: allocating could evict the very blocks to be taken
            self._take_cached(seq, self._hits_for(seq, cached))
        total = blocks_for(seq.num_computed + new_tokens, self.block_size)
        if self.window:
            self._slide(seq, total)
        for _ in range(total - len(seq.block_table)):
            seq.block_table.append(self._allocate())

    def _allocate(self) -> int:
        """A block for one holder: a plain free one, else the least recently used cached one."""
        if self.free_blocks:
            block = self.free_blocks.popleft()
        else:
            block, _ = self.cached_free.popitem(last=False)
            del self.hash_to_block[self.block_hash.pop(block)]
            self.stats.evictions += 1
        self.ref_counts[block] = 1
        return block

    def free(self, seq: Sequence) -> None:
        """Give back all of seq's blocks; its cached tokens are forgotten. A block no other
        sequence holds becomes free: at once reusable, or, if it holds a cached prefix, kept
        until evicted (the sequence's last blocks first: a prefix's tail is the least shared)."""
        released = []
        for block in seq.block_table:
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                released.append(block)
        self.free_blocks.extend(b for b in released if b not in self.block_hash)
        for block in reversed(released):
            if block in self.block_hash:
                self.cached_free[block] = None
        seq.block_table.clear()
        for block in seq.window_table:
            if block != FREED:
                self._release_private(block)
        seq.window_table.clear()
        seq.num_computed = seq.hashed_blocks = 0

    def trim(self, seq: Sequence) -> None:
        """Give back the blocks past seq's computed tokens (speculative tokens it rejected); they
        held no finished block, so they go straight back to the front of the free list."""
        keep = blocks_for(seq.num_computed, self.block_size)
        extra = seq.block_table[keep:]
        del seq.block_table[keep:]
        for block in reversed(extra):
            if self.ref_counts[block] != 1 or block in self.block_hash:
                raise RuntimeError(f"block {block} is shared or cached: it cannot be trimmed")
            self.ref_counts[block] = 0
            self.free_blocks.appendleft(block)
        extra = seq.window_table[keep:]
        del seq.window_table[keep:]
        for block in reversed(extra):
            if block != FREED:
                self.ref_counts[block] = 0
                self.free_blocks.appendleft(block)
