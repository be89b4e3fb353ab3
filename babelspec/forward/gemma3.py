"""The lean forward of Gemma-3 text models, on the model's own weights: the arithmetic of
``transformers.models.gemma3`` op for op, with batching of several sequences' blocks and the C
glue between the products in bf16.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from babelspec.errors import UserError
from babelspec.forward.base import Forward
from babelspec.forward.cache import LeanCache, LeanLayerCache
from babelspec.forward.certified import HeadRequest
from babelspec.forward.kernels import Linear, Linears
from babelspec.forward.native import Glue, glue
from babelspec.forward.options import ForwardOptions
from babelspec.forward.quantize import Int8Linear, W8A8Linear
from babelspec.forward.trees import tree_ancestors, tree_mask

EXACT_SMALL_ROWS = 16  # blocks of up to this many rows take each product whole (``exact_rows``)
EXACT_CHUNK_ROWS = (256, 64)  # longer ones in pieces of these sizes whose rows round as alone (``bench exact``)
_PROBED: dict[tuple, Any] = {}  # row-invariance probes' answers, by ``LeanGemma3._shapes_key`` (kernels go by shape and threads)
CACHE_ONLY = -1  # a block's logits_to_keep: no logits, the block only cached (a prefill)


def _weights(layer: torch.nn.Module) -> dict[str, list[torch.Tensor]]:
    """A decoder layer's product weights by kind, q/k/v and gate/up side by side."""
    attn, mlp = layer.self_attn, layer.mlp
    return {"qkv": [attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight], "o": [attn.o_proj.weight],
            "gate_up": [mlp.gate_proj.weight, mlp.up_proj.weight], "down": [mlp.down_proj.weight]}  # fmt: skip


@dataclass
class _Layer:
    qkv: Linears | Int8Linear | W8A8Linear
    o: Linear | Int8Linear | W8A8Linear
    gate_up: Linears | Int8Linear | W8A8Linear
    down: Linear | Int8Linear | W8A8Linear
    norms: dict[str, tuple[torch.Tensor, float]]  # name -> (1 + weight in float32, eps)
    sliding: bool
    qk_norm: tuple[torch.Tensor, float] | None = None  # q_norm's scale per query head, then k_norm's


def _qk_norm(norms: dict[str, tuple[torch.Tensor, float]], heads: int, kv_heads: int) -> tuple[torch.Tensor, float] | None:
    """q_norm's and k_norm's scales stacked per head [1, heads + kv_heads, 1, head_dim], for one
    RMSNorm over the queries and keys of a block together (the same arithmetic per row)."""
    (q_scale, q_eps), (k_scale, k_eps) = norms["q_norm"], norms["k_norm"]
    if q_eps != k_eps:
        return None
    return torch.stack([q_scale] * heads + [k_scale] * kv_heads)[None, :, None, :], q_eps


@dataclass(eq=False)
class Block:
    """One sequence's block for ``LeanGemma3.forward_many``: ``ids`` [1, n] after the tokens in
    ``cache``, the logits of its last ``logits_to_keep`` rows (0: all; ``CACHE_ONLY``: none, the
    block is only cached, alone in its forward), ``parents`` for a tree."""

    ids: torch.Tensor
    cache: LeanCache
    logits_to_keep: int = 0
    parents: torch.Tensor | None = None
    head: HeadRequest | None = None  # what the caller needs of each row's logits (``certifies_head``)


@dataclass
class _Prepared:
    n: int
    cache: LeanCache
    masks: dict[bool, Any]
    rope: dict[str, tuple[torch.Tensor, torch.Tensor]]


class LeanGemma3(Forward):
    """``forward(ids [1, n], cache, logits_to_keep)`` -> logits [n or logits_to_keep, columns]:
    the decoder stack ``body`` (a ``Gemma3TextModel``) under the output head ``logits_of``."""

    kind = "lean"
    batches = True  # forward_many: several sequences' blocks as one
    takes_target_rows = True
    prefills_without_logits = True

    def __init__(self, body: torch.nn.Module, logits_of: Callable[[torch.Tensor], torch.Tensor],
                 options: ForwardOptions | None = None, quantize: str | None = None,
                 initial_capacity: int = 256, shared: list[_Layer] | None = None) -> None:  # fmt: skip
        self.options = options = options if options is not None else ForwardOptions()
        fuse = options.fuse
        config = body.config
        self.body, self.logits_of = body, logits_of
        self.rotary = body.rotary_emb
        self.embed = body.embed_tokens
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim
        self.scaling = config.query_pre_attn_scalar**-0.5
        self.window = config.sliding_window
        self.capacity = initial_capacity
        self.final_norm = _norm_weights(body.norm)
        self.layer_types = list(config.layer_types[: config.num_hidden_layers])
        self.approximate = "tanh" if config.hidden_activation == "gelu_pytorch_tanh" else "none"
        # bf16 on the CPU caches the keys transposed: q @ keys^T is then a product over a strided
        # slice rather than a transposed view, 1.5-2x faster (``benchmarks/results/attention_keys.json``),
        # and oneDNN's bf16 products give the same bits either way; MKL's float32 ones do not,
        # so float32 keeps Hugging Face's layout
        weight = body.embed_tokens.weight
        self.keys_t = weight.dtype == torch.bfloat16 and weight.device.type == "cpu"
        self.dtype, self.device = weight.dtype, weight.device
        self.cache_dtype = self.dtype
        # the int8 drafter (its own model: no bits to keep equal to the target's) also attends in
        # float32 over a float32 cache: oneDNN's bf16 products pay 50-80 µs for each new context
        # length, MKL's float32 ones 17 µs (``benchmarks/results/native_glue.json``)
        self.glue: Glue | None = None
        if quantize in ("int8", "gguf") and options.native and self.dtype == torch.bfloat16 and self.device.type == "cpu":
            # the gguf forward attends in C over the bf16 cache (below); the int8 one in float32
            self.glue, self.cache_dtype = glue(), torch.float32 if quantize == "int8" else self.dtype
        if quantize == "gguf" and (shared is None or len(shared) < config.num_hidden_layers):
            raise ValueError("a drafter on a GGUF's blocks takes the products of as many layers of a gguf target")
        self._rope_tables: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # kind -> (cos, sin) by position
        self._layer_args: list[Any] | None = None  # one-row steps in C (``_row_args``)
        self._batch_rows: dict[tuple[int, int], int] = {}  # (limit, threads) -> rows
        self._exact_rows: dict[int, tuple[int, tuple[int, ...]]] = {}  # threads -> (small, chunks)
        self.quantize = quantize
        self.layers = [self._layer(layer, kind, quantize, shared[i] if shared is not None else None)
                       for i, (layer, kind) in enumerate(zip(body.layers[: config.num_hidden_layers], self.layer_types))]
        # bf16 on the CPU with the merges: the exact path (``exact``). Every block, of any length
        # (a decode step, a verification chain or tree, a prefill or its chunks, a batched slot),
        # runs the stacked products in pieces whose rows round as alone (``exact_rows``), the
        # norms, residual adds and rotation row by row in C (``native``), and attention row by
        # row in a decode step's order of operations (``bs_attend``, over the cache of the
        # bf16 keys and values; without the glue ``_attend_rows``, the same property in torch
        # operations over a bf16 cache). Each row gets the bits it gets alone after the same
        # cache, so speculative greedy output is plain greedy output, bit for bit, and a sampled
        # draft is judged on the row plain decoding computes (``tests/test_exact_bf16.py``)
        self.exact = (fuse and quantize is None and self.dtype == torch.bfloat16 and self.device.type == "cpu"
                      and all(layer.qkv.fused and layer.gate_up.fused and layer.qk_norm is not None
                              for layer in self.layers))  # fmt: skip
        # row by row attention (``bs_attend``, masks from ``_visible``): the exact path's, and a
        # drafter's on a gguf target's blocks, whose one-row steps it serves with no torch
        # products per layer (``benchmarks/results/gguf_drafter.json``)
        self.rowwise = self.exact or (quantize == "gguf" and self.glue is not None)
        if self.rowwise:
            self.keys_t = False  # [1, kv_heads, capacity, head_dim]: a key's row is contiguous
        if self.exact and options.native:
            self.glue = glue()  # bs_attend reads the bf16 cache as the floats its values are: half float32's bytes

    def _layer(self, layer: torch.nn.Module, kind: str, quantize: str | None, src: _Layer | None) -> _Layer:
        """One decoder layer's products and norms: a gguf target's own (``src``, a drafter on its
        blocks), int8 copies of the weights (a drafter), or the bf16 or float32 weights."""
        attn, mlp = layer.self_attn, layer.mlp
        pack, fuse, limit = self.options.pack, self.options.fuse, self.options.merge_max_tokens
        if quantize == "gguf":  # a drafter on the target's own products over the file's blocks
            out = _Layer(qkv=src.qkv, o=src.o, gate_up=src.gate_up, down=src.down, norms=src.norms, sliding=src.sliding)
            out.qk_norm = src.qk_norm
            return out
        if quantize == "int8":
            products = {name: Int8Linear(ws) for name, ws in _weights(layer).items()}
            out = _Layer(**products, norms=_layer_norms(layer, attn), sliding=kind == "sliding_attention")
            out.qk_norm = _qk_norm(out.norms, self.heads, self.kv_heads)
            return out
        # fast-mode blocks compute a one-row product as two rows where one row alone rounds
        # otherwise (``one_row_differs``): a decode step then rounds as a verification does;
        # the merges and this are what ``fuse`` turns off
        out = _Layer(
            qkv=Linears([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight], pack, fuse, fuse, limit),
            o=Linear(attn.o_proj.weight, pack, pad_row=fuse),
            gate_up=Linears([mlp.gate_proj.weight, mlp.up_proj.weight], pack, fuse, fuse, limit),
            down=Linear(mlp.down_proj.weight, pack, pad_row=fuse),
            norms=_layer_norms(layer, attn), sliding=kind == "sliding_attention")  # fmt: skip
        if out.qkv.fused:
            out.qk_norm = _qk_norm(out.norms, self.heads, self.kv_heads)
        return out

    def cache_like(self, layer: LeanLayerCache) -> LeanLayerCache:
        """A copy of another forward's cached layer (a self-drafter starts from the target's
        cache) in this forward's cache dtype and key layout."""
        capacity = layer.values.shape[2]
        shape = (1, self.kv_heads, capacity, self.head_dim)
        out = LeanLayerCache(torch.empty((1, self.kv_heads, self.head_dim, capacity) if self.keys_t else shape,
                                         dtype=self.cache_dtype, device=self.device),
                             torch.empty(shape, dtype=self.cache_dtype, device=self.device), self.keys_t)  # fmt: skip
        out.append(*layer.rows(0, layer.length))
        return out

    def new_cache(self) -> LeanCache:
        shape = (1, self.kv_heads, self.capacity, self.head_dim)
        key_shape = (1, self.kv_heads, self.head_dim, self.capacity) if self.keys_t else shape
        empty = lambda s: torch.empty(s, dtype=self.cache_dtype, device=self.device)  # noqa: E731
        return LeanCache([LeanLayerCache(empty(key_shape), empty(shape), self.keys_t) for _ in self.layers])

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, cache: LeanCache, logits_to_keep: int = 0,
                parents: torch.Tensor | None = None, past: int | None = None,
                head: HeadRequest | None = None) -> torch.Tensor:  # fmt: skip
        """Logits of ``ids`` [1, n] after the cached tokens. ``parents`` [n] (a token tree):
        entry i is the block index of token i's parent, -1 for the last cached token; each
        token then sees the cache and its own ancestors, at the position of its depth."""
        return self.forward_many([Block(ids, cache, logits_to_keep, parents, head)])[0]

    def sharing_blocks(self, body: torch.nn.Module, logits_of: Callable[[torch.Tensor], torch.Tensor],
                       options: ForwardOptions | None = None) -> LeanGemma3:  # fmt: skip
        """A drafter's forward over ``body`` (the first layers of this target's model, shared)
        whose layers compute on this gguf target's own products over the file's blocks: no
        copy of a weight, the bytes of the file's layers a step (``gguf:LANG``)."""
        if self.quantize != "gguf":
            raise UserError("a drafter on the GGUF's blocks needs a target in the gguf mode (a GGUF model under "
                            "--dtype auto on a CPU, or --precision gguf); use int8:LANG with this one")  # fmt: skip
        return LeanGemma3(body, logits_of, self.options, "gguf", shared=self.layers)

    @property
    def product_kernel(self) -> str | None:
        """The quantized products' path where the products run on a GGUF's blocks (``forward.gguf``)."""
        return getattr(getattr(self.logits_of, "project", None), "kernel_used", None)

    @property
    def not_exact_reason(self) -> str:
        """Why this forward is not on the exact path ("" where it is), naming the cause and the fix."""
        if self.exact:
            return ""
        if self.quantize is not None:
            return f"a drafter's {self.quantize} layers (a drafter's own model: no bits to match)"
        if self.device.type != "cpu":
            return f"the exact path is the CPU's; on {self.device.type} a block's rows round by its kernels"
        if self.dtype == torch.float32:
            return ("float32 products are MKL's, whose kernels are picked by a block's rows, so a row rounds by its "
                    "block (a lone row and the rows past a 4-row tile differ on x86); load the model in bfloat16 "
                    "for the bit-exact path")  # fmt: skip
        if self.dtype != torch.bfloat16:
            return f"{self.dtype} has no row-invariant products here; load the model in bfloat16"
        if not self.options.fuse:
            return "ForwardOptions(fuse=False) turns off the stacked products the exact path runs"
        from babelspec.forward.kernels import onednn_packs_bf16

        if not onednn_packs_bf16():
            return ("oneDNN does not pack bf16 weights on this CPU (it needs AVX-512 BW/VL/DQ or AVX-NE-CONVERT: an "
                    "AVX2-only CPU), so bf16 products take F.linear, whose rows round by the block; the gguf mode "
                    "(a GGUF model) is exact on AVX2")  # fmt: skip
        return "this model's layers lack the stacked projections or the q/k norms the exact path needs"

    @property
    def certifies_head(self) -> bool:
        return getattr(self.logits_of, "certified", None) is not None

    def tree_capacity(self, cache: LeanCache) -> float:
        return float("inf")  # every layer's mask is its own: any tree, any context

    def keep_path(self, cache: LeanCache, past: int, indices: torch.Tensor) -> None:
        cache.keep(past, indices)

    @torch.inference_mode()
    def forward_many(self, blocks: list[Block]) -> list[torch.Tensor]:
        """Each block's logits (as ``forward`` gives them), the blocks of several sequences in
        one pass: their rows share every product, norm and activation (row-wise arithmetic),
        and only attention runs per block, on the block's own cache. A lone block is computed
        op for op as before; in a batch a row rounds as alone where the products are
        row-invariant up to the batch's rows (``batch_rows``, which callers check)."""
        return self._finish(blocks, self._stack(blocks))

    @torch.inference_mode()
    def hidden_states(self, ids: torch.Tensor, cache: LeanCache) -> torch.Tensor:
        """The final normed hidden states [1, n, hidden] of ``ids`` [1, n] after the cached tokens,
        cached as ``forward`` caches them: the rows ``head_logits`` scores. A drafter on this
        forward's own layers (``drafters.stackhead``) drafts from them under a head of its own;
        verification then needs the output head alone."""
        return self._stack([Block(ids, cache, CACHE_ONLY)])

    @torch.inference_mode()
    def head_logits(self, hidden: torch.Tensor, head: HeadRequest | None = None) -> torch.Tensor:
        """The output head's logits [n, columns] of ``hidden`` [1, n, hidden] (``hidden_states``'
        rows), as ``forward`` gives a block's: each row's bits those of the row in a forward."""
        return self._head_rows(hidden, None if head is None else [head] * hidden.shape[1])[0]

    def _stack(self, blocks: list[Block]) -> torch.Tensor:
        """The decoder stack over every block's rows (each cached): the final normed hidden states."""
        merge = self.exact or all(b.ids.shape[1] <= self.options.merge_max_tokens for b in blocks)  # blocks, not the batch
        ids = blocks[0].ids if len(blocks) == 1 else torch.cat([b.ids for b in blocks], 1)
        x = self.embed(ids)  # Gemma3TextScaledWordEmbedding: the lookup times sqrt(hidden)
        preps = [self._prepare(b, x) for b in blocks]
        rope = None
        if len(blocks) > 1:
            rope = {kind: tuple(torch.cat([p.rope[kind][i] for p in preps], 1) for i in range(2))
                    for kind in preps[0].rope}  # fmt: skip
        if self.glue is not None and merge:
            if len(blocks) == 1 and preps[0].n == 1 and blocks[0].parents is None and self._row_args() is not None:
                return self._one_row_layers(x, preps[0])
            return self._glued_layers(x, preps, rope)
        for index, (layer, kind) in enumerate(zip(self.layers, self.layer_types)):
            residual = x
            h = _rms(x, *layer.norms["input_layernorm"])
            h = self._attention(h, layer, kind, index, preps, merge, rope)
            x = residual + _rms(h, *layer.norms["post_attention_layernorm"])
            residual = x
            h = _rms(x, *layer.norms["pre_feedforward_layernorm"])
            if merge and layer.gate_up.fused:
                gate, up = self._rows(layer.gate_up.stacked, h).chunk(2, dim=-1)
            else:
                gate, up = layer.gate_up(h, merge)
            h = self._rows(layer.down, _gelu_rows(gate, self.approximate) * up)
            x = residual + _rms(h, *layer.norms["post_feedforward_layernorm"])
        return _rms(x, *self.final_norm)

    def _glued_layers(self, x: torch.Tensor, preps: list[_Prepared], rope: Any) -> torch.Tensor:
        """The decoder stack with the glue between products in C (``native``): one call for each
        norm-and-residual pair and one for the queries' and keys' norm and rotation."""
        glue = self.glue
        h = glue.rms(x, *self.layers[0].norms["input_layernorm"])
        last = len(self.layers) - 1
        for index, (layer, kind) in enumerate(zip(self.layers, self.layer_types)):
            h = self._attention(h, layer, kind, index, preps, True, rope)
            x, h = glue.add_rms(x, h, layer.norms["post_attention_layernorm"], layer.norms["pre_feedforward_layernorm"])
            gate, up = self._rows(layer.gate_up.stacked, h).chunk(2, dim=-1)
            h = self._rows(layer.down, _gelu_rows(gate, self.approximate) * up)
            after = self.final_norm if index == last else self.layers[index + 1].norms["input_layernorm"]
            x, h = glue.add_rms(x, h, layer.norms["post_feedforward_layernorm"], after)
        return h

    @property
    def row_steps_in_c(self) -> bool:
        """Whether a block of one row runs each layer in two C calls (``_one_row_layers``)."""
        return self._row_args() is not None

    def _row_args(self) -> list[Any] | None:
        """Each layer's ``native.LayerArgs`` for one-row steps in C (``_one_row_layers``), built
        once; None where the layers' products are not all the file's blocks' in C (a gguf target
        or its drafter with the glue and the product library)."""
        if self._layer_args is None:
            self._layer_args = self._build_row_args() or []
        return self._layer_args or None

    def _build_row_args(self) -> list[Any] | None:
        from babelspec.forward.native import LayerArgs
        from babelspec.forward.qmm import QProduct

        if not self.options.row_steps or self.quantize != "gguf" or not self.rowwise or self.glue is None or self.keys_t:
            return None
        products = [(layer.qkv, layer.o, layer.gate_up, layer.down) for layer in self.layers]
        flat = [p for ps in products for p in ps]
        if not all(isinstance(p, QProduct) and p.lib is not None and not p._f32 for p in flat):
            return None
        if len({p._isa for p in flat}) != 1:  # one kernel for every product (``ForwardOptions``' choice)
            return None
        if any(layer.qk_norm is None for layer in self.layers):
            return None
        args = []
        for layer, (qkv, o, gate_up, _) in zip(self.layers, products):
            qmm = ctypes.cast(qkv.lib.qmm, ctypes.c_void_p).value
            (post, post_eps), (pre, pre_eps) = (layer.norms["post_attention_layernorm"],
                                                layer.norms["pre_feedforward_layernorm"])  # fmt: skip
            args.append(LayerArgs(qmm=qmm, isa=qkv._isa, qkv=qkv._handle, o=o._handle, gate_up=gate_up._handle,
                                  qkv_n=qkv.n, gate_up_n=gate_up.n, hidden=o.n, heads=self.heads,
                                  kv_heads=self.kv_heads, dim=self.head_dim, qk_scale=layer.qk_norm[0].data_ptr(),
                                  qk_eps=layer.qk_norm[1], scaling=self.scaling, post_scale=post.data_ptr(),
                                  pre_scale=pre.data_ptr(), post_eps=post_eps, pre_eps=pre_eps))  # fmt: skip
        return args

    def _one_row_layers(self, x: torch.Tensor, prep: _Prepared) -> torch.Tensor:
        """``_glued_layers`` for a block of one row (a decode step, a step of ``gguf:LANG``): each
        layer in two C calls around the activation (``native.bs_layer_attention``, ``bs_layer_down``),
        which run the same functions on the same buffers in the same order as ``_glued_layers``, so
        the row's bits are the same; the 20-odd torch operations and calls a layer costs there, 3."""
        glue, args, threads = self.glue, self._row_args(), torch.get_num_threads()
        x = x.contiguous().clone()
        h = glue.rms(x, *self.layers[0].norms["input_layernorm"])
        first = args[0]
        gate_up = x.new_empty(1, 1, first.gate_up_n)
        scratch = x.new_empty(first.qkv_n + 3 * (self.heads + self.kv_heads) * self.head_dim + first.hidden)
        rope = {kind: tuple(t.contiguous() for t in table) for kind, table in prep.rope.items()}
        last = len(self.layers) - 1
        for index, (layer, kind, a) in enumerate(zip(self.layers, self.layer_types, args)):
            cache = prep.cache.layers[index]
            cache.reserve(cache.length + 1)
            cos, sin = rope[kind]
            lo = prep.masks[layer.sliding][0]
            a.threads, a.cos, a.sin, a.lo = threads, cos.data_ptr(), sin.data_ptr(), lo.data_ptr()
            a.keys, a.values, a.cap, a.past = cache.keys.data_ptr(), cache.values.data_ptr(), cache.values.shape[2], cache.length
            glue.layer_attention(a, x, h, gate_up, scratch)
            cache.length += 1
            gate, up = gate_up.chunk(2, dim=-1)
            act = _gelu_rows(gate, self.approximate) * up
            after = self.final_norm if index == last else self.layers[index + 1].norms["input_layernorm"]
            glue.layer_down(a, layer.down, act, layer.norms["post_feedforward_layernorm"], after, x, h, scratch)
        return h

    def _finish(self, blocks: list[Block], x: torch.Tensor) -> list[torch.Tensor]:
        """Each block's logits from the final normed hidden states ``x`` of all blocks' rows."""
        if len(blocks) == 1:
            keep = blocks[0].logits_to_keep
            if keep == CACHE_ONLY:  # a prefill: the 262k-column head is a sixth of its time
                return [x.new_empty(0, 0)]
            rows = x[:, -keep:] if keep else x
            head = blocks[0].head
            return [self._head_rows(rows, None if head is None else [head] * rows.shape[1])[0]]
        rows, start = [], 0
        for b in blocks:
            n = b.ids.shape[1]
            keep = n if b.logits_to_keep == 0 else max(b.logits_to_keep, 0)  # CACHE_ONLY: none
            rows.append(x[:, start + n - keep : start + n])
            start += n
        if not any(r.shape[1] for r in rows):
            return [x.new_empty(0, 0) for _ in blocks]
        requests = [b.head for b, r in zip(blocks, rows) for _ in range(r.shape[1])]
        hidden = torch.cat(rows, 1)
        logits = self._head_rows(hidden, requests if any(r is not None for r in requests) else None)[0]
        return list(logits.split([r.shape[1] for r in rows]))

    def batch_rows(self, limit: int) -> int:
        """The most rows a batch of blocks may hold so that every row rounds as in its own
        block: the largest M <= ``limit`` for which each product of the model (q/k/v, output,
        gate/up, down, the output head) gives every row of an M-row block the bits of the same
        row computed alone (a decode step's form, ``pad_row`` included), for all of 2..M.
        Kernels are chosen by shape, so one layer's products stand for all; kept per limit."""
        mine = (limit, torch.get_num_threads())
        if mine in self._batch_rows:
            return self._batch_rows[mine]
        key = (self._shapes_key(), limit)
        if key in _PROBED:
            self._batch_rows[mine] = _PROBED[key]
            return _PROBED[key]
        g = torch.Generator().manual_seed(0)
        best = limit
        with torch.inference_mode():
            for product, width in self._probe_products(head=True):
                x = self._probe_rows(g, limit, width)
                alone = [product(x[:, i : i + 1])[0, 0] for i in range(limit)]
                for m in range(2, best + 1):
                    block = product(x[:, :m])[0]
                    if any(not torch.equal(block[i], alone[i]) for i in range(m)):
                        best = m - 1
                        break
        self._batch_rows[mine] = _PROBED[key] = best
        return best

    def _probe_products(self, head: bool) -> list[tuple[Callable[[torch.Tensor], torch.Tensor], int]]:
        """(product, input width) of the first layer's products, the projections of one input
        stacked (q/k/v, gate/up), and the output head after them where ``head``: what the
        row-invariance probes multiply (kernels are chosen by shape, so one layer stands for all)."""
        layer, config = self.layers[0], self.body.config

        def stacked(linears: Any) -> Callable[[torch.Tensor], torch.Tensor]:
            return lambda x: torch.cat(linears(x, True), -1)

        products = [(stacked(layer.qkv), config.hidden_size), (layer.o, self.heads * self.head_dim),
                    (stacked(layer.gate_up), config.hidden_size), (layer.down, config.intermediate_size)]  # fmt: skip
        return products + [(self.logits_of, config.hidden_size)] if head else products

    def _probe_rows(self, g: torch.Generator, m: int, width: int) -> torch.Tensor:
        """[1, m, width] random rows in the model's dtype, their scales spread over 0.1-10."""
        return (torch.randn(1, m, width, generator=g) * torch.logspace(-1, 1, m)[:, None]).to(self.dtype)

    def _shapes_key(self) -> tuple:
        """What picks the products' kernels: their kinds and shapes, the dtype, the output head's
        kind and torch's thread count (a library may split a product otherwise with more threads;
        a probe's answer holds for every forward with the same key in this process)."""
        layer, config = self.layers[0], self.body.config
        kinds = tuple(type(p).__name__ for p in (layer.qkv, layer.o, layer.gate_up, layer.down, self.logits_of))
        return (kinds, self.dtype, self.quantize, config.hidden_size, config.intermediate_size, self.heads,
                self.kv_heads, self.head_dim, getattr(getattr(self.logits_of, "weight", None), "shape", None),
                torch.get_num_threads())  # fmt: skip

    def _rows(self, product: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """``product(x)`` for a layer's product on the exact path, in pieces whose rows are known
        to round as alone (``exact_rows``): blocks of up to ``small`` rows whole, longer ones (a
        prefill) in pieces of the largest probed size that fits, the rest in pieces of the
        smallest, the last padded with copies of its last row."""
        n = x.shape[1]
        if not self.exact or n <= 1:
            return product(x)
        small, chunks = self.exact_rows()
        if n <= small:
            return product(x)
        if not chunks:  # no long block rounds as its rows alone: pieces of ``small``
            return torch.cat([product(x[:, i : i + small]) for i in range(0, n, small)], 1)
        outs, start = [], 0
        while start < n:
            left = n - start
            size = next((c for c in chunks if c <= left), chunks[-1])
            piece = x[:, start : start + size]
            if piece.shape[1] < size:
                piece = torch.cat([piece, piece[:, -1:].expand(1, size - piece.shape[1], x.shape[2])], 1)
            outs.append(product(piece)[:, : min(size, left)])
            start += size
        return torch.cat(outs, 1)

    def _head_rows(self, rows: torch.Tensor, requests: list[HeadRequest | None] | None = None) -> torch.Tensor:
        """The output head's logits of ``rows`` (with each row's ``requests`` for the certified
        head, whose fallback rows take the full head); on the exact path more rows than
        ``exact_rows``' small blocks go in pieces of that many, with or without requests."""

        def head(start: int, stop: int) -> torch.Tensor:
            piece = rows[:, start:stop]
            return self.logits_of(piece) if requests is None else self.logits_of(piece, requests[start:stop])

        n = rows.shape[1]
        if not self.exact or n <= 1:
            return head(0, n)
        small = self.exact_rows()[0]
        if n <= small:
            return head(0, n)
        return torch.cat([head(i, min(i + small, n)) for i in range(0, n, small)], 1)

    def exact_rows(self) -> tuple[int, tuple[int, ...]]:
        """(small, chunks): every product of the model gives each row of a block of 2..``small``
        rows the bits of the row alone (``batch_rows(16)``), and each row of a block of each size
        in ``chunks`` too (of ``EXACT_CHUNK_ROWS``, largest first; empty where none agrees):
        measured once, since oneDNN picks kernels by shape and CPU (an AMX kernel for long
        blocks, say)."""
        threads = torch.get_num_threads()
        if threads not in self._exact_rows:
            key = (self._shapes_key(), "chunks")
            small = self.batch_rows(EXACT_SMALL_ROWS)
            if key not in _PROBED:
                _PROBED[key] = tuple(c for c in EXACT_CHUNK_ROWS if self._rows_agree(c))
            self._exact_rows[threads] = small, _PROBED[key]
        return self._exact_rows[threads]

    def _rows_agree(self, m: int) -> bool:
        """Whether each layer product gives every row of an ``m``-row block the bits of the row
        alone, on random bf16 rows of varied scale."""
        g = torch.Generator().manual_seed(1)
        with torch.inference_mode():
            for product, width in self._probe_products(head=False):
                x = self._probe_rows(g, m, width)
                block = product(x)
                if any(not torch.equal(block[:, i], product(x[:, i : i + 1])[:, 0]) for i in range(m)):
                    return False
        return True

    def _prepare(self, block: Block, x: torch.Tensor) -> _Prepared:
        """A block's positions, attention masks and rotary tables."""
        n = block.ids.shape[1]
        past = block.cache.get_seq_length()
        if block.parents is None:
            positions = torch.arange(past, past + n, device=x.device).unsqueeze(0)
            masks = self._visible(past, n, None, None) if self.rowwise else self._masks(past, n, x.dtype, x.device)
        else:
            ancestors, depth = tree_ancestors(block.parents)
            positions = (past + depth).to(x.device).unsqueeze(0)
            masks = (self._visible(past, n, ancestors, depth) if self.rowwise
                     else self._tree_masks(past, ancestors, depth, x.dtype, x.device))  # fmt: skip
        rope = {kind: self._rope(x, positions, kind) for kind in set(self.layer_types)}
        return _Prepared(n, block.cache, masks, rope)

    def _rope(self, x: torch.Tensor, positions: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary tables (cos, sin) [1, n, head_dim] of ``positions`` [1, n]: rows of one table
        per kind, computed once for a span of positions (grown by doubling), so a position's values
        are the same in every block and no block pays for them; where the rotary embedding is not
        a fixed function of the position (a dynamic rope type) it is called for each block."""
        types = getattr(self.rotary, "rope_type", None)
        if not isinstance(types, dict) or types.get(kind) != "default":
            return self.rotary(x[:, : positions.shape[1]], positions, kind)
        need = int(positions.max()) + 1
        table = self._rope_tables.get(kind)
        if table is None or table[0].shape[1] < need:
            size = max(need, 2 * table[0].shape[1] if table is not None else self.capacity)
            span = torch.arange(size, device=x.device).unsqueeze(0)
            table = self._rope_tables[kind] = self.rotary(x[:, :1], span, kind)
        return table[0][:, positions[0]], table[1][:, positions[0]]

    def _attention(self, h: torch.Tensor, layer: _Layer, kind: str, index: int, preps: list[_Prepared],
                   merge: bool, rope: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None) -> torch.Tensor:  # fmt: skip
        """The attention sublayer of every block: q/k/v and output products over all rows, the
        rest per block on its own cache. ``rope``: the blocks' rotary tables end to end, with
        which a stacked product's rows are normed and rotated all at once (row-wise arithmetic:
        each row as in its own block), leaving only the cache and attention per block."""
        stacked = layer.qk_norm is not None and merge and layer.qkv.fused
        qkv = self._rows(layer.qkv.stacked, h) if stacked else layer.qkv(h, merge)
        heads = self._heads(qkv, layer, rope[kind]) if stacked and rope is not None else None
        outs, start = [], 0
        for prep in preps:
            rows = slice(start, start + prep.n)
            start += prep.n
            if heads is not None:
                q, k, v = (t[:, :, rows] for t in heads)
            else:
                block = qkv[:, rows] if stacked else [t[:, rows] for t in qkv]
                q, k, v = self._heads(block, layer, prep.rope[kind])
            outs.append(self._attend(q, k, v, layer, prep.masks[layer.sliding], prep.cache.layers[index]))
        return self._rows(layer.o, outs[0] if len(outs) == 1 else torch.cat(outs, 1))

    def _heads(self, qkv: torch.Tensor | list[torch.Tensor], layer: _Layer,
               rope: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        """Queries, keys, values [1, heads, n, head_dim], normed and rotated, from ``qkv``: the
        stacked product's rows (queries and key normed and rotated together) or the three
        projections."""
        n = qkv.shape[1] if isinstance(qkv, torch.Tensor) else qkv[0].shape[1]
        shape = (1, n, -1, self.head_dim)
        cos, sin = (t.unsqueeze(1) for t in rope)
        if isinstance(qkv, torch.Tensor):
            # bf16 blocks: the queries and the key, side by side in the stacked product's output,
            # are normed and rotated together (per row the same arithmetic as apart, bit for bit:
            # tests/test_models_lean.py), which halves the small ops of this part of the layer
            columns = (self.heads + self.kv_heads) * self.head_dim
            if self.glue is not None:
                qk = self.glue.qk_rope(qkv, self.heads + self.kv_heads, self.head_dim, *layer.qk_norm, *rope)
            else:
                qk = _rms(qkv[..., :columns].reshape(shape).transpose(1, 2), *layer.qk_norm)
                qk = qk * cos + _rotate_half(qk) * sin
            q, k = qk[:, : self.heads], qk[:, self.heads :]
            v = qkv[..., columns:].reshape(shape).transpose(1, 2)
        else:
            q, k, v = (t.reshape(shape).transpose(1, 2) for t in qkv)
            q = _rms(q, *layer.norms["q_norm"])
            k = _rms(k, *layer.norms["k_norm"])
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
        return q, k, v

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: _Layer, mask: Any,
                layer_cache: LeanLayerCache) -> torch.Tensor:  # fmt: skip
        """One block's attention on its cache, before the output product. ``mask``: the block's
        (lo, visible) of ``_visible`` on the exact path, else its additive mask (or None)."""
        n = q.shape[2]
        if self.rowwise:
            past = layer_cache.length
            layer_cache.append(k, v)
            lo, visible = mask
            if self.glue is not None:
                return self.glue.attend(q, layer_cache.keys, layer_cache.values, past, lo, visible, self.scaling)
            return self._attend_rows(q, layer_cache, past, lo, visible)
        keys, values = layer_cache.append(k, v)
        groups, length = self.heads // self.kv_heads, values.shape[2]
        # bf16 blocks: the query heads of a key/value head as rows of one product (``rows``),
        # instead of copying the keys and values once per query head (repeat_kv, as transformers)
        rows = (1, self.kv_heads, groups * n) if groups > 1 and layer.qkv.fused and n <= self.options.merge_max_tokens else None
        if keys.dtype != q.dtype:  # a float32 cache: blocks attend in float32, a prefill as HF does
            if rows is not None or self.quantize == "int8":
                q = q.to(keys.dtype)
            else:
                keys, values = keys.to(q.dtype), values.to(q.dtype)
        keys_t = keys if layer_cache.keys_t else keys.transpose(2, 3)  # [1, kv_heads, head_dim, length]
        if rows is not None:
            weights = torch.matmul(q.reshape(*rows, self.head_dim), keys_t).view(1, self.heads, n, length)
        else:
            if groups > 1:
                if layer_cache.keys_t:
                    keys_t = keys_t[:, :, None].expand(1, self.kv_heads, groups, self.head_dim, length).reshape(
                        1, self.heads, self.head_dim, length)  # fmt: skip
                else:  # Hugging Face's repeat_kv, then its transposed view
                    keys_t = keys[:, :, None].expand(1, self.kv_heads, groups, length, self.head_dim).reshape(
                        1, self.heads, length, self.head_dim).transpose(2, 3)  # fmt: skip
                values = values[:, :, None].expand(1, self.kv_heads, groups, length, self.head_dim).reshape(
                    1, self.heads, length, self.head_dim)  # fmt: skip
            weights = torch.matmul(q, keys_t)
        weights = weights * self.scaling
        if mask is not None:
            weights = weights + mask
        weights = F.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
        if rows is not None:
            out = torch.matmul(weights.view(*rows, length), values).view(1, self.heads, n, self.head_dim)
        else:
            out = torch.matmul(weights, values)
        return out.transpose(1, 2).contiguous().reshape(1, n, -1).to(self.dtype)

    def _attend_rows(self, q: torch.Tensor, layer_cache: LeanLayerCache, past: int, lo: torch.Tensor,
                     visible: torch.Tensor) -> torch.Tensor:  # fmt: skip
        """``bs_attend`` in torch operations (no C glue): each row of the block alone, its query
        heads against the keys it sees gathered in cache order, the shapes of a decode step at its
        position (one product per row: slower than the glue, the same row-invariance)."""
        n, groups = q.shape[2], self.heads // self.kv_heads
        keys, values = layer_cache.keys, layer_cache.values
        outs = []
        for i in range(n):
            seen = torch.cat([torch.arange(int(lo[i]), past), past + torch.nonzero(visible[i]).flatten()])
            k, v = keys[0, :, seen], values[0, :, seen]  # [kv_heads, keys, head_dim]
            qi = q[0, :, i].reshape(self.kv_heads, groups, self.head_dim).float()
            weights = torch.matmul(qi, k.float().transpose(1, 2)) * self.scaling
            weights = F.softmax(weights, dim=-1, dtype=torch.float32)
            outs.append(torch.matmul(weights, v.float()).reshape(1, 1, -1))
        return torch.cat(outs, 1).to(self.dtype)

    def _visible(self, past: int, n: int, ancestors: torch.Tensor | None, depth: torch.Tensor | None) -> dict[bool, Any]:
        """What each row of a block sees, {sliding: (lo [n], mask [n, n] uint8)}: cache positions
        ``lo[i]``..``past`` and the block entries j where ``mask[i, j]`` (a chain: j <= i; a
        tree: i's ancestors and i), keys a window or more behind the row's position left out in
        sliding layers. ``ancestors``/``depth``: a token tree's (``tree_ancestors``), or None."""
        if ancestors is None:  # a chain of n; its block index is its depth
            ancestors = torch.ones(n, n, dtype=torch.bool).tril()
            depth = torch.arange(n)
        out = {}
        for sliding in (False, True):
            mask, lo = ancestors, torch.zeros(len(depth), dtype=torch.long)
            if sliding and self.window is not None:
                query = past + depth
                lo = (query - self.window + 1).clamp(0, past)
                mask = mask & ((past + depth)[None, :] > query[:, None] - self.window)
            out[sliding] = (lo, mask.to(torch.uint8))
        return out

    def _masks(self, past: int, n: int, dtype: torch.dtype, device: torch.device) -> dict[bool, Any]:
        """Additive masks {sliding: mask or None} for n queries after ``past`` cached tokens."""
        total = past + n
        query = torch.arange(past, total, device=device)[:, None]
        key = torch.arange(total, device=device)[None, :]
        out: dict[bool, Any] = {}
        for sliding in (False, True):
            allowed = key <= query
            if sliding and self.window is not None:
                allowed = allowed & (key > query - self.window)
            if bool(allowed.all()):
                out[sliding] = None
            else:
                out[sliding] = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(
                    ~allowed, torch.finfo(dtype).min)  # fmt: skip
        return out

    def _tree_masks(self, past: int, ancestors: torch.Tensor, depth: torch.Tensor, dtype: torch.dtype,
                    device: torch.device) -> dict[bool, torch.Tensor]:  # fmt: skip
        """Additive masks {sliding: mask} for a token tree after ``past`` cached tokens
        (``tree_mask``; sliding layers with the model's window)."""
        return {sliding: tree_mask(past, ancestors, depth, dtype, device, self.window if sliding else None)
                for sliding in (False, True)}  # fmt: skip


def _layer_norms(layer: torch.nn.Module, attn: torch.nn.Module) -> dict[str, tuple[torch.Tensor, float]]:
    return {name: _norm_weights(getattr(m, name)) for m in (layer, attn) for name in (
        "input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
        "post_feedforward_layernorm", "q_norm", "k_norm") if hasattr(m, name)}  # fmt: skip


def _norm_weights(norm: torch.nn.Module) -> tuple[torch.Tensor, float]:
    return (1.0 + norm.weight.float()), norm.eps


GELU_PIECE_ELEMENTS = 16384  # ATen runs an elementwise op of up to this many elements on one thread


def _gelu_rows(gate: torch.Tensor, approximate: str) -> torch.Tensor:
    """GELU of each row of ``gate`` [1, n, width], every row computed as the row alone is. ATen
    splits a longer block among threads at element offsets, mid-row, and a part's tail takes a
    scalar path with another tanh, so a row's last bits depended on the block and the thread count
    (``tests/test_rowwise_threads.py``); pieces of whole rows short enough to stay on one thread keep
    every row on the vectorized path."""
    n, width = gate.shape[1], gate.shape[2]
    rows = max(1, GELU_PIECE_ELEMENTS // width)
    if n <= rows:
        return F.gelu(gate, approximate=approximate)
    return torch.cat([F.gelu(gate[:, i : i + rows], approximate=approximate) for i in range(0, n, rows)], 1)


def _rms(x: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma3RMSNorm: normalised in float32, times (1 + weight), back in x's dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * scale).type_as(x)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
