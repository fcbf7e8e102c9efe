package bootstrap

import (
	"crypto/sha256"
	"encoding/binary"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"cecoll/internal/log"
	"cecoll/internal/param"
	"cecoll/internal/result"
)

// A given root address, as NCCL_COMM_ID gives NCCL's (param.CommID:
// CECOLL_COMM_ID, else NCCL_COMM_ID while no real library owns it).
// ncclGetUniqueId then makes the same id in every process, from the
// address alone, and starts nothing; the init of rank 0 listens there
// (NCCL's bootstrapCreateRoot in ncclCommInitRank), and the other ranks
// retry a refused connection until it does. Such an id holds no secret,
// as NCCL's holds none: a local user who knows the address can join a
// forming communicator (docs/security.md).

// sockaddrBytes is the id's address field (a sockaddr_in6 at most).
const sockaddrBytes = 28

// commIDAddr resolves the given address; nil when none is given.
func commIDAddr() (*net.TCPAddr, error) {
	if err := param.CommID.Err(); err != nil {
		return nil, result.Errorf(result.InvalidArgument, "%v", err)
	}
	s := param.CommID.Get()
	if s == "" {
		return nil, nil
	}
	a, err := net.ResolveTCPAddr(tcpNetwork(), s)
	if err != nil {
		return nil, result.Errorf(result.InvalidArgument, "%s=%s: %v (want <ipv4>:<port>, [<ipv6>]:<port> or <hostname>:<port>)",
			param.CommID.From(), s, err)
	}
	return a, nil
}

// tcpNetwork is Go's network name for CECOLL_SOCKET_FAMILY.
func tcpNetwork() string {
	switch param.SocketFamily.Get() {
	case "AF_INET":
		return "tcp4"
	case "AF_INET6":
		return "tcp6"
	}
	return "tcp"
}

var commIDNoted sync.Once

// newCommID is ncclGetUniqueId's id for the given address a: its key and
// tag follow from the address, so every process makes the same bytes.
func newCommID(a *net.TCPAddr) ID {
	commIDNoted.Do(func() {
		log.Infof(log.Env, "%s set by environment to %s", param.CommID.From(), param.CommID.Get())
	})
	var id ID
	binary.LittleEndian.PutUint64(id[0:8], idMagic)
	putSockaddr(id[16:], a)
	key := commIDKey(id[16 : 16+sockaddrBytes])
	binary.LittleEndian.PutUint64(id[8:16], key)
	tag := commIDTag(key)
	copy(id[tagOff:], tag[:])
	return id
}

func commIDKey(sockaddr []byte) uint64 {
	sum := sha256.Sum256(append([]byte("cecoll comm id key\x00"), sockaddr...))
	return binary.LittleEndian.Uint64(sum[:8]) | 1 // never 0
}

func commIDTag(key uint64) [TagBytes]byte {
	b := binary.LittleEndian.AppendUint64([]byte("cecoll comm id tag\x00"), key)
	sum := sha256.Sum256(b)
	var t [TagBytes]byte
	copy(t[:], sum[:])
	return t
}

// FromCommID reports whether id was made from a given address (newCommID).
func (id *ID) FromCommID() bool {
	s := id.Secret()
	return s.Key == commIDKey(id[16:16+sockaddrBytes]) && s.Tag == commIDTag(s.Key)
}

// commIDRoot is the root's listener at a given address, opened by the
// init of rank 0 (at most one address per process).
var commIDRoot struct {
	mu   sync.Mutex
	addr string
	key  atomic.Uint64 // its ids' key, accepted without a secret (Secret.ours)
}

// ListenCommID opens the root's listener at the address id names, for
// rank 0 of a communicator made from it; later inits reuse it.
func ListenCommID(id *ID) error {
	a, _, err := getSockaddr(id[16:])
	if err != nil {
		return err
	}
	commIDRoot.mu.Lock()
	defer commIDRoot.mu.Unlock()
	switch commIDRoot.addr {
	case a.String():
		return nil
	case "":
	default:
		return result.Errorf(result.InvalidUsage, "bootstrap: this process listens for rank 0 at %s already, not at %v as this unique id asks", commIDRoot.addr, a)
	}
	ln, err := net.Listen("tcp", a.String())
	if err != nil {
		return result.Errorf(result.SystemError, "bootstrap: rank 0 cannot listen at the unique id's address %v (%s=%s): %w",
			a, param.CommID.From(), param.CommID.Get(), err)
	}
	commIDRoot.addr = a.String()
	commIDRoot.key.Store(id.Secret().Key)
	log.Infof(log.Bootstrap, "bootstrap root listening on %v, the given address", ln.Addr())
	go NewGate("bootstrap root").Serve(ln, serveConn)
	return nil
}

// commIDPorts are the ports given to NCCL_COMM_ID and CECOLL_COMM_ID,
// which the root's own listener (random port) must leave free: rank 0
// of cecoll, or of the real library in forward mode, will listen there.
func commIDPorts() []int {
	var ports []int
	for _, s := range []string{param.CommID.Get(), param.NCCLCommID.Get()} {
		if _, p, err := net.SplitHostPort(s); err == nil {
			if n, err := strconv.Atoi(p); err == nil {
				ports = append(ports, n)
			}
		}
	}
	return ports
}

// listenAvoiding listens at addr (port 0: the kernel's choice) on a port
// not in avoid: a listener the kernel gave such a port is kept open while
// the next is made, so the next gets another.
func listenAvoiding(addr string, avoid []int, listen func(network, addr string) (net.Listener, error)) (net.Listener, error) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for {
		ln, err := listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		bad := false
		for _, p := range avoid {
			bad = bad || p == port
		}
		if !bad || len(held) >= len(avoid) {
			return ln, nil
		}
		held = append(held, ln)
	}
}
