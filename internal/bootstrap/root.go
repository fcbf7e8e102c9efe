package bootstrap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
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
//
// What the root holds grows only with ranks that arrived and proved the
// secret (Gate.go keeps strangers to a bounded number of fds): a forming
// world is a map of the ranks that came; a running one lives as long as
// its ranks' connections (the relay) and is garbage once the last one
// left; an allgather round holds at most one contribution per rank, each
// of at most maxGatherBytes, and all bytes held for peers count against
// rootBudget. A peer that breaks the protocol is dropped, which fails its
// communicator with an error on every other rank.

var root struct {
	once sync.Once
	ln   net.Listener
	err  error
	gate *Gate

	mu      sync.Mutex
	forming map[uint64]*rootWorld // by key: worlds whose ranks are arriving, or that failed doing so
	budget  budget
}

// startRoot opens the listener once.
func startRoot() (net.Listener, error) {
	root.once.Do(func() {
		addr, err := listenAddr()
		if err != nil {
			root.err = err
			return
		}
		ln, err := listenAvoiding(addr, commIDPorts(), net.Listen)
		if err != nil {
			root.err = result.Errorf(result.SystemError, "ncclGetUniqueId: bootstrap listener on %s: %w", addr, err)
			return
		}
		root.ln = ln
		root.gate = NewGate("bootstrap root")
		log.Infof(log.Bootstrap, "bootstrap root listening on %v", ln.Addr())
		go root.gate.Serve(ln, serveConn)
	})
	return root.ln, root.err
}

// listenAddr picks the interface: CECOLL_SOCKET_IFNAME, else
// NCCL_SOCKET_IFNAME (a comma list of name prefixes, "=name" for an exact
// name, a leading "^" to exclude), else loopback: copy engines reach only
// the GPUs of one node, so every rank is local. CECOLL_SOCKET_FAMILY (else
// NCCL_SOCKET_FAMILY) takes only IPv4 or IPv6 addresses; unset, IPv4 first.
func listenAddr() (string, error) {
	given := param.SocketIfname.Get()
	family := param.SocketFamily.Get()
	if given == "" {
		if family == "AF_INET6" {
			return "[::1]:0", nil
		}
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
				if family != "AF_INET6" {
					return net.JoinHostPort(ip4.String(), "0"), nil
				}
				continue
			}
			if v6 == "" && family != "AF_INET" {
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
	if family != "" {
		return "", result.Errorf(result.SystemError, "ncclGetUniqueId: no interface with an %s address matches socket interface %q", family, given)
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

// HelloTimeout bounds how long a connection may stay silent before it
// presents itself: a stranger holds nothing for long. It also bounds a
// write to a peer that stopped reading.
const HelloTimeout = 10 * time.Second

// budget counts the bytes the root holds for its peers.
type budget struct{ used atomic.Int64 }

func (b *budget) take(n int) bool {
	if b.used.Add(int64(n)) > rootBudget {
		b.used.Add(-int64(n))
		return false
	}
	return true
}

func (b *budget) give(n int) { b.used.Add(-int64(n)) }

// rootWorld is one communicator forming (then running) at the root.
type rootWorld struct {
	key uint64
	n   int

	mu       sync.Mutex
	ranks    map[int]*rootRank // those that arrived
	order    []*rootRank       // by rank, once complete
	complete bool
	failed   error
	timer    *time.Timer
	done     uint64    // allgather rounds completed
	round    rootRound // round done+1
	left     int
}

type rootRank struct {
	rank int
	conn net.Conn
	wmu  sync.Mutex
	pid  uint32
	host string
	sock string
	last uint64 // the last round this rank contributed to
	gone bool   // said bye or its connection closed
}

// rootRound is the allgather in progress: every rank's payload (its bytes
// alias it) and the budget they hold.
type rootRound struct {
	data [][]byte
	in   int
	held int
}

func (r *rootRank) send(typ byte, p []byte) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.conn.SetWriteDeadline(time.Now().Add(HelloTimeout))
	return writeFrame(r.conn, typ, p)
}

// sendOrDrop sends, and closes the connection of a rank that does not take
// the frame: its reader then reports it lost, which fails the world.
func (r *rootRank) sendOrDrop(typ byte, p []byte) {
	if err := r.send(typ, p); err != nil {
		log.Warnf("bootstrap root: %v does not take its frames (%v): dropped", r, err)
		r.conn.Close()
	}
}

func (r *rootRank) String() string {
	return fmt.Sprintf("rank %d (pid %d on %s)", r.rank, r.pid, r.host)
}

// serveConn reads one connection's hello, joins it to its world, then
// serves its frames until it leaves.
func serveConn(gc *GateConn) {
	br := bufio.NewReader(gc)
	gc.SetReadDeadline(time.Now().Add(HelloTimeout))
	typ, p, err := readFrame(br, maxHelloFrame, nil)
	if err != nil {
		gc.Refuse("no valid hello: %v", err)
		return
	}
	h, err := parseHello(p)
	if typ != frHello || err != nil {
		gc.Refuse("not a cecoll bootstrap hello (frame type %d: %v)", typ, err)
		return
	}
	if !h.ours() {
		gc.Refuse("it did not present the secret of any unique id of this process")
		return
	}
	if !gc.Pass() {
		return
	}
	conn := gc.Conn
	conn.SetReadDeadline(time.Time{})
	rr := &rootRank{rank: h.rank, conn: conn, pid: h.pid, host: h.host, sock: h.sock}
	if err := h.validate(); err != nil {
		// It holds the secret: tell it why.
		log.Warnf("bootstrap root: refused a hello of pid %d: %v", h.pid, err)
		rr.send(frFail, failPayload(err))
		conn.Close()
		return
	}
	w := formingWorld(h.sec.Key, h.n)
	if !w.join(rr, h.n) {
		return
	}
	w.serve(rr, br)
}

// formingWorld returns the world forming for key, made on first use.
func formingWorld(key uint64, n int) *rootWorld {
	root.mu.Lock()
	defer root.mu.Unlock()
	if w := root.forming[key]; w != nil {
		return w
	}
	if root.forming == nil {
		root.forming = make(map[uint64]*rootWorld)
	}
	w := &rootWorld{key: key, n: n, ranks: make(map[int]*rootRank)}
	timeout := Timeout()
	w.timer = time.AfterFunc(timeout, func() { w.expire(timeout) })
	root.forming[key] = w
	return w
}

// forget takes w out of the forming worlds.
func (w *rootWorld) forget() {
	root.mu.Lock()
	if root.forming[w.key] == w {
		delete(root.forming, w.key)
	}
	root.mu.Unlock()
}

// serve takes rr's frames until it leaves. A frame that breaks the
// protocol drops rr, which fails the world.
func (w *rootWorld) serve(rr *rootRank, br *bufio.Reader) {
	for {
		typ, p, err := readFrame(br, maxRankFrame, &root.budget)
		if err != nil {
			if errors.Is(err, errTooLarge) || errors.Is(err, errBudget) {
				log.Warnf("bootstrap root: dropped %v: %v", rr, err)
			}
			w.lost(rr, err)
			return
		}
		switch typ {
		case frGather:
			seq, data, err := parseGather(p)
			if err == nil {
				err = w.gather(rr, seq, data, len(p))
			}
			if err != nil {
				root.budget.give(len(p))
				log.Warnf("bootstrap root: dropped %v: %v", rr, err)
				w.lost(rr, err)
				return
			}
		case frAbort:
			root.budget.give(len(p))
			code, msg := parseFail(p)
			w.abort(rr, result.Errorf(code, "%v aborted: %s", rr, msg))
		case frBye:
			root.budget.give(len(p))
			w.bye(rr)
			return
		default:
			root.budget.give(len(p))
			err := fmt.Errorf("unexpected frame type %d", typ)
			log.Warnf("bootstrap root: dropped %v: %v", rr, err)
			w.lost(rr, err)
			return
		}
	}
}

// join adds rr; false when the world refused it (the connection is then
// answered and closed).
func (w *rootWorld) join(rr *rootRank, n int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.complete {
		// It came as the last rank arrived: a rank twice. The
		// communicator formed without it and goes on.
		err := result.Errorf(result.InvalidUsage, "bootstrap: rank %d claimed twice with one unique id, by pid %d on %s after the communicator formed", rr.rank, rr.pid, rr.host)
		log.Warnf("%v", err)
		rr.send(frFail, failPayload(err))
		rr.conn.Close()
		return false
	}
	if w.failed == nil {
		switch {
		case n != w.n:
			w.failLocked(result.Errorf(result.InvalidArgument, "bootstrap: %v passed nranks %d, another rank passed %d with the same unique id", rr, n, w.n))
		case w.ranks[rr.rank] != nil:
			o := w.ranks[rr.rank]
			w.failLocked(result.Errorf(result.InvalidUsage, "bootstrap: rank %d claimed twice with one unique id: by pid %d on %s and by pid %d on %s", rr.rank, o.pid, o.host, rr.pid, rr.host))
		}
	}
	if w.failed != nil {
		rr.send(frFail, failPayload(w.failed))
		rr.conn.Close()
		return false
	}
	w.ranks[rr.rank] = rr
	if len(w.ranks) < w.n {
		return true
	}
	// Complete: answer everyone with the table; the id may form a new
	// communicator from now on.
	w.timer.Stop()
	w.complete = true
	w.forget()
	w.order = make([]*rootRank, w.n)
	for r, rk := range w.ranks {
		w.order[r] = rk
	}
	table := encodeTable(w.order)
	for _, r := range w.order {
		r.sendOrDrop(frTable, table)
	}
	return true
}

// failLocked ends a forming world: every rank that joined gets err, and so
// does every later arrival until the world's bootstrap timeout (so that a
// late rank learns why rather than waiting). w.mu held.
func (w *rootWorld) failLocked(err error) {
	if w.failed != nil {
		return
	}
	w.failed = err
	log.Warnf("%v", err)
	for _, r := range w.ranks {
		r.send(frFail, failPayload(err))
		r.conn.Close()
	}
	w.ranks = nil
	w.releaseRoundLocked()
}

func (w *rootWorld) expire(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.forget()
	if w.complete || w.failed != nil {
		return
	}
	var missing []int
	for r := 0; r < w.n && len(missing) < 16; r++ {
		if w.ranks[r] == nil {
			missing = append(missing, r)
		}
	}
	more := ""
	if rest := w.n - len(w.ranks) - len(missing); rest > 0 {
		more = fmt.Sprintf(" and %d more", rest)
	}
	w.failLocked(result.Errorf(result.RemoteError, "bootstrap: rank(s) %v%s of %d never arrived within %v (CECOLL_BOOTSTRAP_TIMEOUT)", missing, more, w.n, d))
}

// gather records rr's contribution to round seq; held is the budget its
// payload took (released with the round). An error is a protocol breach:
// every rank makes the same sequence of allgathers, each after the
// previous one returned, so a contribution is always to round done+1 and
// one per rank.
func (w *rootWorld) gather(rr *rootRank, seq uint64, data []byte, held int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.failed != nil:
		root.budget.give(held) // the world is dead: the bytes go nowhere
		return nil
	case !w.complete:
		return fmt.Errorf("an allgather before every rank arrived")
	case rr.last >= seq:
		return fmt.Errorf("allgather #%d again", seq)
	case seq != w.done+1:
		return fmt.Errorf("allgather #%d while the communicator is at #%d", seq, w.done+1)
	}
	rd := &w.round
	if rd.data == nil {
		rd.data = make([][]byte, w.n)
	}
	rr.last = seq
	rd.data[rr.rank] = data
	rd.in++
	rd.held += held
	if rd.in < w.n {
		return nil
	}
	var e Enc
	size := 8
	for _, b := range rd.data {
		size += 4 + len(b)
	}
	if !root.budget.take(size) {
		err := result.Errorf(result.SystemError, "bootstrap root: an allgather of %d ranks would hold more than %d MiB", w.n, rootBudget>>20)
		log.Warnf("%v", err)
		w.failed = err
		w.broadcastLocked(nil, frAbort, failPayload(err))
		w.releaseRoundLocked()
		return nil
	}
	e.B = make([]byte, 0, size)
	e.U64(seq)
	for _, b := range rd.data {
		e.Bytes(b)
	}
	w.done = seq
	w.releaseRoundLocked()
	w.broadcastLocked(nil, frGather, e.B)
	root.budget.give(size)
	return nil
}

// releaseRoundLocked gives back what the round in progress holds.
func (w *rootWorld) releaseRoundLocked() {
	root.budget.give(w.round.held)
	w.round = rootRound{}
}

// broadcastLocked sends a frame to every rank still there but from.
func (w *rootWorld) broadcastLocked(from *rootRank, typ byte, p []byte) {
	for _, r := range w.order {
		if r != from && !r.gone {
			r.sendOrDrop(typ, p)
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
	w.releaseRoundLocked()
	w.broadcastLocked(from, frAbort, failPayload(err))
}

// lost handles a connection that closed without a bye: its process died
// (or dropped the communicator without destroying it), or the root
// dropped it for breaking the protocol.
func (w *rootWorld) lost(rr *rootRank, cause error) {
	w.mu.Lock()
	gone := rr.gone
	rr.gone = true
	w.mu.Unlock()
	rr.conn.Close()
	if gone {
		return
	}
	w.abort(rr, result.Errorf(result.RemoteError, "%v closed its bootstrap connection without destroying the communicator (process exited or was killed) or was dropped by the root: %v", rr, cause))
	w.leave()
}

func (w *rootWorld) bye(rr *rootRank) {
	w.mu.Lock()
	rr.gone = true
	w.mu.Unlock()
	rr.conn.Close()
	w.leave()
}

// leave counts a rank out; the last one releases what the world holds
// (nothing refers to a complete world but its ranks' goroutines).
func (w *rootWorld) leave() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.left++
	if w.complete && w.left == w.n {
		w.releaseRoundLocked()
	}
}
