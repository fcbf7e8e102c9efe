package comm

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"cecoll/internal/hip"
	"cecoll/internal/log"
	"cecoll/internal/result"
)

// Passing allocations between processes: each process serves, on one
// abstract Unix socket (nothing on the filesystem, gone with the process),
// file descriptors of the allocations its ranks are registering as
// windows. A peer asks with the communicator's secret and the allocation's
// base; only an allocation published for that secret is exported, its fd
// travels with SCM_RIGHTS, and both sides close their copy after use.

type exportKey struct {
	secret uint64
	base   hip.DevicePtr
}

type exportEntry struct {
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

// fdServer starts this process's socket once and returns its name.
func fdServer() (string, error) {
	fds.once.Do(func() {
		var r [8]byte
		rand.Read(r[:])
		name := fmt.Sprintf("@cecoll-%d-%s", os.Getpid(), hex.EncodeToString(r[:]))
		ln, err := net.Listen("unix", name)
		if err != nil {
			fds.err = result.Errorf(result.SystemError, "window fd socket %q: %w", name, err)
			return
		}
		fds.name = name
		fds.exports = make(map[exportKey]*exportEntry)
		go fdAccept(ln)
	})
	return fds.name, fds.err
}

func fdAccept(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			log.Warnf("window fd socket: accept: %v", err)
			return
		}
		go fdServe(conn.(*net.UnixConn))
	}
}

// publish makes [base] exportable to ranks presenting secret, until
// unpublish.
func publish(secret uint64, rt hip.Runtime, dev int, base hip.DevicePtr) {
	fds.mu.Lock()
	defer fds.mu.Unlock()
	k := exportKey{secret, base}
	if e := fds.exports[k]; e != nil {
		e.refs++
		return
	}
	fds.exports[k] = &exportEntry{rt: rt, dev: dev, refs: 1, fd: -1}
}

// publishFD makes the open file fd exportable under (secret, tag).
func publishFD(secret uint64, tag hip.DevicePtr, fd int) {
	fds.mu.Lock()
	defer fds.mu.Unlock()
	fds.exports[exportKey{secret, tag}] = &exportEntry{refs: 1, fd: fd}
}

func unpublishFD(secret uint64, tag hip.DevicePtr) { unpublish(secret, tag) }

func unpublish(secret uint64, base hip.DevicePtr) {
	fds.mu.Lock()
	defer fds.mu.Unlock()
	k := exportKey{secret, base}
	if e := fds.exports[k]; e != nil {
		if e.refs--; e.refs == 0 {
			delete(fds.exports, k)
		}
	}
}

func fdServe(conn *net.UnixConn) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(helloTimeout))
	var req [16]byte
	if _, err := ioReadFull(conn, req[:]); err != nil {
		return
	}
	k := exportKey{binary.LittleEndian.Uint64(req[0:]), hip.DevicePtr(binary.LittleEndian.Uint64(req[8:]))}
	fds.mu.Lock()
	e := fds.exports[k]
	var ent exportEntry
	if e != nil {
		ent = *e
	}
	fds.mu.Unlock()
	if e == nil {
		log.Warnf("window fd socket: refused a request for allocation %#x: not published for that secret", k.base)
		conn.Write([]byte("no such allocation"))
		return
	}
	fd := ent.fd
	if fd < 0 {
		var err error
		fd, err = exportOnDevice(ent.rt, ent.dev, k.base)
		if err != nil {
			conn.Write([]byte("export failed: " + err.Error()))
			return
		}
		defer syscall.Close(fd)
	}
	if _, _, err := conn.WriteMsgUnix([]byte{0}, syscall.UnixRights(fd), nil); err != nil {
		log.Warnf("window fd socket: sending fd of %#x: %v", k.base, err)
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

// fetchFD asks the process serving sock for the allocation at base.
func fetchFD(sock string, secret uint64, base hip.DevicePtr) (int, error) {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return -1, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(helloTimeout))
	var req [16]byte
	binary.LittleEndian.PutUint64(req[0:], secret)
	binary.LittleEndian.PutUint64(req[8:], uint64(base))
	if _, err := conn.Write(req[:]); err != nil {
		return -1, err
	}
	buf := make([]byte, 512)
	oob := make([]byte, syscall.CmsgSpace(4))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return -1, err
	}
	if oobn == 0 {
		return -1, fmt.Errorf("peer refused: %s", buf[:n])
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("malformed control message: %v", err)
	}
	got, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(got) != 1 {
		for _, fd := range got {
			syscall.Close(fd)
		}
		return -1, fmt.Errorf("malformed rights: %v", err)
	}
	syscall.CloseOnExec(got[0])
	return got[0], nil
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
