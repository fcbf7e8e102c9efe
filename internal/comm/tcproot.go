package comm

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"cecoll/internal/log"
	"cecoll/internal/param"
	"cecoll/internal/result"
)

// The bootstrap root: one TCP listener per process, started by the first
// ncclGetUniqueId (as NCCL does), serving every communicator made from
// this process's ids. Ranks connect, present the id's secret and their
// rank; once all have arrived each gets the full table, and the same
// connections then carry the communicator's allgathers (a star through
// the root) and its aborts.

var root struct {
	once sync.Once
	ln   net.Listener
	err  error

	mu     sync.Mutex
	ids    map[uint64]*rootWorld // by secret; nil value: known id, no world forming
	family uint16
}

// startRoot opens the listener once.
func startRoot() (net.Listener, error) {
	root.once.Do(func() {
		addr, err := listenAddr()
		if err != nil {
			root.err = err
			return
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			root.err = result.Errorf(result.SystemError, "ncclGetUniqueId: bootstrap listener on %s: %w", addr, err)
			return
		}
		root.ln = ln
		root.ids = make(map[uint64]*rootWorld)
		log.Infof("bootstrap root listening on %v", ln.Addr())
		go acceptLoop(ln)
	})
	return root.ln, root.err
}

// listenAddr picks the interface: CECOLL_SOCKET_IFNAME, else
// NCCL_SOCKET_IFNAME (a comma list of name prefixes, "=name" for an exact
// name, a leading "^" to exclude), else loopback: copy engines reach only
// the GPUs of one node, so every rank is local.
func listenAddr() (string, error) {
	given := param.SocketIfname.Get()
	if given == "" {
		return "127.0.0.1:0", nil
	}
	spec := given
	exclude := strings.HasPrefix(spec, "^")
	spec = strings.TrimPrefix(spec, "^")
	exact := strings.HasPrefix(spec, "=")
	spec = strings.TrimPrefix(spec, "=")
	pats := strings.Split(spec, ",")
	match := func(name string) bool {
		for _, p := range pats {
			if p == "" {
				continue
			}
			if (exact && name == p) || (!exact && strings.HasPrefix(name, p)) {
				return true
			}
		}
		return false
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return "", result.Errorf(result.SystemError, "ncclGetUniqueId: list interfaces: %w", err)
	}
	var v6 string
	for _, it := range ifs {
		if it.Flags&net.FlagUp == 0 || match(it.Name) == exclude {
			continue
		}
		addrs, err := it.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			if ip4 := ipn.IP.To4(); ip4 != nil {
				return net.JoinHostPort(ip4.String(), "0"), nil
			}
			if v6 == "" {
				host := ipn.IP.String()
				if ipn.IP.IsLinkLocalUnicast() {
					host += "%" + it.Name
				}
				v6 = net.JoinHostPort(host, "0")
			}
		}
	}
	if v6 != "" {
		return v6, nil
	}
	return "", result.Errorf(result.SystemError, "ncclGetUniqueId: no interface with an address matches socket interface %q", given)
}

// Address families as Linux numbers them.
const (
	afInet  = 2
	afInet6 = 10
)

// putSockaddr writes a as a Linux struct sockaddr_in/sockaddr_in6: family
// u16 in host (little-endian) order, port in network order.
func putSockaddr(b []byte, a *net.TCPAddr) {
	if ip4 := a.IP.To4(); ip4 != nil {
		binary.LittleEndian.PutUint16(b[0:], afInet)
		binary.BigEndian.PutUint16(b[2:], uint16(a.Port))
		copy(b[4:8], ip4)
		return
	}
	binary.LittleEndian.PutUint16(b[0:], afInet6)
	binary.BigEndian.PutUint16(b[2:], uint16(a.Port))
	copy(b[8:24], a.IP.To16())
	if a.Zone != "" {
		if it, err := net.InterfaceByName(a.Zone); err == nil {
			binary.LittleEndian.PutUint32(b[24:], uint32(it.Index))
		}
	}
}

// getSockaddr reads putSockaddr's layout; ok is false for family 0 (an id
// of the in-process bootstrap).
func getSockaddr(b []byte) (a *net.TCPAddr, ok bool, err error) {
	switch binary.LittleEndian.Uint16(b[0:]) {
	case 0:
		return nil, false, nil
	case afInet:
		ip := net.IPv4(b[4], b[5], b[6], b[7])
		return &net.TCPAddr{IP: ip, Port: int(binary.BigEndian.Uint16(b[2:]))}, true, nil
	case afInet6:
		ip := make(net.IP, 16)
		copy(ip, b[8:24])
		a := &net.TCPAddr{IP: ip, Port: int(binary.BigEndian.Uint16(b[2:]))}
		if idx := binary.LittleEndian.Uint32(b[24:]); idx != 0 {
			if it, err := net.InterfaceByIndex(int(idx)); err == nil {
				a.Zone = it.Name
			}
		}
		return a, true, nil
	default:
		return nil, false, result.Errorf(result.InvalidArgument, "unique id holds an unknown address family %d (not made by ncclGetUniqueId)", binary.LittleEndian.Uint16(b[0:]))
	}
}

func acceptLoop(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			log.Warnf("bootstrap root: accept: %v; no further ranks can join ids of this process", err)
			return
		}
		go serveConn(conn)
	}
}

// helloTimeout bounds how long a connection may stay silent before it
// presents itself: a stranger holds nothing for long.
const helloTimeout = 10 * time.Second

// rootWorld is one communicator forming (then running) at the root.
type rootWorld struct {
	secret uint64
	n      int

	mu       sync.Mutex
	ranks    []*rootRank
	joined   int
	complete bool
	failed   error
	timer    *time.Timer
	gathers  map[uint64]*rootGather
	left     int
}

type rootRank struct {
	rank int
	conn net.Conn
	wmu  sync.Mutex
	pid  uint32
	host string
	sock string
	gone bool // said bye or its connection closed
}

type rootGather struct {
	data [][]byte
	in   int
}

func (r *rootRank) send(typ byte, p []byte) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.conn.SetWriteDeadline(time.Now().Add(helloTimeout))
	return writeFrame(r.conn, typ, p)
}

func (r *rootRank) String() string {
	return fmt.Sprintf("rank %d (pid %d on %s)", r.rank, r.pid, r.host)
}

func failPayload(err error) []byte {
	var e enc
	e.u32(uint32(result.Of(err)))
	e.str(err.Error())
	return e.b
}

func drop(conn net.Conn, why string, args ...any) {
	log.Warnf("bootstrap root: dropped connection from %v: %s", conn.RemoteAddr(), fmt.Sprintf(why, args...))
	conn.Close()
}

// serveConn reads one connection's hello, joins it to its world, then
// serves its frames until it leaves.
func serveConn(conn net.Conn) {
	br := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(helloTimeout))
	typ, p, err := readFrame(br, maxHelloFrame)
	if err != nil {
		drop(conn, "no valid hello: %v", err)
		return
	}
	d := dec{b: p}
	magic, secret := d.u64(), d.u64()
	n, rank, pid := int(int32(d.u32())), int(int32(d.u32())), d.u32()
	host, sock := d.str(), d.str()
	if typ != frHello || d.err != nil || magic != idMagic {
		drop(conn, "not a cecoll bootstrap hello")
		return
	}
	root.mu.Lock()
	w, known := root.ids[secret]
	if rest := (dec{b: d.b}); !known {
		// A derived id (ncclCommShrink): its parent's secret and the tag
		// the secret derives from, both known here, register it.
		parent, tag := rest.u64(), rest.u64()
		if _, ok := root.ids[parent]; ok && rest.err == nil && deriveSecret(parent, tag) == secret {
			root.ids[secret] = nil
			known = true
		}
	}
	if !known {
		root.mu.Unlock()
		drop(conn, "it did not present the secret of any unique id of this process")
		return
	}
	if n < 1 || rank < 0 || rank >= n {
		root.mu.Unlock()
		drop(conn, "rank %d of %d is out of range", rank, n)
		return
	}
	if w == nil {
		w = &rootWorld{secret: secret, n: n, ranks: make([]*rootRank, n), gathers: make(map[uint64]*rootGather)}
		timeout := bootTimeout()
		w.timer = time.AfterFunc(timeout, func() { w.expire(timeout) })
		root.ids[secret] = w
	}
	root.mu.Unlock()
	conn.SetReadDeadline(time.Time{})
	rr := &rootRank{rank: rank, conn: conn, pid: pid, host: host, sock: sock}
	if !w.join(rr, n) {
		return
	}
	for {
		typ, p, err := readFrame(br, maxFrame)
		if err != nil {
			w.lost(rr, err)
			return
		}
		switch typ {
		case frGather:
			w.gather(rr, p)
		case frAbort:
			d := dec{b: p}
			code, msg := result.Code(d.u32()), d.str()
			w.abort(rr, result.Errorf(code, "%v aborted: %s", rr, msg))
		case frBye:
			w.bye(rr)
			return
		default:
			w.lost(rr, fmt.Errorf("unexpected frame type %d", typ))
			return
		}
	}
}

// join adds rr; false when the world refused it (the connection is then
// answered and closed).
func (w *rootWorld) join(rr *rootRank, n int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil {
		rr.send(frFail, failPayload(w.failed))
		rr.conn.Close()
		return false
	}
	switch {
	case n != w.n:
		w.failLocked(result.Errorf(result.InvalidArgument, "bootstrap: %v passed nranks %d, another rank passed %d with the same unique id", rr, n, w.n))
	case w.ranks[rr.rank] != nil:
		o := w.ranks[rr.rank]
		w.failLocked(result.Errorf(result.InvalidUsage, "bootstrap: rank %d claimed twice with one unique id: by pid %d on %s and by pid %d on %s", rr.rank, o.pid, o.host, rr.pid, rr.host))
	}
	if w.failed != nil {
		rr.send(frFail, failPayload(w.failed))
		rr.conn.Close()
		return false
	}
	w.ranks[rr.rank] = rr
	w.joined++
	if w.joined < w.n {
		return true
	}
	// Complete: answer everyone with the table; the id may form a new
	// communicator from now on.
	w.timer.Stop()
	w.complete = true
	root.mu.Lock()
	if root.ids[w.secret] == w {
		root.ids[w.secret] = nil
	}
	root.mu.Unlock()
	var e enc
	e.u32(uint32(w.n))
	for _, r := range w.ranks {
		e.u32(r.pid)
		e.str(r.host)
		e.str(r.sock)
	}
	for _, r := range w.ranks {
		if err := r.send(frTable, e.b); err != nil {
			log.Warnf("bootstrap root: sending the table to %v: %v", r, err)
		}
	}
	return true
}

// failLocked ends a forming world: every rank that joined gets err, and so
// does every later arrival. w.mu held.
func (w *rootWorld) failLocked(err error) {
	if w.failed != nil {
		return
	}
	w.failed = err
	w.timer.Stop()
	log.Warnf("%v", err)
	for _, r := range w.ranks {
		if r != nil {
			r.send(frFail, failPayload(err))
			r.conn.Close()
		}
	}
}

func (w *rootWorld) expire(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.complete {
		return
	}
	var missing []int
	for r, rr := range w.ranks {
		if rr == nil {
			missing = append(missing, r)
		}
	}
	sort.Ints(missing)
	w.failLocked(result.Errorf(result.RemoteError, "bootstrap: rank(s) %v of %d never arrived within %v (CECOLL_BOOTSTRAP_TIMEOUT)", missing, w.n, d))
}

func (w *rootWorld) gather(rr *rootRank, p []byte) {
	d := dec{b: p}
	seq := d.u64()
	data := d.bytes()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil || d.err != nil {
		return
	}
	g := w.gathers[seq]
	if g == nil {
		g = &rootGather{data: make([][]byte, w.n)}
		w.gathers[seq] = g
	}
	g.data[rr.rank] = data
	g.in++
	if g.in < w.n {
		return
	}
	delete(w.gathers, seq)
	var e enc
	e.u64(seq)
	for _, b := range g.data {
		e.bytes(b)
	}
	for _, r := range w.ranks {
		if !r.gone {
			r.send(frGather, e.b)
		}
	}
}

// abort tells every other rank that the communicator is dead.
func (w *rootWorld) abort(from *rootRank, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.complete {
		w.failLocked(err)
		return
	}
	if w.failed == nil {
		w.failed = err
	}
	p := failPayload(err)
	for _, r := range w.ranks {
		if r != from && !r.gone {
			r.send(frAbort, p)
		}
	}
}

// lost handles a connection that closed without a bye: its process died
// (or dropped the communicator without destroying it).
func (w *rootWorld) lost(rr *rootRank, cause error) {
	w.mu.Lock()
	gone := rr.gone
	rr.gone = true
	w.mu.Unlock()
	rr.conn.Close()
	if gone {
		return
	}
	w.abort(rr, result.Errorf(result.RemoteError, "%v closed its bootstrap connection without destroying the communicator (process exited or was killed): %v", rr, cause))
	w.leave()
}

func (w *rootWorld) bye(rr *rootRank) {
	w.mu.Lock()
	rr.gone = true
	w.mu.Unlock()
	rr.conn.Close()
	w.leave()
}

// leave forgets the world once every rank has gone.
func (w *rootWorld) leave() {
	w.mu.Lock()
	w.left++
	all := w.complete && w.left == w.n
	w.mu.Unlock()
	if all {
		root.mu.Lock()
		if root.ids[w.secret] == w {
			root.ids[w.secret] = nil
		}
		root.mu.Unlock()
	}
}
