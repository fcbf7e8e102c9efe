package ce

import (
	"bytes"
	"cmp"
	"fmt"
	"strings"
	"testing"
	"time"

	"cecoll/internal/hip"
	"cecoll/internal/result"
)

// p2pPattern is a batch pattern: each rank's transfers, as (send?, peer,
// bytes) in issue order. Every send from a to b has its receive, in the
// same order, at b.
type p2pPattern struct {
	name string
	ops  func(n, me int) []p2pOp
}

type p2pOp struct {
	send  bool
	peer  int
	bytes uintptr
}

func p2pPatterns(sizes ...uintptr) []p2pPattern {
	big := sizes[len(sizes)-1]
	return []p2pPattern{
		{"ring", func(n, me int) []p2pOp {
			return []p2pOp{{true, (me + 1) % n, big}, {false, (me - 1 + n) % n, big}}
		}},
		{"ring-recv-first", func(n, me int) []p2pOp {
			return []p2pOp{{false, (me - 1 + n) % n, big}, {true, (me + 1) % n, big}}
		}},
		{"all-pairs", func(n, me int) []p2pOp {
			var ops []p2pOp
			for q := range n {
				ops = append(ops, p2pOp{true, q, sizes[q%len(sizes)]}, p2pOp{false, q, sizes[me%len(sizes)]})
			}
			return ops
		}},
		{"twice-to-the-next", func(n, me int) []p2pOp {
			next, prev := (me+1)%n, (me-1+n)%n
			return []p2pOp{{true, next, sizes[0]}, {true, next, big}, {false, prev, sizes[0]}, {false, prev, big}}
		}},
		{"rank0-to-all", func(n, me int) []p2pOp {
			if me != 0 {
				return []p2pOp{{false, 0, big}}
			}
			var ops []p2pOp
			for q := 1; q < n; q++ {
				ops = append(ops, p2pOp{true, q, big})
			}
			return ops
		}},
	}
}

// p2pBytes is the pattern of the bytes rank from sends to rank to in its
// k-th transfer to it, round rnd.
func p2pBytes(from, to, k, rnd int, n uintptr) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(from*37 + to*11 + k*5 + rnd*3 + i*7)
	}
	return b
}

// runP2P runs pattern pt on every rank, eagerly (rounds calls) or captured
// once and replayed rounds times, direct (every rank's receive buffers
// known to its senders) or staged, and checks every receive buffer and
// its guard bytes.
func runP2P(t *testing.T, w *world, pt p2pPattern, direct, graph bool, rounds int) {
	const guard = 64
	w.run(testCfg(), 30*time.Second, false, func(r *rankEnv) error {
		n, me := r.w.n, r.rank
		ops := pt.ops(n, me)
		bufs := make([]hip.DevicePtr, len(ops))
		for i, op := range ops {
			bufs[i] = r.alloc(op.bytes + 2*guard)
		}
		// Every rank's receive buffers, for the direct path: peers find
		// the one matching their k-th send to it.
		all := make([][]p2pOp, n)
		allBufs := make([][]hip.DevicePtr, n)
		for q := range n {
			all[q] = pt.ops(n, q)
			allBufs[q] = make([]hip.DevicePtr, len(all[q]))
		}
		most := 0
		for q := range n {
			most = max(most, len(all[q]))
		}
		for i := range most { // every rank exchanges as often (the barrier's rule)
			var mine hip.DevicePtr
			if i < len(ops) {
				mine = bufs[i]
			}
			got := r.exchange(mine)
			for q := range n {
				if i < len(all[q]) {
					allBufs[q][i] = got[q]
				}
			}
		}
		tr := make([]Transfer, len(ops))
		sent := map[int]int{}
		recvd := map[int]int{}
		kOf := make([]int, len(ops))
		for i, op := range ops {
			tr[i] = Transfer{Recv: !op.send, Peer: op.peer, Buf: bufs[i] + guard, Bytes: op.bytes}
			if op.send {
				kOf[i] = sent[op.peer]
				sent[op.peer]++
			} else {
				kOf[i] = recvd[op.peer]
				recvd[op.peer]++
			}
			// Its match: the k-th transfer of the other direction at the peer.
			if direct || op.peer == me {
				k := 0
				for j, o := range all[op.peer] {
					if o.peer == me && o.send == !op.send {
						if k == kOf[i] {
							tr[i].PeerBuf = allBufs[op.peer][j] + guard
							break
						}
						k++
					}
				}
			}
		}
		fill := func(rnd int) {
			for i, op := range ops {
				b := bytes.Repeat([]byte{0xee}, int(op.bytes+2*guard))
				if op.send {
					copy(b[guard:], p2pBytes(me, op.peer, kOf[i], rnd, op.bytes))
				}
				r.put(bufs[i], b)
			}
		}
		check := func(rnd int) error {
			for i, op := range ops {
				got := r.get(bufs[i], op.bytes+2*guard)
				want := bytes.Repeat([]byte{0xee}, int(op.bytes+2*guard))
				if op.send {
					copy(want[guard:], p2pBytes(me, op.peer, kOf[i], rnd, op.bytes))
				} else {
					copy(want[guard:], p2pBytes(op.peer, me, kOf[i], rnd, op.bytes))
				}
				if !bytes.Equal(got, want) {
					return fmt.Errorf("round %d: transfer %d (send %v, peer %d, %d bytes) wrong", rnd, i, op.send, op.peer, op.bytes)
				}
			}
			return nil
		}
		a := Args{Func: FuncSendRecv, P2P: tr, Stream: r.s}
		// A wrong round is reported at the end: the peers' barriers of
		// the later rounds still meet.
		var bad error
		if graph {
			x, err := r.captureGraph(&a)
			if err != nil {
				return err
			}
			for rnd := range rounds {
				fill(rnd)
				r.w.bar.wait()
				if err := r.replay(x); err != nil {
					return err
				}
				r.w.bar.wait()
				bad = cmp.Or(bad, check(rnd))
			}
			// Replays back to back, nothing between them on the host: a
			// replay's first signals meet the words its predecessor's last
			// waits reset (B8).
			for range 6 {
				if err := r.rt.GraphLaunch(x, r.s); err != nil {
					return err
				}
			}
			r.syncStream()
			r.w.bar.wait()
			return cmp.Or(bad, check(rounds-1))
		}
		for rnd := range rounds {
			fill(rnd)
			r.w.bar.wait()
			if err := r.e.Launch(&a); err != nil {
				return err
			}
			r.syncStream()
			r.w.bar.wait()
			bad = cmp.Or(bad, check(rnd))
		}
		return bad
	})
}

// Every pattern, direct and staged, eager and captured, at 2 to 4 ranks:
// a batch's transfers meet their matches in issue order, pieces larger
// than the staging slot (4 KiB at 2 ranks: 2 KiB pieces) move in rounds,
// and sends to this rank are local copies.
func TestP2PBatches(t *testing.T) {
	worlds := []struct {
		name string
		o    func(n int) worldOpts
	}{
		{"plain", func(int) worldOpts { return worldOpts{} }},
		{"chaos", func(n int) worldOpts { return worldOpts{chaos: int64(30 + n)} }},
		{"onedevice-chaos", func(n int) worldOpts { return worldOpts{chaos: int64(40 + n), devices: 1} }},
		// Eager signals as copies of a local word (B5), with the receives
		// on the side stream (a device each): the two streams' signals
		// must not share that word.
		{"copyflags-chaos", func(n int) worldOpts {
			return worldOpts{chaos: int64(50 + n), caps: &hip.Caps{BatchCopy: true, CopyAttributes: true, PeerWriteValue: false}}
		}},
	}
	for _, wo := range worlds {
		for _, n := range []int{2, 3, 4} {
			for _, pt := range p2pPatterns(0, 7, 3000) {
				for _, direct := range []bool{false, true} {
					for _, graph := range []bool{false, true} {
						t.Run(fmt.Sprintf("%s/n%d/%s/direct=%v/graph=%v", wo.name, n, pt.name, direct, graph), func(t *testing.T) {
							runP2P(t, newWorld(t, n, wo.o(n)), pt, direct, graph, 3)
						})
					}
				}
			}
		}
	}
}

// Separate calls (a batch of one transfer each, as ungrouped ncclSend and
// ncclRecv) match in issue order across calls, beside collectives and
// graph replays of batches on the same pair, eagerly and under chaos: the
// pair's eager counters and its graph words never mix.
func TestP2PSeparateCalls(t *testing.T) {
	for _, chaos := range []int64{0, 51} {
		w := newWorld(t, 2, worldOpts{chaos: chaos})
		w.run(testCfg(), 30*time.Second, false, func(r *rankEnv) error {
			me, peer := r.rank, 1-r.rank
			sizes := []uintptr{5, 2500, 0, 1024}
			buf := r.alloc(4096)
			one := func(k int, sz uintptr) Args {
				return Args{Func: FuncSendRecv, Stream: r.s, P2P: []Transfer{{Recv: me == 1, Peer: peer, Buf: buf, Bytes: sz}}}
			}
			g := one(9, 700)
			x, err := r.captureGraph(&g)
			if err != nil {
				return err
			}
			ag := Args{Func: FuncAllGather, Datatype: 0, Count: 64, EltSize: 1, Send: r.alloc(64), Recv: r.alloc(128), Stream: r.s}
			for k, sz := range sizes {
				if me == 0 {
					r.put(buf, p2pBytes(0, 1, k, 0, 4096))
				} else {
					r.put(buf, bytes.Repeat([]byte{0xee}, 4096))
				}
				a := one(k, sz)
				if err := r.e.Launch(&a); err != nil {
					return err
				}
				if err := r.e.Launch(&ag); err != nil {
					return err
				}
				if k%2 == 1 {
					if err := r.rt.GraphLaunch(x, r.s); err != nil { // 700 bytes more, the same way
						return err
					}
				}
				r.syncStream()
				if me == 1 {
					got := r.get(buf, 4096)
					want := p2pBytes(0, 1, k, 0, 4096)
					n := sz
					if k%2 == 1 {
						n = max(n, 700)
					}
					if !bytes.Equal(got[:n], want[:n]) || !bytes.Equal(got[n:], bytes.Repeat([]byte{0xee}, int(4096-n))) {
						return fmt.Errorf("call %d (%d bytes): wrong bytes", k, sz)
					}
				}
				r.w.bar.wait()
			}
			return nil
		})
	}
}

// In place, staged: a receive may share its buffer with a send only where
// each of its pieces lands after the send read it: the send's pieces come
// in the same rounds or earlier. A send queued behind another on its
// channel starts later than a receive first on its own: refused.
func TestP2PInPlaceRounds(t *testing.T) {
	w := newWorld(t, 2, worldOpts{})
	w.run(testCfg(), 30*time.Second, false, func(r *rankEnv) error {
		if r.rank != 0 {
			return nil
		}
		const big = 10 << 10 // several pieces
		x, other := r.alloc(big), r.alloc(big)
		first := []Transfer{{Peer: 1, Buf: x, Bytes: big}, {Recv: true, Peer: 1, Buf: x, Bytes: big}}
		if _, err := r.e.Prepare(&Args{Func: FuncSendRecv, P2P: first, Stream: r.s}); err != nil {
			return fmt.Errorf("a send and a receive, each first on its channel, in place: %v", err)
		}
		late := []Transfer{{Peer: 1, Buf: other, Bytes: big}, {Peer: 1, Buf: x, Bytes: big}, {Recv: true, Peer: 1, Buf: x, Bytes: big}}
		_, err := r.e.Prepare(&Args{Func: FuncSendRecv, P2P: late, Stream: r.s})
		if result.Of(err) != result.InvalidUsage || !strings.Contains(err.Error(), "shares bytes") {
			return fmt.Errorf("a send behind another, in place with a receive first on its channel: got %v, want ncclInvalidUsage", err)
		}
		return nil
	})
}

// Several batches captured into one graph (as a training step or
// cecoll-perf -G captures them), replayed back to back, at 3 and 4 ranks,
// under chaos: rings staged over several rounds and direct, and a
// receive in place over its own send, every receive checked after each
// replay. Every rank on one device, captured transfers go through pairs
// and the graph holds no write-value; on a device each, through graph
// words that their waiters reset.
func TestP2PGraphOfBatches(t *testing.T) {
	const batches, replays = 5, 3
	for _, devices := range []int{1, 0} {
		for _, n := range []int{3, 4} {
			t.Run(fmt.Sprintf("devices=%d/n%d", devices, n), func(t *testing.T) {
				recs := make([]*recRT, n)
				w := newWorld(t, n, worldOpts{chaos: int64(60 + n + devices), devices: devices, wrap: func(rank int, rt hip.Runtime) hip.Runtime {
					recs[rank] = &recRT{Runtime: rt}
					return recs[rank]
				}})
				w.run(testCfg(), 60*time.Second, false, func(r *rankEnv) error {
					me := r.rank
					next, prev := (me+1)%n, (me-1+n)%n
					size := func(b int) uintptr { return uintptr(700 + 1900*b) } // up to 8300 bytes: several pieces
					var calls []*Args
					var sends, recvs []hip.DevicePtr
					for b := range batches {
						sz := size(b)
						sb, rb := r.alloc(sz), r.alloc(sz)
						if b == 3 {
							rb = sb // in place: the receive overwrites what the send reads
						}
						sends, recvs = append(sends, sb), append(recvs, rb)
						tr := []Transfer{{Peer: next, Buf: sb, Bytes: sz}, {Recv: true, Peer: prev, Buf: rb, Bytes: sz}}
						calls = append(calls, &Args{Func: FuncSendRecv, P2P: tr, Stream: r.s})
					}
					// Batch 1 direct: each side knows its match's buffer
					// (every rank exchanges every batch's).
					for b := range batches {
						gotR, gotS := r.exchange(recvs[b]), r.exchange(sends[b])
						if b == 1 {
							calls[b].P2P[0].PeerBuf, calls[b].P2P[1].PeerBuf = gotR[next], gotS[prev]
						}
					}
					before := len(recs[me].batches)
					x, err := r.captureGraph(calls...)
					if err != nil {
						return err
					}
					writes := 0
					for _, bt := range recs[me].batches[before:] {
						for _, op := range bt {
							if op.Op == hip.MemOpWriteValue32 {
								writes++
							}
						}
					}
					if (devices == 1) != (writes == 0) {
						return fmt.Errorf("%d write-values captured with every rank on %d device(s)", writes, max(devices, n))
					}
					var bad error
					for rnd := range replays {
						for b := range batches {
							r.put(sends[b], p2pBytes(me, next, b, rnd, size(b)))
						}
						r.w.bar.wait()
						if err := r.replay(x); err != nil {
							return err
						}
						r.w.bar.wait()
						for b := range batches {
							if got := r.get(recvs[b], size(b)); !bytes.Equal(got, p2pBytes(prev, me, b, rnd, size(b))) {
								bad = cmp.Or(bad, fmt.Errorf("replay %d, batch %d (%d bytes): wrong bytes", rnd, b, size(b)))
							}
						}
						r.w.bar.wait()
					}
					return bad
				})
			})
		}
	}
}
