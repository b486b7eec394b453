"""How big the CPU KV cache may be, and how many tokens that holds.

``--kv-size auto`` is the free memory of the CXL nodes in the launch's memory
set minus ``--reserve`` (default: 10 % of that free memory), so the offload
fills the CXL tier without pushing it into reclaim.  With a model
``config.json`` (a local model directory, or ``--model-config``), the bytes
per token give the capacity in tokens (the fields of the Hugging Face ``config.json``):

* standard and GQA attention: ``2 (K and V) × layers × kv_heads × head_dim × dtype bytes``,
  with ``head_dim`` from the config when present (it differs from
  hidden/heads in some models), ``kv_heads`` defaulting to the attention heads
  (MHA), and multimodal configs read from ``text_config``;
* MLA (DeepSeek-V2/V3/R1, Kimi-K2): one compressed latent per layer,
  ``layers × (kv_lora_rank + qk_rope_head_dim) × dtype bytes``;
* an fp8 KV cache (``--kv-cache-dtype fp8*``) stores 1 byte per value.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Sequence

from cxlctl.errors import UsageError
from cxlctl.model import Inventory
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import format_size, parse_size

GIB = 1 << 30
DTYPE_BYTES = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "bfloat16": 2,
    "bf16": 2,
    "float8": 1,
    "fp8": 1,
    "int8": 1,
}


class KvRequest(NamedTuple):
    bytes: int
    auto: bool
    free_cxl: Optional[int]  # when auto on the CXL tier
    reserve: Optional[int]
    #: auto on vLLM's CPU backend: the node its (first) worker puts the KV cache on, and what vLLM counts as available there
    worker_node: Optional[int] = None
    available: Optional[int] = None
    #: auto on the CXL tier: bytes of the engine's other memory its policy puts on the CXL nodes, kept free too
    others_on_cxl: int = 0


#: the files of a model directory the engine reads into memory (page cache, then its own copy)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def model_files_bytes(directory: str) -> int:
    """Bytes of a local model directory's weight files (what an engine reads into host memory)."""
    total = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        if name.endswith(WEIGHT_SUFFIXES):
            try:
                total += os.stat(os.path.join(directory, name)).st_size
            except OSError:
                continue
    return total


class ModelKv(NamedTuple):
    source: str  # the config.json read
    layers: int
    kv_heads: Optional[int]  # None for MLA
    head_dim: Optional[int]
    mla: bool
    dtype: str
    dtype_bytes: int
    bytes_per_token: int
    formula: str


def parse_size_arg(text: str, option: str) -> int:
    try:
        v = parse_size(text)
    except ValueError as e:
        raise UsageError(f"{option}: {e}", hint="sizes take K/M/G/T suffixes (powers of 1024), e.g. 64G") from None
    return v


def free_cxl(inv: Inventory, nodes: Sequence[int]) -> int:
    return sum(n.mem_free or 0 for n in inv.nodes if n.id in nodes and n.kind == "cxl")


def kv_request(
    inv: Inventory, spec: Optional[str], reserve: Optional[str], cxl_nodes: Sequence[int], others_on_cxl: int = 0
) -> Optional[KvRequest]:
    """``--kv-size SIZE|auto`` and ``--reserve SIZE`` → bytes (UsageError on bad input).  ``auto`` keeps
    ``others_on_cxl`` free besides the reserve: the engine's other memory its policy puts on CXL."""
    if spec is None:
        if reserve is not None:
            raise UsageError("--reserve only applies with --kv-size auto", hint="add --kv-size auto")
        return None
    t = spec.strip().lower()
    if t != "auto":
        if reserve is not None:
            raise UsageError("--reserve only applies with --kv-size auto", hint="drop --reserve or use --kv-size auto")
        size = parse_size_arg(spec, "--kv-size")
        if size == 0:
            raise UsageError("--kv-size 0: nothing to offload", hint="leave out --kv-size, or give a size such as 64G")
        return KvRequest(size, False, None, None)
    if not cxl_nodes:
        raise UsageError(
            "--kv-size auto: no CXL node in the memory set",
            hint="online CXL memory (cxlctl status), or give --mem-nodes with a CXL node, or an explicit --kv-size",
        )
    free = free_cxl(inv, cxl_nodes)
    res = parse_size_arg(reserve, "--reserve") if reserve is not None else free // 10
    size = free - res - others_on_cxl
    if size <= 0:
        raise UsageError(
            f"--kv-size auto: the CXL node(s) have {format_size(free)} free, not more than the reserve {format_size(res)}"
            + (f" and the engine's other memory there ({format_size(others_on_cxl)})" if others_on_cxl else ""),
            hint="lower --reserve, free memory on the CXL tier, or give --kv-size",
        )
    return KvRequest(size, True, free, res, others_on_cxl=others_on_cxl)


def cpu_worker_kv_request(node: Optional[int], available: Optional[int], reserve: Optional[str]) -> KvRequest:
    """``--kv-size auto`` on vLLM's CPU backend, where the KV cache is not on CXL at all: the
    worker allocates it on the node of its first CPU (docs/launch.md), and dies at start-up when
    that node has less available than asked (``determine_available_memory``).  So auto is what
    vLLM counts as available there minus ``--reserve`` (default 10 % of it); several workers
    share that figure (the caller divides by the ranks), which is safe when they sit on one node
    and conservative when they do not."""
    if node is None:
        raise UsageError(
            "--kv-size auto: the CPUs of the launch are on no NUMA node this host lists",
            hint="give --cpu-nodes, or an explicit --kv-size",
        )
    if available is None:
        raise UsageError(
            f"--kv-size auto: node {node}'s meminfo is unreadable (vLLM's CPU worker puts its KV cache there)",
            hint="give an explicit --kv-size",
        )
    res = parse_size_arg(reserve, "--reserve") if reserve is not None else available // 10
    size = available - res
    if size <= 0:
        raise UsageError(
            f"--kv-size auto: node {node} has {format_size(available)} available, not more than the reserve "
            f"{format_size(res)}",
            hint="lower --reserve, free memory on that node, or give --kv-size",
        )
    return KvRequest(size, True, None, res, node, available)


def _num(cfg: Dict[str, Any], *keys: str) -> Optional[int]:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


#: a model's config.json is a few KiB (the largest multimodal ones ~100 KiB); more is not one
CONFIG_MAX_BYTES = 1 << 20


def load_config(path: str) -> Dict[str, Any]:
    """The model's ``config.json`` (``path``, or ``path/config.json`` for a directory); UsageError otherwise.

    Read through the fenced reader's bounded read: ``--model-config /dev/zero`` or a FIFO is refused,
    not read until memory runs out or a writer comes, and a 100k-deep JSON is an error, not a
    RecursionError."""
    from cxlctl.hostio.host import Host
    from cxlctl.hostio.reader import Unreadable

    p = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        # the file is on the machine cxlctl runs on (a path the user typed), never under --root
        raw = Host().reader.read(os.path.abspath(p), limit=CONFIG_MAX_BYTES)
    except Unreadable as e:
        hint = "give the model's config.json" if e.errno is None else "give a config.json or a model directory"
        raise UsageError(f"cannot read model config {p}: {e.reason}", hint=hint) from None
    if raw is None:
        raise UsageError(f"cannot read model config {p}: no such file", hint="give a config.json or a model directory")
    try:
        data = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise UsageError(
            f"model config {p} is nested too deeply to be a model config", hint="give the model's config.json"
        ) from None
    except ValueError as e:  # UnicodeDecodeError included
        raise UsageError(f"model config {p} is not valid JSON: {e}", hint="give the model's config.json") from None
    if not isinstance(data, dict):
        raise UsageError(f"model config {p} is not a JSON object", hint="give the model's config.json")
    data["__path__"] = p
    return data


def model_kv(cfg: Dict[str, Any], kv_cache_dtype: Optional[str] = None) -> ModelKv:
    """Bytes per token of a model's KV cache (module docstring); UsageError when fields are missing."""
    src = str(cfg.get("__path__", "config"))
    c = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    assert isinstance(c, dict)
    layers = _num(c, "num_hidden_layers", "n_layer", "num_layers")
    if layers is None:
        raise UsageError(f"{src}: no num_hidden_layers", hint="give --model-config with the model's config.json")
    dtype = _dtype(c, cfg, kv_cache_dtype)
    nbytes = DTYPE_BYTES.get(dtype, 2)
    lora, rope = _num(c, "kv_lora_rank"), _num(c, "qk_rope_head_dim")
    if lora is not None and rope is not None:
        bpt = layers * (lora + rope) * nbytes
        return ModelKv(
            src, layers, None, None, True, dtype, nbytes, bpt, f"MLA: {layers} layers x ({lora} + {rope}) x {nbytes} B"
        )
    heads = _num(c, "num_attention_heads", "n_head")
    kv_heads = _num(c, "num_key_value_heads", "num_kv_heads") or heads
    head_dim = _num(c, "head_dim")
    hidden = _num(c, "hidden_size", "n_embd")
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    if kv_heads is None or head_dim is None:
        raise UsageError(
            f"{src}: cannot tell the KV heads and head size (need num_key_value_heads/num_attention_heads and head_dim or hidden_size)",
            hint="give --model-config with the model's config.json",
        )
    bpt = 2 * layers * kv_heads * head_dim * nbytes
    return ModelKv(
        src,
        layers,
        kv_heads,
        head_dim,
        False,
        dtype,
        nbytes,
        bpt,
        f"2 x {layers} layers x {kv_heads} KV heads x {head_dim} x {nbytes} B",
    )


def _dtype(c: Dict[str, Any], top: Dict[str, Any], kv_cache_dtype: Optional[str]) -> str:
    if kv_cache_dtype and kv_cache_dtype != "auto":
        k = kv_cache_dtype.lower()
        if k.startswith("fp8") or k.startswith("float8"):
            return "fp8"
        if k.startswith("fp4") or k.startswith("nvfp4"):
            return "fp8"  # not modelled below a byte; an upper bound
        return k
    for d in (c, top):
        for key in ("torch_dtype", "dtype"):
            v = d.get(key)
            if isinstance(v, str) and v:
                return v.lower().replace("torch.", "")
    return "bfloat16"


def tokens(size: int, per_token: int) -> int:
    return size // per_token if per_token > 0 else 0


def gib(size: int) -> str:
    """Bytes as GiB for vLLM/LMCache flags: two decimals, rounded down (never more than asked)."""
    hundredths = size * 100 // GIB
    whole, frac = divmod(hundredths, 100)
    return f"{whole}" if frac == 0 else f"{whole}.{frac:02d}".rstrip("0")
