"""Model descriptions: typed, validated LLM workloads from ``models/*.yaml`` (docs/models.md).

Three kinds:

* ``transformer``: a decoder-only LLM from its published configuration (layers, hidden size, query and
  KV heads, head dimension, FFN size and kind, norm, vocabulary);
* ``mlp``: a tensor-parallel MLP, column-parallel then row-parallel (the reference's ``tp_mlp``,
  spec_pe §11.5);
* ``attention_panels``: the reference's GQA attention panels (spec_pe §11.4), each an attention kernel on
  an IPCQ ring.

A model is a bundled name (``kbfast run model llama3_70b``) or a path to a YAML file.  Every problem becomes a
ConfigError naming the file, the key and the value (exit 2), as topologies do.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, ValidationError

from kbfast.config.validation import format_validation
from kbfast.config.loader import is_path, no_file
from kbfast.config.yaml_reading import parse_yaml, read_text
from kbfast.config.schema import PositiveInt, Strict, _no_bool_int
from kbfast.errors import ConfigError, did_you_mean

KINDS = ("transformer", "mlp", "attention_panels")
# a model's all-reduce algorithm: auto chooses per message (kbfast.workloads.collectives.in_model.CHOICES)
Collective = Literal["auto", "lrab", "ring_pipe", "hier2d"]


class Transformer(Strict):
    """A decoder-only transformer: per layer a norm, QKV, attention, O projection, norm, FFN; a
    mixture-of-experts model (``experts`` > 0) routes each token to ``top_k`` of ``experts`` FFNs of width
    ``ffn`` each, in every layer."""

    name: str
    description: str = ""
    kind: Literal["transformer"]
    layers: PositiveInt
    hidden: PositiveInt
    heads: PositiveInt
    kv_heads: PositiveInt
    head_dim: PositiveInt
    ffn: PositiveInt
    ffn_kind: Literal["swiglu", "gelu"]
    norm: Literal["rmsnorm", "layernorm"]
    vocab: PositiveInt
    collective: Collective = "auto"
    experts: Annotated[int, BeforeValidator(_no_bool_int)] = 0    # routed experts per layer (0: a dense FFN)
    top_k: Annotated[int, BeforeValidator(_no_bool_int)] = 0      # experts each token is routed to

    @property
    def moe(self) -> bool:
        """Is it a mixture of experts (its FFN routed to ``top_k`` of ``experts``)?"""
        return self.experts > 0

    @property
    def qkv_cols(self) -> int:
        """Output columns of the fused QKV projection: (heads + 2 kv_heads) * head_dim."""
        return (self.heads + 2 * self.kv_heads) * self.head_dim

    @property
    def up_cols(self) -> int:
        """Output columns of the FFN's first projection (gate and up fused under SwiGLU)."""
        return self.ffn * (2 if self.ffn_kind == "swiglu" else 1)

    def layer_params(self) -> int:
        """Weights of one layer: QKV, O, the FFN's up (and gate) and down projections (each expert's, and the
        router's ``hidden x experts``, in a mixture of experts)."""
        ffn = self.hidden * self.up_cols + self.ffn * self.hidden
        return self.hidden * self.qkv_cols + self.heads * self.head_dim * self.hidden \
            + (self.experts * ffn + self.hidden * self.experts if self.moe else ffn)


class Mlp(Strict):
    """A tensor-parallel MLP: ``dims = [d_in, d_hidden, d_out]``, column- then row-parallel."""

    name: str
    description: str = ""
    kind: Literal["mlp"]
    batch: PositiveInt
    dims: tuple[PositiveInt, PositiveInt, PositiveInt]
    collective: Collective = "auto"


class Panel(Strict):
    """One attention panel: the kernel, the IPCQ install that forms its ring, S_q, ranks, rank axis."""

    kernel: Literal["mesh_kv", "mesh_mlo"]
    install: Literal["intracube_pe_ring", "intercube_multisip"]
    s_q: PositiveInt
    n_ranks: PositiveInt
    rank_axis: Annotated[Literal[0, 1], BeforeValidator(_no_bool_int)]


class AttentionPanels(Strict):
    """The reference's attention panels at one (d_head, KV length)."""

    name: str
    description: str = ""
    kind: Literal["attention_panels"]
    d_head: PositiveInt
    kv_len: PositiveInt
    panels: dict[str, Panel]


Model = Transformer | Mlp | AttentionPanels
_CLASSES = {"transformer": Transformer, "mlp": Mlp, "attention_panels": AttentionPanels}


def model_names() -> list[str]:
    """Names of the models shipped with kbfast."""
    folder = resources.files("kbfast.models")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_model(name_or_path: str | Path) -> Model:
    """The validated model ``name_or_path`` (a bundled name, or a YAML path)."""
    path = Path(name_or_path)
    if is_path(name_or_path):
        if not path.is_file():
            raise ConfigError(str(path), "<file>", str(path), no_file(path, "model"),
                              f"bundled models: {', '.join(model_names())}")
        label, text = str(path), read_text(path, str(path))
    else:
        name = str(name_or_path)
        if name not in model_names():
            raise ConfigError(name, "<model>", name, "unknown model",
                              did_you_mean(name, model_names(), "bundled models"))
        label = f"{name}.yaml"
        text = read_text(resources.files("kbfast.models").joinpath(label), label)
    data = parse_yaml(label, text, "model")
    kind = data.get("kind")
    if "kind" not in data:   # a misspelt key (``knd``) is what to report, with the keys of every kind
        keys = sorted({key for cls in _CLASSES.values() for key in cls.model_fields})
        unknown = next((key for key in data if key not in keys), None)
        if unknown is not None:
            raise ConfigError(label, str(unknown), data[unknown], f"unknown key {unknown!r}",
                              did_you_mean(str(unknown), keys))
        raise ConfigError(label, "kind", None, "required key is missing", f"kinds: {', '.join(KINDS)}")
    if kind not in _CLASSES:
        raise ConfigError(label, "kind", kind, "unknown model kind",
                          did_you_mean(kind if isinstance(kind, str) else "", KINDS, "kinds"))
    cls = _CLASSES[kind]
    try:
        model = cls.model_validate(data)
    except ValidationError as err:
        raise format_validation(label, err, cls) from None
    _check(label, model)
    return model


def _check(label: str, m: Model) -> None:
    """Cross-field rules the types cannot say."""
    if isinstance(m, Transformer) and m.heads % m.kv_heads:
        raise ConfigError(label, "kv_heads", m.kv_heads, f"must divide heads ({m.heads}): each KV head serves "
                          "a whole group of query heads", "use a divisor of heads, e.g. 8 for 64 heads")
    if isinstance(m, Transformer) and (m.experts < 0 or m.top_k < 0):
        key = "experts" if m.experts < 0 else "top_k"
        raise ConfigError(label, key, getattr(m, key), "must be 0 or more", "0 for a dense FFN")
    if isinstance(m, Transformer) and m.moe and not 1 <= m.top_k <= m.experts:
        raise ConfigError(label, "top_k", m.top_k, f"a mixture of {m.experts} experts routes each token to 1 to "
                          f"{m.experts} of them", "use the published num_experts_per_tok, e.g. 2 or 8")
    if isinstance(m, Transformer) and not m.moe and m.top_k:
        raise ConfigError(label, "top_k", m.top_k, "applies to a mixture of experts (experts > 0) only",
                          "give experts, or drop top_k")
    if isinstance(m, AttentionPanels):
        if not m.panels:
            raise ConfigError(label, "panels", {}, "needs at least one panel")
        for name, p in m.panels.items():
            want = "intracube_pe_ring" if p.rank_axis == 0 else "intercube_multisip"
            if p.install != want:
                raise ConfigError(label, f"panels.{name}.install", p.install,
                                  f"rank_axis {p.rank_axis} ranks {'the PEs of a cube' if p.rank_axis == 0 else 'cubes'}",
                                  f"use install: {want}")
            if m.kv_len % p.n_ranks:
                raise ConfigError(label, f"panels.{name}.n_ranks", p.n_ranks,
                                  f"must divide kv_len ({m.kv_len}): each rank holds an equal KV block",
                                  "use a divisor of kv_len")
