"""Every preset builds valid, resolvable run specs, and its public form is JSON-ready."""

import json

import pytest

from normlab.presets import PRESETS
from normlab_client.spec import RunSpec

PAPER_PRESETS = {
    "fig6-batch128",
    "fig6-batch4",
    "online",
    "convnets",
    "gain-init",
    "long-sequences",
    "draw",
    "order-embeddings",
}


def test_the_papers_presets_are_all_there():
    assert PAPER_PRESETS <= set(PRESETS)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_builds_and_round_trips(name):
    preset = PRESETS[name]
    assert len(preset.run_labels()) == len(preset.runs) >= 2
    assert len(set(preset.run_labels())) == len(preset.runs)  # labels tell the runs apart
    for spec in preset.runs:
        resolved = spec.resolved()
        assert RunSpec.model_validate(json.loads(resolved.model_dump_json())) == resolved
    public = json.loads(json.dumps(preset.public()))
    assert [RunSpec.model_validate(r) for r in public["runs"]] == list(preset.runs)


def test_batch_norm_is_left_out_of_the_online_preset():
    assert all(spec.norm != "batch" for spec in PRESETS["online"].runs)
    assert all(spec.batch_size == 1 for spec in PRESETS["online"].runs)
