"""The expected longest of n steps, which a fork of n branches waits for."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lookahead_reasoning.runtime.adaptive.step_lengths import StepLengths, expected_longest


def test_the_longest_of_n_steps_of_varying_length_by_hand():
    assert expected_longest([10, 30], 1) == pytest.approx(20)
    assert expected_longest([10, 30], 2) == pytest.approx(10 * 0.25 + 30 * 0.75)  # both 10 only a quarter of the time
    assert expected_longest([25, 25, 25], 5) == pytest.approx(25)  # one length: the fork costs one step


def test_it_matches_sampling():
    rng = random.Random(1)
    lengths = [rng.randint(20, 100) for _ in range(50)]
    draws = [max(rng.choice(lengths) for _ in range(3)) for _ in range(40_000)]
    assert expected_longest(lengths, 3) == pytest.approx(sum(draws) / len(draws), rel=0.01)


@given(st.lists(st.integers(1, 500), min_size=1, max_size=40), st.integers(1, 8))
def test_the_longest_grows_with_n_and_stays_within_the_sample(lengths, n):
    longest = expected_longest(lengths, n)
    assert min(lengths) - 1e-9 <= longest <= max(lengths) + 1e-9
    assert expected_longest(lengths, n + 1) >= longest - 1e-9


def test_recent_steps_only_and_a_saved_state_comes_back():
    steps = StepLengths(keep=4)
    assert steps.mean() is None and steps.longest(2) is None
    for tokens in (100, 100, 10, 20, 30, 40, 0):  # a step of no tokens is not a step
        steps.add(tokens)
    assert steps.mean() == pytest.approx(25)
    again = StepLengths(keep=4)
    again.restore(steps.state())
    assert again.longest(3) == pytest.approx(steps.longest(3))
