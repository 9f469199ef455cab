"""Shell expansion without execution: each bash feature a launch script uses."""

from __future__ import annotations

import pytest

from tinker_opt.errors import ScriptError
from tinker_opt.script.expand import expand_script, field_text
from tinker_opt.script.reader import read_script_text

MODEL = "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 1000"


def launch_args(body: str) -> list[str]:
    """The fields of the last command of the expanded script."""
    expansion = expand_script(body)
    return [field_text(f) for f in expansion.commands[-1].fields]


def read(body: str, name: str = "script.sh"):
    return read_script_text("#!/bin/bash\n" + body, name)


def test_braced_and_plain_variables():
    """$V and ${V} expand to the assigned value."""
    assert launch_args("A=1\nB=x\necho $A ${B}y") == ["echo", "1", "xy"]


def test_default_used_when_unset():
    """${V:-d} gives d when V is unset or empty, V otherwise."""
    assert launch_args("E=\necho ${U:-7} ${E:-8} ${E-9}") == ["echo", "7", "8"]
    assert launch_args("S=3\necho ${S:-7}") == ["echo", "3"]


def test_quoted_default_keeps_its_text():
    """Megatron's ${SLURM_NNODES:-"1"} gives 1."""
    assert launch_args('N=${SLURM_NNODES:-"16"}\necho $N') == ["echo", "16"]


def test_arithmetic():
    """$((...)) evaluates + - * / % with $V, ${V} and bare names."""
    assert launch_args("A=8\nB=2\necho $(($A*$B)) $((A/3)) $((${A}%3 + B))") == [
        "echo",
        "16",
        "2",
        "4",
    ]


def test_single_quotes_are_literal():
    """'$X' stays literal; "$X" expands but is not split."""
    assert launch_args("X='a b'\necho '$X' \"$X\" $X") == ["echo", "$X", "a b", "a", "b"]


def test_multiline_group_with_blank_line_and_trailing_backslash():
    """A quoted group keeps working across a blank line and a backslash before the closing quote."""
    body = 'G="\n    --a 1 \\\n\n    --b \\\n"\necho $G --c'
    assert launch_args(body) == ["echo", "--a", "1", "--b", "--c"]


def test_arrays_expand_each_element():
    """${A[@]} gives every element; quoted elements stay one word; comments inside are skipped."""
    body = 'A=(\n  --x 1  # a comment\n  # --commented-out 2\n  "--y" "two words"\n)\necho ${A[@]} ${#A[@]} ${A[1]}'
    assert launch_args(body) == ["echo", "--x", "1", "--y", "two", "words", "4", "1"]


def test_array_without_index_gives_first_element_and_warns():
    """$ARR passes only the first element, as bash does, with a warning."""
    expansion = expand_script("A=(--p 1)\necho $A")
    assert [field_text(f) for f in expansion.commands[-1].fields] == ["echo", "--p"]
    assert any("first element" in w for w in expansion.warnings)


def test_comments_inline_and_non_ascii():
    """Inline comments (also non-ASCII) end the command; '#' inside a word is literal."""
    assert launch_args("M=localhost #\u4e3b\u8282\u70b9IP\necho $M a#b") == [
        "echo",
        "localhost",
        "a#b",
    ]


def test_heredoc_body_is_skipped():
    """A heredoc body is not read as commands."""
    body = 'cat <<EOT > x.json\n{"a": $V}\nnot_a_command --x\nEOT\necho done'
    assert launch_args(body) == ["echo", "done"]
    assert [field_text(c.fields[0]) for c in expand_script(body).commands] == ["cat", "echo"]


def test_undefined_variable_is_empty_with_warning():
    """An unset variable expands to nothing and is reported once, with its line."""
    expansion = expand_script("echo $MOE_ARGS $MOE_ARGS x")
    assert [field_text(f) for f in expansion.commands[0].fields] == ["echo", "x"]
    assert expansion.warnings == [
        "variable MOE_ARGS is not set (first used on line 1); read as empty"
    ]


def test_command_substitution_is_not_run():
    """$(...) and backquotes expand to nothing (never executed)."""
    assert launch_args("B=$(cd `dirname $0`; pwd)\necho $B/x.py") == ["echo", "/x.py"]


def test_export_and_several_assignments():
    """export A=1 and A=1 B=2 both assign."""
    assert launch_args("export A=1\nB=2 C=3\necho $A$B$C") == ["echo", "123"]


def test_redirections_are_not_arguments():
    """2>&1, > file and | tee are not part of the launch arguments."""
    assert launch_args("echo a 2>&1 > out.log") == ["echo", "a"]


def test_for_loop_variable_takes_first_item():
    """The loop variable is set (no undefined warning for it)."""
    expansion = expand_script("IPs=('a' 'b')\nfor i in \"${!IPs[@]}\"; do\n  R=$i\ndone\necho $R")
    assert [field_text(f) for f in expansion.commands[-1].fields] == ["echo", "0"]
    assert expansion.warnings == []


def test_unterminated_quote_is_a_script_error():
    """A syntax error names the problem and how to see it."""
    with pytest.raises(ScriptError, match="unterminated double quote"):
        read('X="abc\n')


def test_duplicate_flags_last_wins():
    """A flag given twice takes the last value."""
    info = read(f"torchrun pretrain_gpt.py {MODEL} --micro-batch-size 1 --micro-batch-size 4")
    assert info.train.micro_batch_size == 4


def test_equals_form_and_negative_values():
    """--flag=value is split; -1 is a value, not a flag."""
    info = read(
        f"torchrun --nproc_per_node=4 pretrain_gpt.py {MODEL} --first-k-dense-replace -1 "
        "--num-experts 4 --moe-layer-freq -1"
    )
    assert info.launch.value("--first-k-dense-replace") == "-1"
    assert info.train.nproc_per_node == 4
    assert info.model.first_k_dense_replace == 0


def test_multi_word_values_stay_with_their_flag():
    """--lora-target-modules a b c keeps all its values."""
    info = read(f"torchrun pretrain_gpt.py {MODEL} --lora-target-modules q k v --bf16")
    assert [field_text(v) for v in info.launch.last("--lora-target-modules").values] == [
        "q",
        "k",
        "v",
    ]


def test_arithmetic_follows_bash_64_bit_c_semantics():
    """/ and % truncate toward zero, results wrap at 64 bits, as bash computes them."""
    assert launch_args("echo $((-7/2)) $((-7%3)) $((7%-3)) $((2**63)) $((2**-1))") == [
        "echo",
        "-3",
        "-1",
        "1",
        "-9223372036854775808",
    ]


def test_huge_or_deep_arithmetic_reads_as_empty_without_hanging():
    """`$((9**9**9))` is computed modulo 2**64 (no huge integer); a chain too deep for Python's
    parser is an unreadable expression (a warning), not a RecursionError."""
    assert launch_args("echo $((9**9**9))") == ["echo", "-2123029214124047543"]  # bash 5 agrees
    chain = "+".join(["1"] * 3000)
    expansion = expand_script(f"X=$(({chain}))\necho $X")
    assert [field_text(f) for f in expansion.commands[-1].fields] == ["echo"]
    assert any("cannot evaluate" in w for w in expansion.warnings)


def test_ansi_c_quotes_decode_escapes_and_may_hold_a_quote():
    """$'a\\'b' is one word a'b (it used to read as an unterminated quote); unterminated is an error."""
    assert launch_args("X=$'a\\'b\\tc'\necho \"$X\" $'d e'") == ["echo", "a'b\tc", "d e"]
    with pytest.raises(ScriptError, match="unterminated"):
        read("X=$'abc\n")


def test_heredoc_inside_command_substitution_is_skipped():
    """A heredoc body inside $(...) may hold ) and quotes (it used to end the substitution)."""
    body = "X=$(cat <<'EOF'\nhello ) ( '\nEOF\n)\necho after"
    assert launch_args(body) == ["echo", "after"]
