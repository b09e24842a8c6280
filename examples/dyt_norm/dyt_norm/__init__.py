"""Dynamic Tanh as a normlab normalizer, declared with the public registry only (no torch here: the API
reads this declaration; the worker imports `dyt_norm.module` when a run uses it)."""

from normlab_client.norms import register_norm

DYT = register_norm(
    "dyt",
    "dyt_norm.module:DyT",
    description="Dynamic Tanh (Zhu et al. 2025): tanh(αx)·γ + β per feature, α learnable (init 0.5); "
    "no statistics at all.",
    recurrent=False,
    scale_invariant=False,
)
