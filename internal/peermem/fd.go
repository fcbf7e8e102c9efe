package peermem

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"cecoll/internal/bootstrap"
	"cecoll/internal/hip"
	"cecoll/internal/log"
	"cecoll/internal/result"
)

// Passing allocations between processes: each process serves, on one
// abstract Unix socket (nothing on the filesystem, gone with the process),
// file descriptors of the allocations its ranks are registering as
// windows. A peer asks with the communicator's secret (the id's key and
// tag: bootstrap.Secret) and the allocation's base; only an allocation
// published for that key is exported, and only to a request whose tag
// matches (compared in constant time); its fd travels with SCM_RIGHTS, and
// both sides close their copy after use. Any local user can connect (the
// name shows in /proc/net/unix): the socket is served through a gate
// (bootstrap.Gate), and a requester retries a connection dropped before
// any answer.

type exportKey struct {
	key  uint64
	base hip.DevicePtr
}

type exportEntry struct {
	tag  [bootstrap.TagBytes]byte
	rt   hip.Runtime
	dev  int
	refs int
	fd   int // >= 0: a plain file (the CECOLL_CHECK board), sent as is
}

var fds struct {
	once sync.Once
	name string
	err  error

	mu      sync.Mutex
	exports map[exportKey]*exportEntry
}

// Socket starts this process's socket once and returns its name.
func Socket() (string, error) {
	fds.once.Do(func() {
		var r [8]byte
		rand.Read(r[:])
		name := fmt.Sprintf("%s%d-%s", bootstrap.SockPrefix, os.Getpid(), hex.EncodeToString(r[:]))
		ln, err := net.Listen("unix", name)
		if err != nil {
			fds.err = result.Errorf(result.SystemError, "window fd socket %q: %w", name, err)
			return
		}
		fds.name = name
		go bootstrap.NewGate("window fd socket").Serve(ln, serve)
	})
	return fds.name, fds.err
}

// Publish makes [base] exportable to ranks presenting sec, until
// Unpublish.
func Publish(sec bootstrap.Secret, rt hip.Runtime, dev int, base hip.DevicePtr) {
	fds.mu.Lock()
	defer fds.mu.Unlock()
	k := exportKey{sec.Key, base}
	if e := exportsLocked()[k]; e != nil {
		e.refs++
		return
	}
	fds.exports[k] = &exportEntry{tag: sec.Tag, rt: rt, dev: dev, refs: 1, fd: -1}
}

// PublishFD makes the open file fd exportable under (sec, tag).
func PublishFD(sec bootstrap.Secret, tag hip.DevicePtr, fd int) {
	fds.mu.Lock()
	defer fds.mu.Unlock()
	exportsLocked()[exportKey{sec.Key, tag}] = &exportEntry{tag: sec.Tag, refs: 1, fd: fd}
}

// exportsLocked is the table of what is published (fds.mu held), made at
// the first publication: it may precede Socket (a CECOLL_CHECK board is
// published before its process connects).
func exportsLocked() map[exportKey]*exportEntry {
	if fds.exports == nil {
		fds.exports = make(map[exportKey]*exportEntry)
	}
	return fds.exports
}

func Unpublish(key uint64, base hip.DevicePtr) {
	fds.mu.Lock()
	defer fds.mu.Unlock()
	k := exportKey{key, base}
	if e := fds.exports[k]; e != nil {
		if e.refs--; e.refs == 0 {
			delete(fds.exports, k)
		}
	}
}

// fdReqBytes is a request: key u64, tag, base u64.
const fdReqBytes = 8 + bootstrap.TagBytes + 8

func encodeFDRequest(sec bootstrap.Secret, base hip.DevicePtr) [fdReqBytes]byte {
	var b [fdReqBytes]byte
	binary.LittleEndian.PutUint64(b[0:], sec.Key)
	copy(b[8:], sec.Tag[:])
	binary.LittleEndian.PutUint64(b[8+bootstrap.TagBytes:], uint64(base))
	return b
}

func parseFDRequest(b [fdReqBytes]byte) (bootstrap.Secret, hip.DevicePtr) {
	var s bootstrap.Secret
	s.Key = binary.LittleEndian.Uint64(b[0:])
	copy(s.Tag[:], b[8:])
	return s, hip.DevicePtr(binary.LittleEndian.Uint64(b[8+bootstrap.TagBytes:]))
}

func serve(gc *bootstrap.GateConn) {
	gc.SetDeadline(time.Now().Add(bootstrap.HelloTimeout))
	var req [fdReqBytes]byte
	if _, err := ioReadFull(gc, req[:]); err != nil {
		gc.Refuse("no request: %v", err)
		return
	}
	sec, base := parseFDRequest(req)
	fds.mu.Lock()
	e := fds.exports[exportKey{sec.Key, base}]
	var ent exportEntry
	if e != nil {
		ent = *e
	}
	fds.mu.Unlock()
	// A missing entry and a wrong tag look alike to the requester.
	if e == nil || !bootstrap.SameTag(ent.tag, sec.Tag) {
		gc.Write([]byte("no such allocation"))
		gc.Refuse("a request for allocation %#x not published for that secret", base)
		return
	}
	if !gc.Pass() {
		return
	}
	conn := gc.Conn.(*net.UnixConn)
	defer conn.Close()
	fd := ent.fd
	if fd < 0 {
		var err error
		fd, err = exportOnDevice(ent.rt, ent.dev, base)
		if err != nil {
			conn.Write([]byte("export failed: " + err.Error()))
			return
		}
		defer syscall.Close(fd)
	}
	if _, _, err := conn.WriteMsgUnix([]byte{0}, syscall.UnixRights(fd), nil); err != nil {
		log.Warnf("window fd socket: sending fd of %#x: %v", base, err)
	}
}

// exportOnDevice runs MemExport with the allocation's device current on a
// locked thread (drivers export in the owning context).
func exportOnDevice(rt hip.Runtime, dev int, base hip.DevicePtr) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := rt.SetDevice(dev); err != nil {
		return -1, err
	}
	return rt.MemExport(base)
}

// dropped is an attempt the peer's socket cut short before answering
// (its gate under a flood): worth another.
type dropped struct{ err error }

func (d dropped) Error() string { return d.err.Error() }

// Fetch asks the process serving sock for the allocation at base,
// retrying a connection dropped before an answer (the peer's gate under a
// flood) until deadline.
func Fetch(sock string, sec bootstrap.Secret, base hip.DevicePtr, deadline time.Time) (int, error) {
	delay := 5 * time.Millisecond
	for {
		fd, err := fetchOnce(sock, sec, base, deadline)
		var dr dropped
		if err == nil || !errors.As(err, &dr) || time.Until(deadline) < delay {
			return fd, err
		}
		time.Sleep(delay)
		delay = min(2*delay, 250*time.Millisecond)
	}
}

func fetchOnce(sock string, sec bootstrap.Secret, base hip.DevicePtr, deadline time.Time) (int, error) {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		if bootstrap.Transient(err) {
			return -1, dropped{err}
		}
		return -1, err
	}
	defer conn.Close()
	if d := time.Now().Add(bootstrap.HelloTimeout); d.Before(deadline) {
		deadline = d
	}
	conn.SetDeadline(deadline)
	req := encodeFDRequest(sec, base)
	if _, err := conn.Write(req[:]); err != nil {
		return -1, dropped{err}
	}
	buf := make([]byte, 512)
	oob := make([]byte, syscall.CmsgSpace(4))
	n, oobn, flags, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return -1, err
		}
		return -1, dropped{err}
	}
	if oobn == 0 {
		if n == 0 {
			return -1, dropped{fmt.Errorf("closed before answering")}
		}
		return -1, fmt.Errorf("peer refused: %q", buf[:min(n, 128)])
	}
	got, err := parseRights(oob[:oobn])
	if err == nil && flags&syscall.MSG_CTRUNC != 0 {
		err = fmt.Errorf("control message truncated")
	}
	if err == nil && len(got) != 1 {
		err = fmt.Errorf("%d fds in the answer", len(got))
	}
	if err != nil {
		for _, fd := range got {
			syscall.Close(fd)
		}
		return -1, fmt.Errorf("malformed answer: %v", err)
	}
	syscall.CloseOnExec(got[0])
	return got[0], nil
}

// parseRights returns every fd passed in oob (so that the caller closes
// them all, whatever else went wrong), and an error for anything but
// well-formed SCM_RIGHTS messages.
func parseRights(oob []byte) ([]int, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		if len(msgs[i].Data)%4 != 0 {
			// syscall.ParseUnixRights indexes past its result then
			// (found by FuzzRights): the kernel never sends it.
			return fds, fmt.Errorf("SCM_RIGHTS of %d bytes", len(msgs[i].Data))
		}
		got, err := syscall.ParseUnixRights(&msgs[i])
		fds = append(fds, got...)
		if err != nil {
			return fds, err
		}
	}
	return fds, nil
}

func ioReadFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func closeFD(fd int) { syscall.Close(fd) }
