"""kiln: compiled blocks for PyTorch from the node's kilnd.

- kiln.Client: the daemon's artifacts, sources and builds (kiln.client).
- kiln.torch: compile_repeated_blocks(model) for diffusers and plain nn.Modules (imported
  on demand: `import kiln.torch`; it needs torch, kiln.Client does not).
- kiln.errors: one exception class per kiln error code.

libkiln (the C API, libkiln.so) is found through $KILN_LIBRARY, a copy inside this
package, or the system's; it is loaded on first use, so `import kiln` never fails for it.
"""
from .client import Artifact, Client, Source
from .errors import *  # noqa: F401,F403
from .errors import BY_CODE, KilnError

__version__ = "0.1.0"
__all__ = ["Client", "Artifact", "Source", "KilnError"] + [c.__name__ for c in BY_CODE.values()]
