"""The writer's context-parallel companions: hybrid's Ulysses degree and unaligned Ulysses by version."""

from __future__ import annotations

from script_support import FIXTURES

from tinker_opt.emit.script_writer import apply_strategy
from tinker_opt.script.reader import read_script_text


def text_of(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_hybrid_degree_kept_where_valid_else_the_modelled_fallback():
    """--ulysses-degree-in-cp 4 stays at cp 8 (ring 2); at cp 4 it would leave no ring, so the
    writer writes 2, the degree the cost model prices (rules.hybrid_ulysses_degree)."""
    text = text_of("pretrain_chatglm3_6b_64k_ptd.sh")
    info = read_script_text(text)
    s = info.train.strategy
    kept = apply_strategy(
        text, s, nnodes=info.train.nnodes, nproc_per_node=info.train.nproc_per_node
    )
    assert read_script_text(kept.text).launch.value("--ulysses-degree-in-cp") == "4"
    half = s.replace(cp=4, dp=s.dp * 2)
    out = apply_strategy(
        text, half, nnodes=info.train.nnodes, nproc_per_node=info.train.nproc_per_node
    )
    assert read_script_text(out.text).launch.value("--ulysses-degree-in-cp") == "2"


def test_unaligned_ulysses_warned_where_the_version_lacks_it():
    """28 heads over tp*cp 8 (Qwen2.5-7B 32k): no warning for recent MindSpeed-LLM, one before."""
    from types import SimpleNamespace

    from tinker_opt.verbs.simulate import _unaligned_ulysses_warning

    info = read_script_text(text_of("pretrain_qwen25_7b_32k_ptd.sh"))
    s = info.train.strategy
    recent, old = SimpleNamespace(version=None), SimpleNamespace(version="2.0.0")
    assert _unaligned_ulysses_warning(s, info, info.model, recent) == []
    (warning,) = _unaligned_ulysses_warning(s, info, info.model, old)
    assert "num_attention_heads (28)" in warning and "tp*cp (8)" in warning


def test_simulate_says_which_hybrid_degree_it_priced():
    """No warning with the script's valid degree; one naming the fallback otherwise."""
    from tinker_opt.verbs.simulate import _hybrid_degree_warning

    info = read_script_text(text_of("pretrain_chatglm3_6b_64k_ptd.sh"))
    s = info.train.strategy
    assert _hybrid_degree_warning(s, info, info.model) == []
    (warning,) = _hybrid_degree_warning(s.replace(cp=4, dp=2), info, info.model)
    assert "--ulysses-degree-in-cp 4" in warning and "Ulysses degree 2" in warning
    (none_given,) = _hybrid_degree_warning(s, None, info.model)
    assert "no --ulysses-degree-in-cp" in none_given and "degree 2" in none_given
