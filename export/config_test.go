package main

import (
	"encoding/binary"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"cecoll/internal/comm"
	"cecoll/internal/result"
)

// The offsets are NCCL 2.28's ABI (LP64), written out here so that a
// header that drifts from it fails.
const (
	apiMagic = 0xcafebeef
	undefInt = -1 << 31
)

// configOf reads only what the caller's size covers; a bad size, magic or
// blocking value is InvalidArgument.
func TestConfigOf(t *testing.T) {
	mk := func(size uintptr, magic uint32, blocking int32, policy int32) []byte {
		b := make([]byte, 128)
		binary.LittleEndian.PutUint64(b[0:], uint64(size))
		binary.LittleEndian.PutUint32(b[8:], magic)
		binary.LittleEndian.PutUint32(b[12:], 22809)
		binary.LittleEndian.PutUint32(b[16:], uint32(blocking))
		for off := 20; off < 80; off += 4 {
			binary.LittleEndian.PutUint32(b[off:], uint32(undefInt&0xffffffff))
		}
		for _, off := range []int{32, 48} { // pointers: NULL
			binary.LittleEndian.PutUint64(b[off:], 0)
		}
		binary.LittleEndian.PutUint32(b[60:], uint32(policy))
		return b
	}
	for _, tc := range []struct {
		name string
		buf  []byte
		code result.Code
		want comm.Config
	}{
		{"2.28 size", mk(80, apiMagic, 0, 1), result.Success, comm.Config{Blocking: false, CTAPolicy: 1, CTASet: true}},
		{"newer header", mk(96, apiMagic, 1, 2), result.Success, comm.Config{Blocking: true, CTAPolicy: 2, CTASet: true}},
		{"older header without CTAPolicy", mk(56, apiMagic, 0, 1), result.Success, comm.Config{Blocking: false}},
		{"only size/magic/version", mk(16, apiMagic, 0, 1), result.Success, comm.Config{Blocking: true}},
		{"undefined blocking", mk(80, apiMagic, undefInt, undefInt), result.Success, comm.Config{Blocking: true}},
		{"bad magic", mk(80, 0x12345678, 1, 0), result.InvalidArgument, comm.Config{}},
		{"too small", mk(8, apiMagic, 1, 0), result.InvalidArgument, comm.Config{}},
		{"bad blocking", mk(80, apiMagic, 7, 0), result.InvalidArgument, comm.Config{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := configOf(unsafe.Pointer(&tc.buf[0]))
			require.Equal(t, tc.code, result.Of(err), "%v", err)
			if tc.code == result.Success {
				require.Equal(t, tc.buf[:binary.LittleEndian.Uint64(tc.buf)], cfg.Raw, "the caller's bytes, for the real library")
				cfg.Raw = nil
				require.Equal(t, tc.want, cfg)
			}
		})
	}
	cfg, err := configOf(nil)
	require.NoError(t, err)
	require.Equal(t, comm.DefaultConfig(), cfg)

	name := []byte("mycomm\x00")
	b := mk(80, apiMagic, 1, 0)
	binary.LittleEndian.PutUint64(b[48:], uint64(uintptr(unsafe.Pointer(&name[0]))))
	cfg, err = configOf(unsafe.Pointer(&b[0]))
	require.NoError(t, err)
	require.Equal(t, "mycomm", cfg.CommName)
	runtime.KeepAlive(name)
}
