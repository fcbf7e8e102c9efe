package forward

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"cecoll/internal/log"
)

// Where the calls went, so that "did cecoll do anything?" has an answer at
// CECOLL_DEBUG=INFO: a route line at each stub's first call, and one
// summary line per communicator at its end.

// stubNoted remembers the stubs whose route was logged.
var stubNoted sync.Map

// NoteStub logs at INFO, once per function, that the calls of a function
// cecoll does not implement go to the real library: its generated stub
// jumps there without entering Go, so nothing else would say so.
func NoteStub(name string) {
	if !log.Enabled(log.LevelInfo, log.Coll) {
		return
	}
	if _, seen := stubNoted.LoadOrStore(name, true); !seen {
		log.Infof(log.Coll, "route: %s -> the real library (cecoll does not implement it; every call is forwarded)", name)
	}
}

// numTallied bounds the operations a Tally counts (Note's bound).
const numTallied = 16

// Tally counts one communicator's routed calls and their bytes (the
// per-rank block, as routing reads it) by operation and way. Adding
// allocates nothing; a communicator's ranks may add from several threads.
type Tally struct {
	n [numTallied][2]struct{ calls, bytes atomic.Uint64 }
}

// Add counts one call of operation fn (its Func number) of bytes, routed
// to the copy engines (ce) or the real library.
func (t *Tally) Add(fn int, bytes uint64, ce bool) {
	if fn < 0 || fn >= numTallied {
		return
	}
	way := 0
	if ce {
		way = 1
	}
	t.n[fn][way].calls.Add(1)
	t.n[fn][way].bytes.Add(bytes)
}

// StubCalls is one stub's count of calls on a communicator.
type StubCalls struct {
	Name  string // the NCCL function, as ncclAllReduce
	Calls uint64
}

// Summary is the INFO line of a communicator's end: who (as "rank 0/2"),
// its tally t (name: an operation's name by Func number), the calls its
// stubs forwarded and the policy, for the hint when the copy engines got
// nothing.
func Summary(who string, t *Tally, name func(int) string, stubs []StubCalls, p Policy) string {
	var ce, real strings.Builder
	var ceCalls, ceBytes, realCalls, realBytes uint64
	add := func(b *strings.Builder, what string, calls, bytes uint64, decoded bool) {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		if decoded {
			fmt.Fprintf(b, "%s %d, %s", what, calls, Size(bytes))
		} else {
			fmt.Fprintf(b, "%s %d", what, calls)
		}
	}
	for fn := range numTallied {
		for way := range 2 {
			calls, bytes := t.n[fn][way].calls.Load(), t.n[fn][way].bytes.Load()
			if calls == 0 {
				continue
			}
			if way == 1 {
				ceCalls, ceBytes = ceCalls+calls, ceBytes+bytes
				add(&ce, name(fn), calls, bytes, true)
			} else {
				realCalls, realBytes = realCalls+calls, realBytes+bytes
				add(&real, name(fn), calls, bytes, true)
			}
		}
	}
	for _, s := range stubs {
		if s.Calls > 0 {
			realCalls += s.Calls
			add(&real, s.Name, s.Calls, 0, false)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "summary %s: copy engines %d calls, %s", who, ceCalls, Size(ceBytes))
	if ceBytes+realBytes > 0 {
		fmt.Fprintf(&b, " (%.0f%% of the bytes cecoll routed)", 100*float64(ceBytes)/float64(ceBytes+realBytes))
	}
	if ce.Len() > 0 {
		fmt.Fprintf(&b, " [%s]", ce.String())
	}
	fmt.Fprintf(&b, "; real library %d calls", realCalls)
	if real.Len() > 0 {
		fmt.Fprintf(&b, " [%s]", real.String())
	}
	switch {
	case ceCalls == 0 && realCalls > 0 && p.Route == RouteNCCL:
		b.WriteString("; nothing reached the copy engines: CECOLL_ROUTE=nccl")
	case ceCalls == 0 && realCalls > 0:
		fmt.Fprintf(&b, "; nothing reached the copy engines: a block reaches them from CECOLL_ROUTE_BYTES=%d, in a symmetric window, or with CECOLL_ROUTE=ce or NCCL_CTA_POLICY=2", p.Bytes)
	}
	return b.String()
}

// Size is n bytes as a short figure: 512 B, 3.1 GiB.
func Size(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}
