"""normlab from Python: `Client` (runs, sweeps, presets), `Run`, `Group` and `NormlabError`.

Torch-free; `pip install 'normlab[client]'` adds pandas (DataFrames) and the notebook widgets.
"""

from normlab.client.api import Client
from normlab.client.errors import NormlabError
from normlab.client.group import Group
from normlab.client.run import Run

__all__ = ["Client", "Group", "NormlabError", "Run"]
