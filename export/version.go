package main

// #include "cshim.h"
import "C"

import (
	"fmt"

	"cecoll/internal/comm"
)

// version is cecoll's own version, as the top-level VERSION file holds it
// (version_test.go keeps the two equal); NCCL's API version is nccl.h's.
const version = "0.1.0"

// versionC is version for C: cecollGetVersion hands it out; never freed.
var versionC = C.CString(version)

//export goexp_cecollGetVersion
func goexp_cecollGetVersion(v **C.char) (res C.ncclResult_t) {
	const call = "cecollGetVersion"
	defer recoverInto(&res, call)
	if v == nil {
		return toResult(call, argErr(call, "NULL version"))
	}
	*v = versionC
	return C.ncclSuccess
}

// banner is the line NCCL_DEBUG=VERSION prints, as NCCL's "NCCL version ...".
func banner() string {
	return fmt.Sprintf("cecoll version %s (NCCL %d.%d.%d API; copy engines run %s)",
		version, C.NCCL_MAJOR, C.NCCL_MINOR, C.NCCL_PATCH, comm.Provided())
}
