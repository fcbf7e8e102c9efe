package memfd

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"
)

// Linux constants that package syscall does not name (golang.org/x/sys is
// not a dependency); the same on amd64 and arm64.
const (
	mfdCloexec      = 0x1
	mfdAllowSealing = 0x2
	fAddSeals       = 1033
	fGetSeals       = 1034
	sealSeal        = 0x1
	sealShrink      = 0x2
	sealGrow        = 0x4
	sealsOfCreate   = sealShrink | sealGrow | sealSeal
)

// ErrNotMemfd: the fd is not a memory file sealed against shrinking.
var ErrNotMemfd = errors.New("not a sealed memory file")

// ErrTooSmall: the file is smaller than the mapping asked for.
var ErrTooSmall = errors.New("memory file smaller than claimed")

// Create returns a close-on-exec memory file of size bytes whose size can
// never change (F_SEAL_SHRINK | F_SEAL_GROW), nor its seals
// (F_SEAL_SEAL: a holder cannot add F_SEAL_FUTURE_WRITE and so refuse
// later writable mappings). name shows in /proc/PID/fd; it must not hold a
// NUL.
func Create(name string, size int64) (int, error) {
	fd, err := create(name, size, mfdCloexec|mfdAllowSealing)
	if err != nil {
		return -1, err
	}
	if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), fAddSeals, sealsOfCreate); e != 0 {
		syscall.Close(fd)
		return -1, fmt.Errorf("F_ADD_SEALS: %w", e)
	}
	return fd, nil
}

// CreateUnsealed returns a close-on-exec memory file of size bytes without
// seals: what a peer that means to shrink it later passes, for the tests
// of Check's callers.
func CreateUnsealed(name string, size int64) (int, error) {
	return create(name, size, mfdCloexec)
}

func create(name string, size int64, flags uintptr) (int, error) {
	cname := append([]byte(name), 0)
	fd, _, e := syscall.Syscall(sysMemfdCreate, uintptr(unsafe.Pointer(&cname[0])), flags, 0)
	if e != 0 {
		return -1, fmt.Errorf("memfd_create: %w", e)
	}
	if err := syscall.Ftruncate(int(fd), size); err != nil {
		syscall.Close(int(fd))
		return -1, fmt.Errorf("ftruncate: %w", err)
	}
	return int(fd), nil
}

// Check reports whether fd, received from another process, may be mapped
// for size bytes: a regular file (memfds are) sealed against shrinking,
// at least size bytes long.
func Check(fd int, size int64) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fmt.Errorf("fstat: %w", err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return fmt.Errorf("%w: file mode %#o", ErrNotMemfd, st.Mode&syscall.S_IFMT)
	}
	seals, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), fGetSeals, 0)
	if e != 0 {
		return fmt.Errorf("%w: F_GET_SEALS: %v", ErrNotMemfd, e)
	}
	if seals&sealShrink == 0 {
		return fmt.Errorf("%w: seals %#x lack F_SEAL_SHRINK", ErrNotMemfd, seals)
	}
	if size < 0 || st.Size < size {
		return fmt.Errorf("%w: %d bytes, %d claimed", ErrTooSmall, st.Size, size)
	}
	return nil
}
