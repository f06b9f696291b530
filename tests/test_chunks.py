"""`Chunker`: whole chunks out of arrays of any length, with their end times."""

from __future__ import annotations

import numpy as np

from vocal.audio.chunks import Chunker


def test_chunks_cross_feeds_with_their_end_times() -> None:
    chunker = Chunker(4, 10)
    samples = np.arange(11, dtype=np.float32)
    first = list(chunker.feed(samples[:3], 0.3))
    assert first == []  # 3 samples wait for a fourth
    got = list(chunker.feed(samples[3:], 1.1))
    assert [chunk.tolist() for chunk, _ in got] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # 8 fed after the first chunk's last sample, 4 after the second's, at 10 samples a second.
    assert [end_s for _, end_s in got] == [1.1 - 7 / 10, 1.1 - 3 / 10]
    assert [chunk.tolist() for chunk, _ in chunker.feed([11.0], 1.2)] == [[8, 9, 10, 11]]


def test_chunks_are_copies_and_flattened_to_float32() -> None:
    chunker = Chunker(2, 16_000)
    got = [chunk for chunk, _ in chunker.feed(np.ones((4, 1), np.float64))]
    got[0][:] = 5.0
    assert [chunk.dtype for chunk in got] == [np.float32, np.float32]
    assert got[1].tolist() == [1.0, 1.0]


def test_stopping_early_leaves_the_rest_untaken_and_clear_drops_the_leftover() -> None:
    chunker = Chunker(2, 16_000)
    for _chunk, _end_s in chunker.feed(np.arange(5, dtype=np.float32)):
        break  # a detector that decided on the first chunk
    assert [chunk.tolist() for chunk, _ in chunker.feed(np.array([7, 8, 9], np.float32))] == [
        [7, 8]
    ]
    chunker.clear()  # 9 was left over
    assert [chunk.tolist() for chunk, _ in chunker.feed(np.array([1, 2], np.float32))] == [[1, 2]]
