package memfd

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A created file holds its size: a holder can neither shrink nor grow it,
// nor add a seal; it passes Check up to its size.
func TestCreateSealed(t *testing.T) {
	fd, err := Create("cecoll-test", 8192)
	require.NoError(t, err)
	defer syscall.Close(fd)
	require.ErrorIs(t, syscall.Ftruncate(fd, 4096), syscall.EPERM, "shrink")
	require.ErrorIs(t, syscall.Ftruncate(fd, 1<<20), syscall.EPERM, "grow")
	_, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), fAddSeals, 0x10 /* F_SEAL_FUTURE_WRITE */)
	require.Equal(t, syscall.EPERM, e, "add a seal")
	require.NoError(t, Check(fd, 8192))
	require.NoError(t, Check(fd, 1))
	require.ErrorIs(t, Check(fd, 8193), ErrTooSmall)
	require.ErrorIs(t, Check(fd, -1), ErrTooSmall)
	m, err := syscall.Mmap(fd, 0, 8192, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	require.NoError(t, err, "still writable")
	m[8191] = 1
	require.NoError(t, syscall.Munmap(m))
}

// What a hostile peer might pass instead: an unsealed memfd, a pipe, a
// file on disk, a directory.
func TestCheckRefuses(t *testing.T) {
	plain, err := CreateUnsealed("plain", 4096)
	require.NoError(t, err)
	defer syscall.Close(plain)
	require.NoError(t, syscall.Ftruncate(plain, 2048), "an unsealed memfd shrinks")
	require.ErrorIs(t, Check(plain, 2048), ErrNotMemfd, "unsealed memfd")

	var p [2]int
	require.NoError(t, syscall.Pipe(p[:]))
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	require.ErrorIs(t, Check(p[0], 0), ErrNotMemfd, "pipe")

	f, err := os.CreateTemp(t.TempDir(), "disk")
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Truncate(4096))
	require.ErrorIs(t, Check(int(f.Fd()), 4096), ErrNotMemfd, "file on disk")

	d, err := os.Open(t.TempDir())
	require.NoError(t, err)
	defer d.Close()
	require.ErrorIs(t, Check(int(d.Fd()), 0), ErrNotMemfd, "directory")

	require.Error(t, Check(-1, 0), "closed fd")
}
