package main

/*
#include <string.h>
#include "cshim.h"
*/
import "C"

import (
	"unsafe"

	"cecoll/internal/comm"
	"cecoll/internal/result"
)

// The fields of ncclConfig_t cecoll reads, at include/nccl.h's offsets.
var (
	cfgOffBlocking  = unsafe.Offsetof(C.ncclConfig_t{}.blocking)
	cfgOffCommName  = unsafe.Offsetof(C.ncclConfig_t{}.commName)
	cfgOffCTAPolicy = unsafe.Offsetof(C.ncclConfig_t{}.CTAPolicy)
	cfgMinSize      = unsafe.Offsetof(C.ncclConfig_t{}.blocking) // size, magic, version
)

// maxConfigBytes bounds a caller's ncclConfig_t (2.31's is 128 bytes).
const maxConfigBytes = 1024

// configOf decodes the caller's ncclConfig_t at p (nil: the defaults). A
// field is read only when the caller's size field covers it, so configs
// of older and newer headers both work.
func configOf(p unsafe.Pointer) (comm.Config, error) {
	cfg := comm.DefaultConfig()
	if p == nil {
		return cfg, nil
	}
	c := (*C.ncclConfig_t)(p)
	size := uintptr(c.size)
	if size < cfgMinSize {
		return cfg, result.Errorf(result.InvalidArgument, "ncclConfig_t: size %d is too small (use NCCL_CONFIG_INITIALIZER)", size)
	}
	if c.magic != C.NCCL_API_MAGIC {
		return cfg, result.Errorf(result.InvalidArgument, "ncclConfig_t: bad magic %#x (use NCCL_CONFIG_INITIALIZER)", uint32(c.magic))
	}
	readInt := func(off uintptr) (int32, bool) {
		if size < off+4 {
			return 0, false
		}
		v := *(*int32)(unsafe.Add(p, off))
		return v, v != C.NCCL_CONFIG_UNDEF_INT
	}
	if v, ok := readInt(cfgOffBlocking); ok {
		if v != 0 && v != 1 {
			return cfg, result.Errorf(result.InvalidArgument, "ncclConfig_t: blocking = %d (want 0 or 1)", v)
		}
		cfg.Blocking = v == 1
	}
	if v, ok := readInt(cfgOffCTAPolicy); ok {
		cfg.CTAPolicy, cfg.CTASet = int(v), true
	}
	if size >= cfgOffCommName+unsafe.Sizeof(c.commName) && c.commName != nil {
		cfg.CommName = C.GoStringN(c.commName, C.int(C.strnlen(c.commName, 256)))
	}
	if size > maxConfigBytes {
		return cfg, result.Errorf(result.InvalidArgument, "ncclConfig_t: size %d is larger than any NCCL's (use NCCL_CONFIG_INITIALIZER)", size)
	}
	cfg.Raw = C.GoBytes(p, C.int(size))
	return cfg, nil
}

// configArg is configOf for an optional config argument (nil: none).
func configArg(p *C.ncclConfig_t) (*comm.Config, error) {
	if p == nil {
		return nil, nil
	}
	cfg, err := configOf(unsafe.Pointer(p))
	if err != nil {
		return nil, err
	}
	return &cfg, nil
}
