"""ctypes binding of libkiln's C API (client/include/kiln/client/kiln.h).

Why ctypes and not a compiled extension: libkiln already implements kiln's wire protocol
(framing, descriptor passing, reconnects) once, in C++, with a stable C API. Binding it
with ctypes keeps the package pure Python: nothing compiled against a Python or torch
version (a compiled extension would need a build per CPython and could clash with torch's
C++ runtime), one wheel for every Python, and libkiln updated independently. Precedents:
vLLM's NCCL wrapper, llama-cpp-python.

The library is found, in order: $KILN_LIBRARY (a path), a copy inside this package
(kiln/lib/libkiln.so*, as a wheel built for a platform carries it), then the installed
one (the loader's search path: libkiln.so.0, libkiln.so). Each C function's signature is
declared once, in _FUNCTIONS below.
"""
import ctypes
import glob
import os
import threading

c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p
c_int = ctypes.c_int
c_size_t = ctypes.c_size_t
c_uint32 = ctypes.c_uint32
c_uint64 = ctypes.c_uint64
status_t = ctypes.c_int
PP = ctypes.POINTER(c_void_p)       # an out-parameter handle (kiln_x**)
STR_OUT = ctypes.POINTER(c_void_p)  # a malloc'd string returned through char** (kiln_free)


class Function:
    def __init__(self, name, restype, argtypes):
        self.name, self.restype, self.argtypes = name, restype, argtypes


# One line per C function: name, return type, argument types (kiln.h order).
_FUNCTIONS = [
    Function("kiln_last_error", c_char_p, []),
    Function("kiln_status_name", c_char_p, [status_t]),
    Function("kiln_free", None, [c_void_p]),
    Function("kiln_key_from_json", status_t, [c_char_p, PP]),
    Function("kiln_key_free", None, [c_void_p]),
    Function("kiln_key_to_json", status_t, [c_void_p, STR_OUT]),
    Function("kiln_key_digest", status_t, [c_void_p, ctypes.c_char * 65]),
    Function("kiln_connect", status_t, [c_char_p, PP]),
    Function("kiln_connect_streaming", status_t, [c_char_p, PP]),
    Function("kiln_client_free", None, [c_void_p]),
    Function("kiln_get", status_t, [c_void_p, c_void_p, c_char_p, PP]),
    Function("kiln_get_build", status_t, [c_void_p, c_void_p, c_uint32, PP]),
    Function("kiln_artifact_fd", c_int, [c_void_p]),
    Function("kiln_artifact_size", c_uint64, [c_void_p]),
    Function("kiln_artifact_path", c_char_p, [c_void_p]),
    Function("kiln_artifact_info_json", c_char_p, [c_void_p]),
    Function("kiln_artifact_free", None, [c_void_p]),
    Function("kiln_put", status_t, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, STR_OUT]),
    Function("kiln_put_file", status_t, [c_void_p, c_void_p, c_char_p, c_int, STR_OUT]),
    Function("kiln_stat", status_t, [c_void_p, c_void_p, c_char_p, STR_OUT]),
    Function("kiln_list", status_t, [c_void_p, c_char_p, STR_OUT]),
    Function("kiln_remove", status_t, [c_void_p, c_void_p, c_char_p]),
    Function("kiln_pin", status_t, [c_void_p, c_void_p, c_char_p]),
    Function("kiln_unpin", status_t, [c_void_p, c_void_p, c_char_p]),
    Function("kiln_request", status_t, [c_void_p, c_char_p, c_char_p, STR_OUT]),
    Function("kiln_stats", status_t, [c_void_p, STR_OUT]),
    Function("kiln_daemon_status", status_t, [c_void_p, STR_OUT]),
    Function("kiln_list_sources", status_t, [c_void_p, c_char_p, STR_OUT]),
    Function("kiln_get_source", status_t, [c_void_p, c_char_p, PP]),
    Function("kiln_source_fd", c_int, [c_void_p]),
    Function("kiln_source_size", c_uint64, [c_void_p]),
    Function("kiln_source_path", c_char_p, [c_void_p]),
    Function("kiln_source_info_json", c_char_p, [c_void_p]),
    Function("kiln_source_free", None, [c_void_p]),
    Function("kiln_put_source_file", status_t, [c_void_p, c_char_p, c_char_p, c_char_p, STR_OUT]),
]

_lock = threading.Lock()
_lib = None


def candidates():
    """Where libkiln is looked for, in order."""
    out = []
    env = os.environ.get("KILN_LIBRARY")
    if env:
        out.append(env)
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")
    out.extend(sorted(glob.glob(os.path.join(here, "libkiln.so*"))))
    out.extend(["libkiln.so.0", "libkiln.so"])
    return out


class LibraryNotFound(ImportError):
    """libkiln could not be loaded from any candidate; the message lists them."""


def lib():
    """The loaded library with every function's signature set (loaded once, thread-safe)."""
    global _lib
    with _lock:
        if _lib is None:
            errors = []
            for path in candidates():
                try:
                    handle = ctypes.CDLL(path)
                    break
                except OSError as e:
                    errors.append(f"{path}: {e}")
                    if path == os.environ.get("KILN_LIBRARY"):
                        # An explicit choice that fails is an error, not a hint to look elsewhere.
                        raise LibraryNotFound(f"KILN_LIBRARY={path} cannot be loaded: {e}") from None
            else:
                raise LibraryNotFound("libkiln not found; build or install kiln's client "
                                      "(libkiln.so) or set KILN_LIBRARY. Tried: " + "; ".join(errors))
            for f in _FUNCTIONS:
                fn = getattr(handle, f.name)
                fn.restype = f.restype
                fn.argtypes = f.argtypes
            _lib = handle
        return _lib


def take_string(ptr):
    """The text of a malloc'd char* returned through a char** out-parameter, freed."""
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode("utf-8")
    finally:
        lib().kiln_free(ptr)
