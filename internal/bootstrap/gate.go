package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"cecoll/internal/log"
)

// A Gate serves a listener any local user can reach (the bootstrap root's
// TCP port, the fd socket whose abstract name /proc/net/unix shows) for
// clients that must prove the id's secret in their first message. A user
// without the secret may only delay a join, so:
//   - the accept loop never ends on an error: on EMFILE, ENFILE and the
//     like it drops the oldest half of the connections that have not
//     proven anything yet, backs off (5 ms doubling to 1 s) and goes on;
//   - at most limit connections wait unproven (an eighth of the fd limit,
//     4..256); a newcomer beyond that evicts the oldest, so a flood holds
//     a bounded number of fds while a real client, which writes its
//     secret at once, is served within microseconds of its accept;
//   - every connection has HelloTimeout to prove the secret;
//   - refusals are logged, at most one line a second with a count.
//
// Clients retry a connection dropped before any answer (Node.Connect,
// internal/peermem Fetch): an eviction costs them a retry, not the join.
type Gate struct {
	name  string
	limit int

	mu      sync.Mutex
	pending map[*GateConn]struct{}
	refused refusals
}

type GateConn struct {
	net.Conn
	g     *Gate
	since time.Time
	state int // gcPending, gcPassed, gcClosed (under g.mu)
}

const (
	gcPending = iota
	gcPassed
	gcClosed
)

func NewGate(name string) *Gate {
	return &Gate{name: name, limit: pendingLimit(), pending: make(map[*GateConn]struct{})}
}

// pendingLimit is an eighth of the process's fd limit, within 4..256: the
// two gates of a process then hold at most a quarter of its fds for
// strangers.
func pendingLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 64
	}
	return int(min(max(rl.Cur/8, 4), 256))
}

// Serve accepts until the listener is closed, handing each connection to
// handle on its own goroutine.
func (g *Gate) Serve(ln net.Listener, handle func(*GateConn)) {
	var delay time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			shed := g.shed()
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			g.refused.note(g.name, "accept: %v; dropped %d connections that had not proven the secret, retrying in %v", err, shed, delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		go handle(g.admit(conn))
	}
}

// admit registers conn as pending, evicting the oldest pending connection
// when the Gate is full.
func (g *Gate) admit(conn net.Conn) *GateConn {
	gc := &GateConn{Conn: conn, g: g, since: time.Now()}
	var evicted *GateConn
	g.mu.Lock()
	if len(g.pending) >= g.limit {
		evicted = g.oldestLocked()
		g.closeLocked(evicted)
	}
	g.pending[gc] = struct{}{}
	g.mu.Unlock()
	if evicted != nil {
		g.refused.note(g.name, "more than %d connections have not proven the secret: dropped the oldest, from %s", g.limit, from(evicted))
		evicted.Conn.Close()
	}
	return gc
}

// shed closes the oldest half of the pending connections (at least one)
// and returns how many.
func (g *Gate) shed() int {
	g.mu.Lock()
	var out []*GateConn
	for n := (len(g.pending) + 1) / 2; n > 0; n-- {
		gc := g.oldestLocked()
		g.closeLocked(gc)
		out = append(out, gc)
	}
	g.mu.Unlock()
	for _, gc := range out {
		gc.Conn.Close()
	}
	return len(out)
}

func (g *Gate) oldestLocked() *GateConn {
	var old *GateConn
	for gc := range g.pending {
		if old == nil || gc.since.Before(old.since) {
			old = gc
		}
	}
	return old
}

func (g *Gate) closeLocked(gc *GateConn) {
	delete(g.pending, gc)
	gc.state = gcClosed
}

// Pass marks gc as having proven the secret; false when it was evicted
// meanwhile (its connection is closed: the client retries).
func (gc *GateConn) Pass() bool {
	g := gc.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if gc.state != gcPending {
		return false
	}
	delete(g.pending, gc)
	gc.state = gcPassed
	return true
}

// Refuse drops a connection that did not prove the secret, with a logged
// reason (unless an eviction already dropped it).
func (gc *GateConn) Refuse(why string, args ...any) {
	g := gc.g
	g.mu.Lock()
	evicted := gc.state == gcClosed
	if gc.state == gcPending {
		g.closeLocked(gc)
	}
	g.mu.Unlock()
	if !evicted {
		g.refused.note(g.name, "dropped a connection from %s: %s", from(gc), fmt.Sprintf(why, args...))
	}
	gc.Conn.Close()
}

// from names a connection's peer: its address, or for a Unix socket
// (which has none) "a local process".
func from(gc *GateConn) string {
	if a := gc.RemoteAddr(); a != nil && a.String() != "" && a.String() != "@" {
		return a.String()
	}
	return "a local process"
}

// pendingCount is for tests.
func (g *Gate) pendingCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}

// refusals rate-limits the log lines of refusals: a flood must not turn
// into a flood of the log.
type refusals struct {
	mu    sync.Mutex
	last  time.Time
	quiet int
}

func (r *refusals) note(who, format string, args ...any) {
	r.mu.Lock()
	now := time.Now()
	if !r.last.IsZero() && now.Sub(r.last) < time.Second {
		r.quiet++
		r.mu.Unlock()
		return
	}
	quiet := r.quiet
	r.last, r.quiet = now, 0
	r.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	if quiet > 0 {
		msg += fmt.Sprintf(" (and %d more refusals since the last such line)", quiet)
	}
	log.Warnf("%s: %s", who, msg)
}
