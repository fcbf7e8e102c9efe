package log

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// shortHost is the host name as NCCL's log writes it: up to the first dot,
// with '%' and '/' made '-' (it may become part of a file name).
func shortHost() string {
	h, _ := os.Hostname()
	h, _, _ = strings.Cut(h, ".")
	return strings.NewReplacer("%", "-", "/", "-").Replace(h)
}

// expand substitutes a debug file name as NCCL does: %h the host name, %p
// the pid, %% a '%'; any other %x stays as written.
func expand(name, host string, pid int) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if name[i] != '%' || i+1 == len(name) {
			b.WriteByte(name[i])
			continue
		}
		i++
		switch name[i] {
		case '%':
			b.WriteByte('%')
		case 'h':
			b.WriteString(host)
		case 'p':
			b.WriteString(strconv.Itoa(pid))
		default:
			b.WriteByte('%')
			b.WriteByte(name[i])
		}
	}
	return b.String()
}

// appendFile is the log file, written at its end (O_APPEND) whoever else
// writes it. A real NCCL in forward mode writes NCCL_DEBUG_FILE too, opened
// with fopen("w"): that empties the file and writes at its own offset,
// over lines appended since. So once the file changes under cecoll, the
// other descriptors of this process on it are made O_APPEND as well, and
// cecoll's lines that the other's opening emptied away are written again.
type appendFile struct {
	f     *os.File
	end   int64        // the file's size after cecoll's last write
	start int64        // where cecoll's first line went
	early bytes.Buffer // cecoll's lines until another writer shows
	other bool         // another writer has shown
	scans int          // looks for other descriptors (bounded: another process's cannot be fixed)
	// readable: opened for reading too; without, lines are never written again.
	readable bool
}

// earlyMax bounds the lines kept to write again.
const earlyMax = 64 << 10

// maxScans bounds the looks through /proc/self/fd.
const maxScans = 16

func openAppend(name string) (*appendFile, error) {
	// Read too, to see whether lines written went missing (intact).
	readable := true
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
	if err != nil {
		readable = false
		f, err = os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	}
	if err != nil {
		return nil, err
	}
	a := &appendFile{f: f, start: -1, readable: readable}
	if st, err := f.Stat(); err == nil {
		a.end = st.Size()
	}
	return a, nil
}

// Write appends p (one line); the log's mutex is held.
func (a *appendFile) Write(p []byte) (int, error) {
	if st, err := a.f.Stat(); err == nil && st.Size() != a.end {
		a.changed(st.Size())
	}
	if a.start < 0 {
		a.start = a.end
	}
	n, err := a.f.Write(p)
	if !a.other && a.early.Len()+len(p) <= earlyMax {
		a.early.Write(p)
	}
	if st, err := a.f.Stat(); err == nil {
		a.end = st.Size()
	}
	return n, err
}

// changed handles a file someone else wrote since cecoll's last line.
func (a *appendFile) changed(size int64) {
	if a.scans < maxScans {
		a.scans++
		if appendOthers(a.f) {
			a.scans = maxScans // the other writer of this process is fixed for good
		}
	}
	if a.other {
		return
	}
	a.other = true
	if a.readable && a.start >= 0 && a.early.Len() > 0 && !a.intact(size) {
		a.f.Write(a.early.Bytes())
	}
	a.early = bytes.Buffer{}
}

// intact reports whether cecoll's early lines are still where they went.
func (a *appendFile) intact(size int64) bool {
	n := int64(a.early.Len())
	if a.start+n > size {
		return false
	}
	got := make([]byte, n)
	if _, err := a.f.ReadAt(got, a.start); err != nil {
		return false
	}
	return bytes.Equal(got, a.early.Bytes())
}

// appendOthers sets O_APPEND on every other descriptor of this process
// that writes f's file; it reports whether it found one.
func appendOthers(f *os.File) bool {
	me, err := f.Stat()
	if err != nil {
		return false
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return false
	}
	found := false
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || uintptr(fd) == f.Fd() {
			continue
		}
		st, err := os.Stat(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || !os.SameFile(me, st) {
			continue
		}
		fl, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFL, 0)
		if errno != 0 || fl&syscall.O_ACCMODE == syscall.O_RDONLY {
			continue
		}
		if fl&syscall.O_APPEND == 0 {
			syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_SETFL, fl|syscall.O_APPEND)
		}
		found = true
	}
	return found
}
