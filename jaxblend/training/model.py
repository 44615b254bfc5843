"""A small decoder-only transformer LM in plain JAX, sharded by named mesh axes.

Pre-norm blocks (RMSNorm, multi-head causal self-attention with rotary position embeddings,
GELU MLP), tied input/output embeddings. Attention respects the batch schema: a token attends to
earlier tokens of the same `segment_ids` document (reset_attention_mask) and never to padding
(segment 0); rotary angles come from `positions` (reset_position_ids).

Parameters carry partition specs over the mesh axes `fsdp` (parameter sharding) and `tensor`
(heads / MLP hidden units); axes absent from the mesh are dropped, so the same model runs
data-parallel, FSDP or tensor-parallel by mesh shape alone.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxblend.validation import require_int


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Model size.

    Attributes:
      vocab_size: embedding rows (>= the tokenizer's vocabulary).
      d_model: residual width.
      num_layers: transformer blocks.
      num_heads: attention heads (must divide d_model).
      mlp_dim: MLP hidden width.
    """

    vocab_size: int
    d_model: int = 128
    num_layers: int = 2
    num_heads: int = 4
    mlp_dim: int = 512

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "num_layers", "num_heads", "mlp_dim"):
            require_int(f"ModelConfig.{name}", getattr(self, name), 1)
        if self.d_model % self.num_heads:
            raise ValueError(
                f"ModelConfig.num_heads={self.num_heads} must divide d_model={self.d_model}"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads


def param_specs(config: ModelConfig) -> dict:
    """Partition specs of every parameter (axis names `fsdp`, `tensor`)."""
    layer = {
        "attn_norm": P(None),
        "wqkv": P("fsdp", None, "tensor", None),
        "wo": P("tensor", None, "fsdp"),
        "mlp_norm": P(None),
        "w_in": P("fsdp", "tensor"),
        "w_out": P("tensor", "fsdp"),
    }
    return {
        "embed": P("tensor", "fsdp"),
        "layers": [dict(layer) for _ in range(config.num_layers)],
        "final_norm": P(None),
    }


def param_shardings(config: ModelConfig, mesh: Mesh) -> dict:
    """NamedShardings of every parameter on `mesh` (unknown axes replicate)."""
    return jax.tree.map(
        lambda s: NamedSharding(mesh, P(*(a if a in mesh.axis_names else None for a in s))),
        param_specs(config), is_leaf=lambda x: isinstance(x, P),
    )


def state_shardings(abstract_state, param_sharding_tree: dict, mesh: Mesh):
    """Shardings for an optimizer state: entries mirroring a parameter share its sharding.

    Optimizer states (Adam moments, ...) embed the parameter tree; a state leaf whose tree path
    ends with a parameter's path gets that parameter's sharding, anything else (step counters)
    is replicated over the mesh.
    """
    by_path = {
        jax.tree_util.keystr(path): sharding
        for path, sharding in jax.tree_util.tree_flatten_with_path(param_sharding_tree)[0]
    }
    replicated = NamedSharding(mesh, P())

    def pick(path, _leaf):
        key = jax.tree_util.keystr(path)
        return next((s for p, s in by_path.items() if key.endswith(p)), replicated)

    return jax.tree_util.tree_map_with_path(pick, abstract_state)


def init_params(config: ModelConfig, seed: int) -> dict:
    """Random parameters (float32), deterministic in `seed`."""
    keys = iter(jax.random.split(jax.random.key(seed), 2 + 4 * config.num_layers))
    d, h, hd, f = config.d_model, config.num_heads, config.head_dim, config.mlp_dim

    def normal(shape, fan_in):
        return jax.random.normal(next(keys), shape, jnp.float32) / math.sqrt(fan_in)

    layers = [
        {
            "attn_norm": jnp.ones((d,), jnp.float32),
            "wqkv": normal((d, 3, h, hd), d),
            "wo": normal((h, hd, d), d) / math.sqrt(2 * config.num_layers),
            "mlp_norm": jnp.ones((d,), jnp.float32),
            "w_in": normal((d, f), d),
            "w_out": normal((f, d), f) / math.sqrt(2 * config.num_layers),
        }
        for _ in range(config.num_layers)
    ]
    return {
        "embed": normal((config.vocab_size, d), 1.0) * 0.02,
        "layers": layers,
        "final_norm": jnp.ones((d,), jnp.float32),
    }


def _rms_norm(x, scale):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


def _rotary(x, positions):
    """Rotary embedding of `x` [B, S, H, Dh] at integer `positions` [B, S]."""
    half = x.shape[-1] // 2
    freqs = 1.0 / (10000.0 ** (jnp.arange(half, dtype=jnp.float32) / half))
    angles = positions[..., None].astype(jnp.float32) * freqs  # [B, S, half]
    sin, cos = jnp.sin(angles)[:, :, None, :], jnp.cos(angles)[:, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def forward(params: dict, config: ModelConfig, inputs, positions, segment_ids):
    """Logits [B, S, vocab] for `inputs` [B, S]."""
    x = params["embed"][inputs]
    s = inputs.shape[1]
    causal = jnp.tril(jnp.ones((s, s), bool))
    same_doc = segment_ids[:, :, None] == segment_ids[:, None, :]
    mask = (causal[None] & same_doc & (segment_ids[:, None, :] > 0))[:, None]  # [B,1,S,S]
    for layer in params["layers"]:
        h = _rms_norm(x, layer["attn_norm"])
        qkv = jnp.einsum("bsd,dthk->tbshk", h, layer["wqkv"])
        q, k, v = _rotary(qkv[0], positions), _rotary(qkv[1], positions), qkv[2]
        scores = jnp.einsum("bqhk,bshk->bhqs", q, k) / math.sqrt(config.head_dim)
        scores = jnp.where(mask, scores, -1e9)
        attn = jax.nn.softmax(scores, axis=-1)
        out = jnp.einsum("bhqs,bshk->bqhk", attn, v)
        x = x + jnp.einsum("bqhk,hkd->bqd", out, layer["wo"])
        h = _rms_norm(x, layer["mlp_norm"])
        x = x + jax.nn.gelu(h @ layer["w_in"]) @ layer["w_out"]
    x = _rms_norm(x, params["final_norm"])
    return x @ params["embed"].T


def token_losses(params: dict, config: ModelConfig, batch: dict):
    """Cross-entropy of every position [B, S] (float32), before the loss mask."""
    logits = forward(params, config, batch["inputs"], batch["positions"], batch["segment_ids"])
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(logp, batch["targets"][..., None], axis=-1)[..., 0]


def masked_mean(nll, mask):
    """(mean of `nll` over positions with `mask` 1, tokens counted)."""
    tokens = jnp.sum(mask)
    return jnp.sum(nll * mask) / jnp.maximum(tokens, 1.0), tokens

