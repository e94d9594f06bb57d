"""The horizon curriculum shared by fit_projectile and fit_cloth (problems.fitting.horizon)."""

import pytest

from problems.fit_cloth.horizon_loss import horizon
from problems.fitting.horizon import horizon_fraction


@pytest.mark.parametrize("step,expected", [(0, 0.25), (50, 0.625), (100, 1.0), (150, 1.0)])
def test_fraction_grows_linearly_from_start_to_one_over_the_ramp(step, expected):
    # 200 steps, ramp over half of them: 0.25 at step 0, 1 at step 100
    assert horizon_fraction(step, 200, 0.25, 0.5) == pytest.approx(expected, abs=1e-12)


def test_no_ramp_sees_everything_at_once():
    assert horizon_fraction(0, 200, 0.1, 0.0) == 1.0


def test_cloth_counts_whole_observations():
    # 10 observations: a quarter at step 0 is ceil(2.5) = 3; the whole window once the ramp is over
    assert [horizon(s, 200, 10, 0.25, 0.5) for s in (0, 50, 100)] == [3, 7, 10]
