"""toolprep: an ACP agent runtime that shows tool cards while the model prepares arguments.

Everything installs under this one import name so a hosting daemon's own top-level modules
(``messages``, ``runtime``, ...) never collide with ours. The subpackages live at the
repository's top level (``messages/``, ``actors/``, ``runtime/``) and are mapped here by the
build configuration.
"""

__version__ = "0.2.0"
