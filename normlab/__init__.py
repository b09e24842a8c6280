"""normlab: a live lab for seeing how normalization shapes training (Ba, Kiros & Hinton 2016).

This package holds the torch-free core shared by every part: the run spec, the event schema, the
catalog of tasks and normalizers, the settings, and the command line.
"""

__version__ = "0.1.0"
