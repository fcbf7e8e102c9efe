"""ctypes binding of libcecoll.so: finding the library, prototypes, errors.

Every function used is declared here with argtypes and restype, so a wrong
argument type is a ctypes error in Python rather than a corrupt C call. Every
call that returns ncclResult_t goes through check(), which turns anything
but ncclSuccess into a CecollError.
"""

import ctypes
import os
import threading

# cecoll's own version, as the repository's VERSION file holds it
# (python/tests keeps the two equal): the package's; version() is the
# loaded library's.
PACKAGE_VERSION = "0.1.0"

NCCL_UNIQUE_ID_BYTES = 128
NCCL_WIN_DEFAULT = 0x00
NCCL_WIN_COLL_SYMMETRIC = 0x01
NCCL_WIN_REQUIRED_ALIGNMENT = 4096

# ncclResult_t values (nccl.h) and their names, for CecollError.name.
RESULT_NAMES = {
    0: "ncclSuccess",
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
    7: "ncclInProgress",
}

# ncclDataType_t values (nccl.h).
ncclInt8 = 0
ncclUint8 = 1
ncclInt32 = 2
ncclUint32 = 3
ncclInt64 = 4
ncclUint64 = 5
ncclFloat16 = 6
ncclFloat32 = 7
ncclFloat64 = 8
ncclBfloat16 = 9
ncclFloat8e4m3 = 10
ncclFloat8e5m2 = 11


class ncclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * NCCL_UNIQUE_ID_BYTES)]


class CecollError(RuntimeError):
    """A cecoll call returned something other than ncclSuccess.

    Attributes: result (the ncclResult_t as an int), name (its enum name,
    e.g. "ncclInvalidArgument"), function (the C function called) and
    last_error (the ncclGetLastError text at the time of the failure).
    """

    def __init__(self, result, function, last_error):
        self.result = int(result)
        self.name = RESULT_NAMES.get(self.result, "ncclResult(%d)" % self.result)
        self.function = function
        self.last_error = last_error
        msg = "%s failed: %s (%d)" % (function, self.name, self.result)
        if last_error:
            msg += ": " + last_error
        super().__init__(msg)


_c_comm = ctypes.c_void_p
_c_stream = ctypes.c_void_p
_c_win = ctypes.c_void_p
_R = ctypes.c_int  # ncclResult_t

# name: (restype, argtypes)
_PROTOTYPES = {
    "ncclGetVersion": (_R, [ctypes.POINTER(ctypes.c_int)]),
    "ncclGetErrorString": (ctypes.c_char_p, [ctypes.c_int]),
    "ncclGetLastError": (ctypes.c_char_p, [_c_comm]),
    "ncclGetUniqueId": (_R, [ctypes.POINTER(ncclUniqueId)]),
    "ncclCommInitRank": (_R, [ctypes.POINTER(_c_comm), ctypes.c_int, ncclUniqueId, ctypes.c_int]),
    "ncclCommFinalize": (_R, [_c_comm]),
    "ncclCommDestroy": (_R, [_c_comm]),
    "ncclCommAbort": (_R, [_c_comm]),
    "ncclCommGetAsyncError": (_R, [_c_comm, ctypes.POINTER(ctypes.c_int)]),
    "ncclCommCount": (_R, [_c_comm, ctypes.POINTER(ctypes.c_int)]),
    "ncclCommUserRank": (_R, [_c_comm, ctypes.POINTER(ctypes.c_int)]),
    "ncclMemAlloc": (_R, [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]),
    "ncclMemFree": (_R, [ctypes.c_void_p]),
    "ncclCommWindowRegister": (_R, [_c_comm, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(_c_win), ctypes.c_int]),
    "ncclCommWindowDeregister": (_R, [_c_comm, _c_win]),
    "ncclAllGather": (_R, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, _c_comm, _c_stream]),
    "ncclAlltoAll": (_R, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, _c_comm, _c_stream]),
    "ncclScatter": (_R, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, _c_comm, _c_stream]),
    "ncclBroadcast": (_R, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, _c_comm, _c_stream]),
    "ncclGather": (_R, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, _c_comm, _c_stream]),
    "ncclSend": (_R, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, _c_comm, _c_stream]),
    "ncclRecv": (_R, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, _c_comm, _c_stream]),
    "ncclGroupStart": (_R, []),
    "ncclGroupEnd": (_R, []),
    "cecollGetBackend": (_R, [ctypes.POINTER(ctypes.c_char_p)]),
    "cecollGetDeviceCount": (_R, [ctypes.POINTER(ctypes.c_int)]),
    "cecollSetDevice": (_R, [ctypes.c_int]),
    "cecollStreamCreate": (_R, [ctypes.POINTER(_c_stream)]),
    "cecollStreamDestroy": (_R, [_c_stream]),
    "cecollStreamSynchronize": (_R, [_c_stream]),
}

_lock = threading.Lock()
_lib = None
_lib_path = None


def _candidates():
    env = os.environ.get("CECOLL_LIBRARY")
    if env:
        # An explicit choice is never replaced by a silent fallback. A folder
        # (the build folder, an install's lib/) holds libcecoll.so.
        if os.path.isdir(env):
            return [os.path.join(env, "libcecoll.so")]
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    return [
        os.path.join(here, "libcecoll.so"),  # installed next to the package
        os.path.join(os.path.dirname(here), "libcecoll.so"),
        # the repository's build/ folder: python/cecoll/ -> ../../build
        os.path.join(os.path.dirname(os.path.dirname(here)), "build", "libcecoll.so"),
    ]


def library_path():
    """The path of the loaded library (loads it if needed)."""
    lib()
    return _lib_path


def lib():
    """The loaded library, with every prototype declared. Loads it once."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            if not os.path.exists(path):
                tried.append(path + " (missing)")
                continue
            handle = ctypes.CDLL(path)
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(handle, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _lib_path = path
            _lib = handle
            return _lib
        raise OSError(
            "libcecoll.so not found; set CECOLL_LIBRARY or run `make`. Tried: " + ", ".join(tried)
        )


def last_error(comm=None):
    text = lib().ncclGetLastError(comm)
    return text.decode("utf-8", "replace") if text else ""


def check(function, *args, comm=None):
    """Calls lib().<function>(*args); raises CecollError unless ncclSuccess."""
    res = getattr(lib(), function)(*args)
    if res != 0:
        raise CecollError(res, function, last_error(comm))
    return res


def backend():
    """"host", "nvidia" or "amd": the device backend the library picked."""
    name = ctypes.c_char_p()
    check("cecollGetBackend", ctypes.byref(name))
    return name.value.decode()


def version():
    """cecoll's own version, a string such as "0.1.0" (the VERSION file of
    the tree the library was built from), from the loaded library
    (cecollGetVersion). Loads the library. NCCL's API version is
    nccl_version()."""
    text = ctypes.c_char_p()
    check("cecollGetVersion", ctypes.byref(text))
    return text.value.decode()


def nccl_version():
    """The NCCL API version the library reports (ncclGetVersion), as NCCL
    codes it: 22809 for 2.28.9. With a real NCCL or RCCL behind cecoll
    (forward mode), the real library's. Loads the library."""
    v = ctypes.c_int()
    check("ncclGetVersion", ctypes.byref(v))
    return v.value
