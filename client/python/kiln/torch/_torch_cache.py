"""torch.compile's own caches served by kilnd, switched on for this process.

kilnd's `[torch_cache]` listener speaks the subset of the Redis protocol torch's remote
caches use (schema/torch-cache.md). torch switches them on from environment variables read
when torch._inductor is imported; use_torch_cache() does the same from Python, in a running
process, after `import torch` (nothing happens at `import kiln`: hooking torch's import
would add seconds to every `import torch`, DESIGN.md "Facts").
"""
import os
from typing import Iterable, Optional

from .. import errors

# torch's settings, per cache (torch/_inductor/config.py, torch/_functorch/config.py).
_SETTINGS = {
    "fx_graph": ("torch._inductor.config", "fx_graph_remote_cache"),
    "autograd": ("torch._functorch.config", "enable_remote_autograd_cache"),
    "autotune": ("torch._inductor.config", "autotune_remote_cache"),
    "bundled_autotune": ("torch._inductor.config", "bundled_autotune_remote_cache"),
}
CACHES = tuple(_SETTINGS)


def torch_cache_url(socket: Optional[str] = None) -> str:
    """The redis-py URL of the torch cache of the kilnd on `socket` (default: the kiln
    client's default socket): unix:///path, else redis://host:port. Raises
    kiln.Unavailable when kilnd is not running, kiln.Unsupported when it serves no torch cache
    (`[torch_cache]` in kilnd.toml)."""
    from .. import Client

    with Client(socket) as c:
        served = c.status().get("torch_cache") or {}
    if served.get("socket"):
        return "unix://" + served["socket"]
    if served.get("listen"):
        return "redis://" + served["listen"]
    raise errors.Unsupported("kilnd serves no torch.compile cache: set [torch_cache] socket in kilnd.toml")


def use_torch_cache(socket: Optional[str] = None, caches: Iterable[str] = CACHES, url: Optional[str] = None) -> str:
    """Points this process's torch.compile remote caches (`caches`, a subset of CACHES) at
    kilnd and switches them on; returns the URL. Call it before the first compile.

    torch looks in its local cache folder first, then kilnd; what it compiles is written to
    both. torch's cache keys include these settings: processes that share entries must
    switch on the same caches. Needs redis-py (torch's client) and a torch with remote
    caches (2.4 or later); raises RuntimeError naming what is missing, ValueError for an
    unknown cache name, and what torch_cache_url() raises when `url` is not given.
    """
    import importlib

    unknown = [c for c in caches if c not in _SETTINGS]
    if unknown:
        raise ValueError(f"unknown torch caches {unknown}: choose from {list(CACHES)}")
    try:
        import redis  # noqa: F401  torch's remote caches are redis-py clients
    except ImportError as ex:
        raise RuntimeError("torch's remote caches need redis-py (pip install redis, or Debian's python3-redis)") from ex
    modules = {}
    for name in caches:
        module_name, attr = _SETTINGS[name]
        try:
            module = modules.get(module_name) or importlib.import_module(module_name)
        except ImportError:
            module = None
        modules[module_name] = module
        if not hasattr(module, attr):
            import torch

            raise RuntimeError(f"torch {torch.__version__} has no remote {name} cache ({module_name}.{attr}); "
                               "torch 2.5 or later has them (README.md)")
    url = url or torch_cache_url(socket)
    # torch's Redis backend reads the URL when it first connects, from the environment.
    os.environ["TORCHINDUCTOR_REDIS_URL"] = url
    for name in caches:
        module_name, attr = _SETTINGS[name]
        setattr(modules[module_name], attr, True)
    return url
