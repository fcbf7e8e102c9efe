package hip

import (
	"runtime"
	"unsafe"
)

// CopyToDevice copies b into device memory at dst and returns when done.
func CopyToDevice(rt Runtime, dst DevicePtr, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	err := rt.Memcpy(uintptr(dst), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	runtime.KeepAlive(b)
	return err
}

// CopyFromDevice copies len(b) bytes of device memory at src into b.
func CopyFromDevice(rt Runtime, b []byte, src DevicePtr) error {
	if len(b) == 0 {
		return nil
	}
	err := rt.Memcpy(uintptr(unsafe.Pointer(&b[0])), uintptr(src), uintptr(len(b)))
	runtime.KeepAlive(b)
	return err
}
