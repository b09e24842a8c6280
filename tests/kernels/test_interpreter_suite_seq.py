"""The LSTM-cell and the LSTM/GRU sequence interpreter tests, in a child pytest with TRITON_INTERPRET=1
(tests/_interp.py; the others are in test_interpreter_suite.py)."""

import pytest

from tests._interp import CANNOT_RUN, SHARES, SKIP_WHY, run_interpreted


@pytest.mark.skipif(CANNOT_RUN, reason=SKIP_WHY)
def test_interpreter_tests_pass_in_a_child_process():
    run_interpreted(SHARES[1])
