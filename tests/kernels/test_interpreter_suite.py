"""The LayerNorm, GRU-cell and CUDA-graph interpreter tests, in a child pytest with TRITON_INTERPRET=1
(tests/_interp.py; the LSTM and sequence ones are in test_interpreter_suite_seq.py)."""

import pytest

from tests._interp import CANNOT_RUN, HERE, SHARES, SKIP_WHY, run_interpreted


@pytest.mark.skipif(CANNOT_RUN, reason=SKIP_WHY)
def test_interpreter_tests_pass_in_a_child_process():
    run_interpreted(SHARES[0])


def test_every_interpreter_file_is_in_one_share():
    on_disk = sorted(p.name for p in HERE.glob("test_*_interp.py"))
    shared = [f for share in SHARES for f in share]
    assert sorted(shared) == on_disk and len(set(shared)) == len(shared)
