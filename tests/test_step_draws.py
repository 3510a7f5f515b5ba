"""Step times (``model.workload.draw_step_times``): one draw per rank's stream, kept and
shared by every prediction that makes it again (every scheme of a sweep at a P)."""
from __future__ import annotations

import numpy as np
import pytest

from contracts.profile import StepFit
from simulator.model.workload import _Draws, draw_step_times


def test_a_draw_is_kept_read_only_and_is_its_streams_numbers():
    fit = StepFit(threads=1, step_intercept_s=1e-3, step_s_per_sample=1e-4, spread_cv=0.2)
    first = draw_step_times(fit, 64, 1.0, 50, 3, 2)
    assert draw_step_times(fit, 64, 1.0, 50, 3, 2) is first
    shape = 1 / 0.2 ** 2
    fresh = np.random.default_rng(3 + 2).gamma(shape, (1e-3 + 64e-4) / shape, size=50)
    assert np.array_equal(first, fresh)
    with pytest.raises(ValueError):
        first[0] = 0.0                      # read-only: no prediction changes another's


def test_draws_beyond_the_limit_forget_the_old_ones():
    draws = _Draws(kept=100)
    a = draws.gamma(25.0, 1e-3, 60, 1)
    draws.gamma(25.0, 1e-3, 60, 2)          # 120 steps: the first is forgotten
    assert draws.gamma(25.0, 1e-3, 60, 1) is not a
    assert draws.steps == 60
