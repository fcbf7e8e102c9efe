package comm

import (
	"unsafe"

	"cecoll/internal/result"
)

// ConfigMagic is NCCL_API_MAGIC.
const ConfigMagic = 0xcafebeef

// undefInt is NCCL_CONFIG_UNDEF_INT.
const undefInt = -1 << 31

// Config is the part of ncclConfig_t cecoll keeps. Fields the caller's
// header did not have, or left undefined, hold their defaults.
type Config struct {
	// Blocking false is accepted; cecoll still completes before returning.
	Blocking  bool
	CommName  string
	CTAPolicy int
	CTASet    bool // CTAPolicy was set (else NCCL_CTA_POLICY applies)
	// Raw is the caller's ncclConfig_t as it was given (its size bytes;
	// nil: none), for the real library in forward mode (pair.go).
	Raw []byte
	// Host, for tests, is the host name this rank reports at init (empty:
	// the machine's): ranks on several hosts forward everything.
	Host string
}

// DefaultConfig is what a NULL config means.
func DefaultConfig() Config { return Config{Blocking: true} }

// Offsets of ncclConfig_t (2.28, LP64). A field is read only when the
// caller's size covers it, so configs of older and newer headers both work.
const (
	cfgOffMagic     = 8
	cfgOffVersion   = 12
	cfgOffBlocking  = 16
	cfgOffCommName  = 48
	cfgOffCTAPolicy = 60
	cfgMinSize      = 16 // size, magic, version
)

// ConfigFromC reads an ncclConfig_t at p (nil: defaults) by its size field.
func ConfigFromC(p unsafe.Pointer) (Config, error) {
	cfg := DefaultConfig()
	if p == nil {
		return cfg, nil
	}
	size := *(*uintptr)(p)
	if size < cfgMinSize {
		return cfg, result.Errorf(result.InvalidArgument, "ncclConfig_t: size %d is too small (use NCCL_CONFIG_INITIALIZER)", size)
	}
	if m := *(*uint32)(unsafe.Add(p, cfgOffMagic)); m != ConfigMagic {
		return cfg, result.Errorf(result.InvalidArgument, "ncclConfig_t: bad magic %#x (use NCCL_CONFIG_INITIALIZER)", m)
	}
	readInt := func(off uintptr) (int32, bool) {
		if size < off+4 {
			return 0, false
		}
		v := *(*int32)(unsafe.Add(p, off))
		return v, v != undefInt
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
	if size >= cfgOffCommName+8 {
		if s := *(*unsafe.Pointer)(unsafe.Add(p, cfgOffCommName)); s != nil {
			cfg.CommName = cString(s, 256)
		}
	}
	if size > maxConfigBytes {
		return cfg, result.Errorf(result.InvalidArgument, "ncclConfig_t: size %d is larger than any NCCL's (use NCCL_CONFIG_INITIALIZER)", size)
	}
	cfg.Raw = append([]byte(nil), unsafe.Slice((*byte)(p), size)...)
	return cfg, nil
}

// maxConfigBytes bounds a caller's ncclConfig_t (2.31's is 128 bytes).
const maxConfigBytes = 1024

// cString copies a NUL-terminated C string of at most max bytes.
func cString(p unsafe.Pointer, max int) string {
	n := 0
	for n < max && *(*byte)(unsafe.Add(p, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(p), n))
}
