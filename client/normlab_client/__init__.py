"""normlab from Python: `Client` (runs, sweeps, presets), `Run`, `Group` and `NormlabError`.

Torch-free; `pip install 'normlab-client[notebook]'` adds pandas (DataFrames) and the notebook widgets.
"""

from normlab_client.api import Client
from normlab_client.errors import NormlabError
from normlab_client.group import Group
from normlab_client.run import Run

__all__ = ["Client", "Group", "NormlabError", "Run"]
