"""Saved-tensor and live-bytes accounting."""

from __future__ import annotations

import torch

from tinker_opt.profile.accounting import LiveBytesTracker, SavedTensorCounter
from tinker_opt.profile.shape import Shape


def test_views_of_one_storage_count_once():
    """Two views of one buffer saved by two ops count as one storage."""
    base = torch.randn(4, 8, requires_grad=True)
    mixed = base * 2
    first, second = mixed.split(4, dim=1)
    with SavedTensorCounter() as counter:
        (first * second).sum()
    assert counter.saved_bytes == mixed.numel() * 4 and counter.num_storages == 1


def test_excluded_weights_do_not_count():
    """Parameters passed as exclusions are not activations."""
    weight = torch.randn(16, 16, requires_grad=True)
    x = torch.randn(2, 16, requires_grad=True)
    with SavedTensorCounter(exclude=[weight]) as counter:
        torch.nn.functional.linear(x, weight)
    assert counter.saved_bytes == x.numel() * 4


def test_dropout_mask_is_one_byte():
    """native_dropout keeps a bool mask: one byte per element."""
    x = torch.randn(32, 32, requires_grad=True)
    with SavedTensorCounter() as counter:
        torch.native_dropout(x * 1.0, 0.1, True)
    assert counter.bytes_by_dtype == {"bool": 32 * 32}


def test_live_tracker_counts_only_new_storages():
    """Peak counts the intermediates, not the pre-existing weights and inputs."""
    weight = torch.randn(64, 64)
    x = torch.randn(128, 64)
    with LiveBytesTracker() as tracker:
        y = x @ weight.t()  # 128 x 64 fp32 = 32 KiB
        z = y.relu()  # another 32 KiB while y lives
        del y
    assert tracker.peak_bytes == 2 * 128 * 64 * 4
    assert tracker.live_bytes == z.numel() * 4


def test_live_tracker_peak_follows_frees_between_checks():
    """Storages freed while the peak is not challenged still leave the count: a later, smaller
    pair of live tensors does not raise the peak, and a bigger one raises it by exactly its size."""
    x = torch.randn(256)
    with LiveBytesTracker() as tracker:
        for _ in range(20):  # each 1 KiB intermediate dies before the next is made
            y = x * 2
            del y
        assert tracker.peak_bytes == 256 * 4
        a, b = x * 2, x * 3  # two alive at once: 2 KiB
        assert tracker.peak_bytes == 2 * 256 * 4
        del a, b
        big = torch.randn(1024) * 1.0  # randn's 4 KiB dies when * makes the result
    assert tracker.peak_bytes == 2 * 1024 * 4
    assert tracker.live_bytes == big.numel() * 4


def test_shape_memory_order():
    """A smaller tp or a larger mbs needs at least the memory of the other shape."""
    assert Shape(tp=1, mbs=4).needs_at_least_memory_of(Shape(tp=2, sp=True, mbs=2))
    assert not Shape(tp=4, mbs=4).needs_at_least_memory_of(Shape(tp=2, mbs=4))
