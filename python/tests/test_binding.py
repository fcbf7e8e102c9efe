"""Binding checks that need no library load (the pytest process never loads
libcecoll.so: it spawns the ranks, and a Go runtime must not be forked)."""

import os

import pytest
import torch

import cecoll
from cecoll import _lib


@pytest.mark.parametrize(
    "dtype,code",
    [
        (torch.int8, 0), (torch.uint8, 1), (torch.bool, 1), (torch.int32, 2), (torch.int64, 4),
        (torch.float16, 6), (torch.float32, 7), (torch.float64, 8), (torch.bfloat16, 9),
    ],
)
def test_dtype_map(dtype, code):
    assert cecoll.nccl_dtype(dtype) == code


@pytest.mark.parametrize("dtype", [torch.complex64, torch.int16])
def test_dtype_without_nccl_type(dtype):
    with pytest.raises(ValueError, match="no ncclDataType_t"):
        cecoll.nccl_dtype(dtype)


def test_library_search_order(monkeypatch, tmp_path):
    monkeypatch.setenv("CECOLL_LIBRARY", "/nowhere/libcecoll.so")
    assert _lib._candidates() == ["/nowhere/libcecoll.so"]
    monkeypatch.setenv("CECOLL_LIBRARY", str(tmp_path))  # a folder: the build folder, as the README says
    assert _lib._candidates() == [str(tmp_path / "libcecoll.so")]
    monkeypatch.delenv("CECOLL_LIBRARY")
    pkg = os.path.dirname(os.path.abspath(_lib.__file__))
    cands = _lib._candidates()
    assert cands[0] == os.path.join(pkg, "libcecoll.so")
    assert cands[-1] == os.path.join(os.path.dirname(os.path.dirname(pkg)), "build", "libcecoll.so")


def test_package_version_is_the_repositorys():
    # cecoll.__version__, the package's; the ranks check version(), the
    # library's, against it (cases.run_versions).
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "VERSION")) as f:
        assert cecoll.__version__ == f.read().strip()


def test_error_fields():
    e = cecoll.CecollError(4, "ncclAllGather", "datatype 99 out of range")
    assert (e.result, e.name, e.last_error) == (4, "ncclInvalidArgument", "datatype 99 out of range")
    assert "ncclAllGather failed: ncclInvalidArgument (4): datatype 99 out of range" == str(e)


def test_pytest_process_did_not_load_the_library():
    # Forking a process that carries the Go runtime is unsafe; the harness
    # only spawns, but keep the parent clean anyway.
    assert _lib._lib is None
