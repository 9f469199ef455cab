"""Published training runs (the JSON format of shared/data/published_calibration.json) as inputs.

For each run: the launch script that would reproduce it, the shipped hardware description of its
accelerator, and the Strategy it used. Used by validate_published.py.

GPT-style rows (Korthikanti et al. on Selene) get a Megatron-LM `pretrain_gpt.py` script (LayerNorm,
GeLU, learned positions, dropout 0.1). LLaMA rows (`model.arch == "llama"`, the MindSpeed-LLM runs
on 910B) get the flags of the launch script they were measured with (source.config_via in the
runs file, e.g. Ascend/MindSpeed-LLM examples/llama2/pretrain_llama2_7b_ptd.sh at v1.0.RC2.0):
RMSNorm, SwiGLU, rotary positions, no biases, untied output layer, no dropout, vocabulary not
padded (`--make-vocab-size-divisible-by 1`), and the run's own `--use-flash-attn`, fused kernels
(`--use-fused-rmsnorm` ...), `--use-distributed-optimizer`, `--overlap-grad-reduce` and
`--use-mc2` as the runs file lists them, so the analytic profile and the reader see what ran.

The file lives in the project's shared folder, `../shared/` from the repository root (beside the
clone, as CI lays it out); `load_runs` says so when it is missing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from published_flags import training_flags
from published_moe import moe_run

from tinker_opt.hardware import HardwareSpec, load_hardware, shipped_hardware
from tinker_opt.specs import ModelSpec
from tinker_opt.strategy import Strategy

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUNS_FILE = REPO_ROOT.parent / "shared" / "data" / "published_calibration.json"
HARDWARE_BY_ID = {
    "a100_80gb_sxm_selene": "a100-80gb",
    "a100_80gb_sxm": "a100-80gb",
    "a100_40gb_sxm": "a100-40gb",
    "h100_sxm_80gb": "h100-80gb",
    "h100_80gb_sxm": "h100-80gb",
    "ascend_910b_atlas_a2": "910b",
    "h100_dgx_ref": "h100-80gb",
    "dgx_b200": "b200",
    "dgx_gb200": "gb200-nvl72",
}
"""Hardware ids of the published-runs file -> shipped description names."""


@dataclass(frozen=True)
class PublishedRun:
    """One run of the file: what was trained, how, on what, and what was measured."""

    run_id: str
    model: dict[str, Any]
    strategy: dict[str, Any]
    hardware_id: str
    hardware_name: str
    n_devices: int
    measured: dict[str, Any]
    derived: dict[str, Any] = field(default_factory=dict)
    category: str = "dense"
    """`dense` (the first rows), or the file's `category`: moe, cp, dense_h100."""

    @property
    def num_nodes(self) -> int:
        return max(1, self.n_devices // 8)

    @property
    def is_llama(self) -> bool:
        """LLaMA-style layers (RMSNorm, SwiGLU, rotary, no biases): LLaMA and Mixtral rows."""
        return self.model.get("arch") in ("llama", "mixtral")

    @property
    def ran(self) -> bool:
        """The run ran: it has a measured time, or its source states it ran (`measured.ran`, the
        quote: e.g. a vendor's model list marking the script tested) without giving a time."""
        return self.iteration_time_s is not None or bool(self.measured.get("ran"))

    @property
    def iteration_time_s(self) -> float | None:
        """Measured seconds per iteration: `iteration_time_s`, else the published `step_time_s`,
        else gbs * seq / (n_devices * tokens_per_s_per_device) (the runs file's stated rule)."""
        m = self.measured
        if "iteration_time_s" in m:
            return float(m["iteration_time_s"])
        if "step_time_s" in m:
            return float(m["step_time_s"])
        if "tokens_per_s_per_device" in m:
            tokens = self.strategy["gbs"] * self.model["seq"]
            return tokens / (self.n_devices * float(m["tokens_per_s_per_device"]))
        if (
            "iteration_time_s" in self.derived
        ):  # e.g. from published TFLOPS (derived.iteration_time_how)
            return float(self.derived["iteration_time_s"])
        return None


def load_runs(path: Path = DEFAULT_RUNS_FILE) -> list[PublishedRun]:
    """The runs of a published-runs JSON file; SystemExit with one line when it is missing."""
    path = Path(path)
    if not path.is_file():
        raise SystemExit(
            f"published-runs file {path} not found: it is shared/data/"
            "published_calibration.json in the folder beside the repository "
            "(../shared/ from its root); pass the file's path as the first argument"
        )
    data = json.loads(path.read_text(encoding="utf-8"))
    runs = []
    for run in data["runs"]:
        hw = run.get("hardware", {})
        published = PublishedRun(
            run_id=run["id"],
            model=run["model"],
            strategy=normalised_strategy(run["strategy"]),
            hardware_id=hw.get("id", ""),
            hardware_name=hw.get("name", ""),
            n_devices=int(run["n_devices"]),
            measured=run.get("measured", {}),
            derived=run.get("derived", {}),
            category=run.get("category", "dense"),
        )
        runs.append(moe_run(published, run.get("derived", {})))
    return runs


def _said(value: Any, *words: str) -> bool:
    """A strategy field is on: literally True, or free text (quoting the source) naming a word."""
    if isinstance(value, bool):
        return value
    return isinstance(value, str) and any(w in value.lower() for w in words)


def _recommended(s: dict[str, Any], key: str, *words: str) -> bool:
    """A knob the row sets, or leaves 'not stated' while its source's notes (`overlap` text, e.g.
    "README tips recommend --overlap-grad-reduce/--overlap-param-gather, distributed optimizer")
    recommend it: a vendor benchmark of its own recipe runs the recommended setting."""
    value = s.get(key)
    if value is True:
        return True
    return _said(value, "not stated") and _said(s.get("overlap", ""), *words)


def _recompute(value: Any) -> str:
    """`none | selective | full` from the file's field: 'full, block, ...', 'activation_checkpointing
    true in the linked yaml' (every layer: full), 'none (...)', 'not stated' (Megatron's default: none)."""
    text = str(value or "none").lower()
    if text.startswith("selective"):
        return "selective"
    if text.startswith("full") or "activation_checkpointing true" in text:
        return "full"
    return "none"


def normalised_strategy(raw: dict[str, Any]) -> dict[str, Any]:
    """The file's strategy with its free-text fields (quotes of the source) read as typed values.

    Integers stay; `null` knobs take Megatron's default (vpp 1, cp 1, ep 1); a boolean knob is on
    only when the source says so ('not stated' is off, the framework default, unless the source's
    notes recommend it: `_recommended`); the overlap flags
    come from the optimizer text ('overlap_grad_sync, overlap_param_sync': NeMo's distributed
    fused Adam) and `tp_comm_overlap` text ('ub_tp_comm_overlap true': userbuffers); FSDP2 rows
    (`fsdp` text) are ZeRO-3 over the data-parallel ranks."""
    s = dict(raw)
    for key in ("vpp", "cp", "ep"):
        s[key] = s.get(key) if isinstance(s.get(key), int) else 1
    s["etp"] = s["etp"] if isinstance(s.get("etp"), int) else None
    s["sp"] = s.get("sp") is True
    s["recompute"] = _recompute(s.get("recompute"))
    notes = s.get("overlap", "")
    recommended = _recommended(s, "distributed_optimizer", "distributed optimizer")
    s["distributed_optimizer"] = recommended
    optimizer = s.get("optimizer", "")
    recommends = recommended and _said(raw.get("distributed_optimizer"), "not stated")
    s["overlap_grad_reduce"] = (
        s.get("overlap_grad_reduce") is True
        or _said(optimizer, "overlap_grad")
        or (recommends and _said(notes, "--overlap-grad-reduce"))
    )
    s["overlap_param_gather"] = _said(optimizer, "overlap_param") or (
        recommends and _said(notes, "overlap-param-gather")
    )
    s["tp_comm_overlap"] = _said(s.get("tp_comm_overlap"), "true")
    s["fsdp"] = _said(s.get("fsdp"), "fsdp")
    return s


def hardware_for(run: PublishedRun, override: str | None = None) -> HardwareSpec:
    """The shipped description of the run's accelerator (or `override`, a name or a file)."""
    if override:
        return load_hardware(override)
    name = HARDWARE_BY_ID.get(run.hardware_id)
    if name is None:
        text = f"{run.hardware_id} {run.hardware_name}".lower()
        name = next(
            (
                n
                for n in shipped_hardware()
                if n.replace("-", "") in text.replace("-", "").replace("_", "")
            ),
            None,
        )
    if name is None:
        raise SystemExit(
            f"run {run.run_id}: no shipped hardware for '{run.hardware_id}'; pass --hardware FILE"
        )
    return load_hardware(name)


def model_flags(run: PublishedRun) -> list[str]:
    """The network: GPT-style (LayerNorm, GeLU, learned positions, dropout 0.1) or LLaMA-style."""
    m, s = run.model, run.strategy
    flags = [
        f"--num-layers {m['layers']}",
        f"--hidden-size {m['hidden']}",
        f"--ffn-hidden-size {m['ffn'] or m['moe']['moe_ffn']}",
        f"--num-attention-heads {m['heads']}",
        f"--kv-channels {m.get('head_dim', m['hidden'] // m['heads'])}",
        f"--seq-length {m['seq']}",
        f"--max-position-embeddings {m['seq']}",
        f"--vocab-size {m['vocab']}",
    ]
    if run.is_llama:
        flags += [
            "--make-vocab-size-divisible-by 1",
            "--attention-dropout 0.0",
            "--hidden-dropout 0.0",
            "--position-embedding-type rope",
            "--normalization RMSNorm",
            "--swiglu",
            "--disable-bias-linear",
            *([] if m.get("tied_embeddings") else ["--untie-embeddings-and-output-weights"]),
            *(f"--{flag}" for flag in s.get("fused", ())),
        ]
    else:
        flags += [
            "--make-vocab-size-divisible-by 128",
            "--attention-dropout 0.1",
            "--hidden-dropout 0.1",
        ]
    if s.get("flash_attn") or run.category != "dense":
        # The second part's runs (Megatron-Core / NeMo with Transformer Engine, MindSpeed-LLM)
        # run fused / flash attention: TE's default attention backend.
        flags.append("--use-flash-attn")
    if _runs_transformer_engine(s.get("framework", "")):
        flags.append("--transformer-impl transformer_engine")
    if m.get("kv_heads", m["heads"]) != m["heads"]:
        flags += ["--group-query-attention", f"--num-query-groups {m['kv_heads']}"]
    return flags + moe_flags(run)


def _runs_transformer_engine(framework: str) -> bool:
    """Megatron-Core and NeMo runs (on CUDA) build their layers from Transformer Engine modules
    (Megatron-Core's TE layer spec, the default `--transformer-impl transformer_engine` of
    megatron/training/arguments.py; NeMo 2 / Megatron-Bridge `transformer_impl
    "transformer_engine"`): their fused norms and SwiGLU keep less (ModelSpec.fused_kernels,
    profile/kernels.py). ModelLink (Ascend) and NeMo AutoModel (PyTorch FSDP2) rows are not."""
    text = framework.lower()
    named = any(w in text for w in ("megatron-core", "nemo", "transformerengine"))
    return named and not any(w in text for w in ("modellink", "automodel"))


def moe_flags(run: PublishedRun) -> list[str]:
    """Mixture-of-experts shape and expert parallelism (`model.moe` of the runs file)."""
    moe, s = run.model.get("moe"), run.strategy
    if not moe:
        return []
    flags = [
        f"--num-experts {moe['num_experts']}",
        f"--moe-router-topk {moe['topk']}",
        f"--moe-ffn-hidden-size {moe['moe_ffn']}",
        f"--expert-model-parallel-size {s['ep']}",
    ]
    shared = (moe.get("shared_experts") or {}).get("ffn_total")
    if shared:
        flags.append(f"--moe-shared-expert-intermediate-size {shared}")
    if moe.get("first_k_dense"):
        flags.append(f"--first-k-dense-replace {moe['first_k_dense']}")
    return flags


def parallel_flags(run: PublishedRun) -> list[str]:
    """tp, pp, vpp, cp, sequence parallel, ZeRO (distributed optimizer, FSDP) and overlap flags."""
    m, s = run.model, run.strategy
    flags = [
        f"--tensor-model-parallel-size {s['tp']}",
        f"--pipeline-model-parallel-size {s['pp']}",
    ]
    if s["vpp"] > 1:
        # Megatron-LM counts the embedding and the loss as layers of the split when the run's
        # config says so (arguments.py: num_layers + 1 per --account-for-*-in-pipeline-split
        # before dividing by pp x layers per virtual stage), as the ModelZoo's runtime.conf does
        # (Qwen3-235B: NUM_LAYERS 96 for 94 layers).
        counted = sum(
            flag in s.get("extra_flags", ())
            for flag in (
                "--account-for-embedding-in-pipeline-split",
                "--account-for-loss-in-pipeline-split",
            )
        )
        layers_per_chunk = (m["layers"] + counted) // (s["pp"] * s["vpp"])
        flags.append(f"--num-layers-per-virtual-pipeline-stage {layers_per_chunk}")
    if s["cp"] > 1:
        flags.append(f"--context-parallel-size {s['cp']}")
    switches = (
        ("sp", "--sequence-parallel"),
        ("distributed_optimizer", "--use-distributed-optimizer"),
        ("overlap_grad_reduce", "--overlap-grad-reduce"),
        ("overlap_param_gather", "--overlap-param-gather"),
        ("tp_comm_overlap", "--tp-comm-overlap"),
        ("mc2", "--use-mc2"),
    )
    flags += [flag for key, flag in switches if s.get(key)]
    if s["fsdp"]:
        # PyTorch FSDP2 shards parameters, gradients and states (ZeRO-3): Megatron-FSDP's
        # optim_grads_params is the same sharding in Megatron-LM's flags.
        flags += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads_params"]
    return flags + s.get("extra_flags", [])  # MoE rows: published_moe.py


def launch_script(run: PublishedRun) -> str:
    """A Megatron-LM `pretrain_gpt.py` launch script (bash arrays, as Megatron's examples write them)."""
    gpus_per_node = min(8, run.n_devices)

    def array(name: str, flags: list[str]) -> str:
        return f"{name}=(\n" + "".join(f"    {flag}\n" for flag in flags) + ")\n"

    return (
        "#!/bin/bash\n# Generated from published run " + run.run_id + "\n"
        "export CUDA_DEVICE_MAX_CONNECTIONS=1\n\n"
        f"GPUS_PER_NODE={gpus_per_node}\nNUM_NODES={max(1, run.n_devices // gpus_per_node)}\n"
        "MASTER_ADDR=${MASTER_ADDR:-localhost}\nMASTER_PORT=${MASTER_PORT:-6000}\nNODE_RANK=${RANK:-0}\n\n"
        "DISTRIBUTED_ARGS=(\n    --nproc_per_node $GPUS_PER_NODE\n    --nnodes $NUM_NODES\n"
        "    --node_rank $NODE_RANK\n    --master_addr $MASTER_ADDR\n    --master_port $MASTER_PORT\n)\n\n"
        + array("GPT_MODEL_ARGS", model_flags(run))
        + "\n"
        + array("MODEL_PARALLEL_ARGS", parallel_flags(run))
        + "\n"
        + array("TRAINING_ARGS", training_flags(run))
        + "\n"
        + "torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \\\n    ${GPT_MODEL_ARGS[@]} \\\n"
        "    ${MODEL_PARALLEL_ARGS[@]} \\\n    ${TRAINING_ARGS[@]} \\\n    --mock-data --tokenizer-type NullTokenizer\n"
    )


def model_spec_of(run: PublishedRun) -> ModelSpec:
    """The ModelSpec the launch script describes (GPT-style, or LLaMA-style for `arch: llama`)."""
    m, s = run.model, run.strategy
    common = dict(
        num_layers=m["layers"],
        hidden_size=m["hidden"],
        ffn_hidden_size=m["ffn"],
        num_attention_heads=m["heads"],
        num_query_groups=m.get("kv_heads", m["heads"]),
        kv_channels=m.get("head_dim", m["hidden"] // m["heads"]),
        seq_length=m["seq"],
        vocab_size=m["vocab"],
        precision=s.get("precision", "bf16"),
        use_flash_attn=bool(s.get("flash_attn")),
    )
    if run.is_llama:
        return ModelSpec(
            **common,
            make_vocab_size_divisible_by=1,
            attention_dropout=0.0,
            hidden_dropout=0.0,
            position_embedding_type="rope",
            normalization="RMSNorm",
            swiglu=True,
            add_bias_linear=False,
            untie_embeddings_and_output_weights=True,
        )
    return ModelSpec(**common, attention_dropout=0.1, hidden_dropout=0.1)


def strategy_of(run: PublishedRun) -> Strategy:
    """The published strategy in the tool's Strategy schema."""
    s = run.strategy
    full = s.get("recompute") == "full"
    return Strategy(
        tp=s["tp"],
        pp=s["pp"],
        dp=s.get("dp", 1),
        vpp=s.get("vpp", 1),
        sp=bool(s.get("sp")),
        zero=int(bool(s.get("distributed_optimizer"))),
        mbs=s["mbs"],
        recompute=s.get("recompute", "none"),
        recompute_method="uniform" if full else None,
        recompute_num_layers=1 if full else None,
    )
