"""Fuzzing the script reader and writer with generated launch scripts.

Each script puts a valid `torchrun pretrain_gpt.py` launch, whose model and parallel arguments
come through variables, among the shell constructs real launch scripts use: quotes and escapes,
line continuations, arrays with comments inside, heredocs, `$((...))`, `${V:-d}`, `${#A[@]}`,
`source`, for / if / case blocks, functions and command substitutions. Properties:

* `inspect` (read_script_text + inspect_dict) returns a result or raises a one-line TinkerError,
  never another exception, also on scripts with a random piece cut out or pasted in;
* `apply` output passes `bash -n` whenever the input does, and reads back the strategy it wrote.

The example counts keep the file to a few seconds; `TINKER_FUZZ_SCALE=20 pytest
tests/test_script_fuzz.py` multiplies them for a longer hunt.
"""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from script_support import bash_syntax_ok

from tinker_opt.emit.script_writer import apply_strategy
from tinker_opt.errors import TinkerError
from tinker_opt.expressible import expressible_strategy
from tinker_opt.script import versions
from tinker_opt.script.reader import inspect_dict, read_script_text
from tinker_opt.strategy import OVERLAP_KEYS

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash for bash -n")

SCALE = int(os.environ.get("TINKER_FUZZ_SCALE", "1"))
MODEL = {"NUM_LAYERS": 8, "HIDDEN_SIZE": 256, "NUM_HEADS": 8, "SEQ_LEN": 512}
NOISE = [
    "# a comment with 'quotes\" $(( and ${braces",
    "source /usr/local/Ascend/ascend-toolkit/set_env.sh",
    ". ./env_config.sh",
    "set -ex",
    'export PYTORCH_NPU_ALLOC_CONF="expandable_segments:True"',
    'export HCCL_ALGO="alltoall=level0:NA;level1:pipeline"',
    'ESCAPED="a \\"quoted\\" \\$HOME \\\\ path" # trailing comment',
    "SINGLE='it''s $NOT expanded'",
    "DATE=$(date +%Y-%m-%d)",
    "HOST=`hostname`",
    "NOISE_ARR=(a \"b c\" 'd' # a comment inside\n    e)\nCOUNT=${#NOISE_ARR[@]}",
    'LOG_DIR=${LOG_DIR:-"./logs"}\nmkdir -p "$LOG_DIR"',
    'cat > /tmp/ds_config.json <<EOF\n{"train_batch_size": "$GBS", \'unbalanced\n}\nEOF',
    "cat <<'EOF' > /tmp/notes.txt\n--tensor-model-parallel-size 99 ( \" `\nEOF",
    "cat <<-END\n\tindented $((1 + \n\tEND",
    'for i in 1 2 3; do\n    echo "$i"\ndone',
    "for ((i = 0; i < 2; i++)); do echo $i; done",
    'if [ -z "$MASTER_ADDR" ]; then\n    MASTER_ADDR=localhost\nfi',
    'if [[ "$X" == "b" ]]; then echo y; else echo n; fi',
    'case "$MODE" in\n    a|b) echo ab ;;\n    *) echo other ;;\nesac',
    'log() {\n    echo "[$(date)] $*"\n}',
    "STEPS=$(( (100 + 7) / 8 * 2 ))",
    "while false; do :; done",
    "SEP=$'a\\'b\\tc'",
    "VERSION=$(cat <<'EOF'\n1.0 ) ( '\nEOF\n)",
    "BIG=$((9**9**9)); NEG=$((-7 % 3))",
    "echo done > /dev/null 2>&1",
]


@st.composite
def value_text(draw, name: str, value: int) -> str:
    """`NAME=value` in one of the styles scripts use."""
    form = draw(st.sampled_from(["plain", "double", "single", "default", "arith", "export"]))
    return {
        "plain": f"{name}={value}",
        "double": f'{name}="{value}"',
        "single": f"{name}='{value}'",
        "default": f"{name}=${{{name}_OVERRIDE:-{value}}}",
        "arith": f"{name}=$(( {value} / 1 ))",
        "export": f"export {name}={value}",
    }[form]


@st.composite
def reference(draw, name: str) -> str:
    return draw(st.sampled_from([f"${name}", f"${{{name}}}", f'"${name}"', f"${{{name}:-1}}"]))


@st.composite
def group(draw, name: str, flags: list[str]) -> tuple[str, str]:
    """(assignment text, how the launch line uses it): a quoted string or an array."""
    if draw(st.booleans()):
        end = " \\\n" if draw(st.booleans()) else "\n"
        body = "".join(f"    {flag}{end}" for flag in flags)
        return f'{name}="\n{body}"', f"${name}"
    lines = []
    for flag in flags:
        comment = draw(st.sampled_from(["", "  # why", "  # --commented-out 3"]))
        lines.append(f"    {flag}{comment}\n")
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), "    # --num-layers 99\n")
    use = draw(st.sampled_from([f"${{{name}[@]}}", f'"${{{name}[@]}}"']))
    return f"{name}=(\n{''.join(lines)})", use


@st.composite
def launch_scripts(draw) -> str:
    """A launch script with a valid launch line among shell constructs."""
    blocks = ["#!/bin/bash", "export CUDA_DEVICE_MAX_CONNECTIONS=1"]
    for name, value in MODEL.items():
        blocks.append(draw(value_text(name, value)))
    blocks += [
        draw(value_text("TP", draw(st.sampled_from([1, 2])))),
        draw(value_text("PP", draw(st.sampled_from([1, 2])))),
        "NPUS_PER_NODE=8",
        "NNODES=1",
        "WORLD_SIZE=$(($NPUS_PER_NODE*$NNODES))",
    ]

    def arg(flag: str, name: str) -> str:  # `--flag $V` or `--flag=$V`
        return f"{flag}{draw(st.sampled_from([' ', '=']))}{draw(reference(name))}"

    model_flags = [
        arg("--num-layers", "NUM_LAYERS"),
        arg("--hidden-size", "HIDDEN_SIZE"),
        arg("--num-attention-heads", "NUM_HEADS"),
        arg("--seq-length", "SEQ_LEN"),
        arg("--max-position-embeddings", "SEQ_LEN"),
        "--vocab-size 1000",
    ]
    parallel_flags = [
        arg("--tensor-model-parallel-size", "TP"),
        arg("--pipeline-model-parallel-size", "PP"),
        "--micro-batch-size 1",
        "--global-batch-size 16",
    ]
    if draw(st.booleans()):
        parallel_flags.append("--use-distributed-optimizer")
    dist_text, dist_use = draw(
        group(
            "DISTRIBUTED_ARGS",
            [
                "--nproc_per_node $NPUS_PER_NODE",
                "--nnodes $NNODES",
                "--node_rank ${NODE_RANK:-0}",
                "--master_addr ${MASTER_ADDR:-localhost}",
                "--master_port 6000",
            ],
        )
    )
    model_text, model_use = draw(group("GPT_ARGS", model_flags))
    par_text, par_use = draw(group("PARALLEL_ARGS", parallel_flags))
    blocks += [dist_text, model_text, par_text]
    noise = draw(st.lists(st.sampled_from(NOISE), max_size=5))
    for block in noise:
        blocks.insert(draw(st.integers(2, len(blocks))), block)
    sep = draw(st.sampled_from([" ", " \\\n    "]))
    tail = draw(
        st.sampled_from(
            [
                "",
                " | tee logs/train.log",
                " 2>&1 | tee ${LOG_DIR:-.}/train.log",
                " > train.log 2>&1 &",
            ]
        )
    )
    prefix = draw(st.sampled_from(["", "nohup "]))
    blocks.append(
        f"{prefix}torchrun {dist_use} pretrain_gpt.py{sep}{model_use}{sep}{par_use}"
        f"{sep}--bf16 --train-iters 10{tail}"
    )
    return "\n".join(blocks) + "\n"


def inspect_text(text: str) -> dict | None:
    """inspect's work: the dict, or None after a one-line TinkerError."""
    try:
        return inspect_dict(read_script_text(text))
    except TinkerError as exc:
        assert "\n" not in str(exc).strip(), f"multi-line error: {exc}"
        return None


@settings(max_examples=120 * SCALE)
@given(script=launch_scripts())
def test_generated_scripts_read_their_strategy(script):
    """A generated script (valid bash) reads: tp, pp and the model come through every construct."""
    ok, err = bash_syntax_ok(script)
    assert ok, err
    result = inspect_text(script)
    assert result is not None, script
    assert result["model"]["num_layers"] == MODEL["NUM_LAYERS"]
    assert result["model"]["hidden_size"] == MODEL["HIDDEN_SIZE"]
    assert result["cluster"] == {"nnodes": 1, "nproc_per_node": 8}


_CUTS = st.sampled_from(
    [
        '"',
        "'",
        "\\",
        "$(",
        "${",
        "$((",
        "(",
        ")",
        "{",
        "}",
        "`",
        "<<EOF",
        "\n",
        "[@]",
        "#",
        ";",
        "&",
        "|",
        "=",
        "\\\n",
        "$",
        "${#",
        "${A[",
        "))",
    ]
)


@settings(max_examples=200 * SCALE)
@given(script=launch_scripts(), data=st.data())
def test_inspect_never_raises_anything_but_a_one_line_error(script, data):
    """Cut a piece out or paste a shell token in: inspect answers or raises a one-line TinkerError."""
    at = data.draw(st.integers(0, len(script)))
    if data.draw(st.booleans()):
        mutated = script[:at] + data.draw(_CUTS) + script[at:]
    else:
        mutated = script[:at] + script[at + data.draw(st.integers(1, 40)) :]
    inspect_text(mutated)


@settings(max_examples=40 * SCALE)
@given(
    script=launch_scripts(),
    tp_pp=st.sampled_from([(1, 1), (1, 2), (2, 1), (2, 2), (4, 1), (1, 4), (4, 2), (2, 4)]),
    sp=st.booleans(),
    dist_opt=st.booleans(),
    recompute=st.sampled_from(["none", "selective"]),
)
def test_apply_keeps_bash_syntax_and_reads_back(script, tp_pp, sp, dist_opt, recompute):
    """apply's output passes bash -n like its input and reads back the strategy it wrote."""
    tp, pp = tp_pp
    info = read_script_text(script)
    target = info.train.strategy.replace(
        tp=tp, pp=pp, dp=8 // (tp * pp), sp=sp and tp > 1, zero=int(dist_opt), recompute=recompute
    )
    out = apply_strategy(script, target, nnodes=1, nproc_per_node=8)
    ok, err = bash_syntax_ok(out.text)
    assert ok, f"{err}\n{out.text}"
    back = read_script_text(out.text).train
    # Overlap knobs the target leaves None take their applicable form (False where they now apply).
    expressed = expressible_strategy(
        target, info, versions.resolve(None, script, info.train.framework.flavour), world=8
    )
    assert back.strategy == expressed
    assert back.strategy.replace(**dict.fromkeys(OVERLAP_KEYS)) == target.replace(
        **dict.fromkeys(OVERLAP_KEYS)
    )
    assert (back.nnodes, back.nproc_per_node) == (1, 8)
