package bootstrap

import (
	"net"

	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"sync"

	"cecoll/internal/result"
)

// IDBytes is NCCL_UNIQUE_ID_BYTES.
const IDBytes = 128

// ID is ncclUniqueId: bytes 0-7 a magic, 8-15 a random key (the
// rendezvous key), 16-43 the root listener's address as a Linux struct
// sockaddr_in or sockaddr_in6 (family u16 little-endian, port big-endian;
// family 0 selects the in-process bootstrap), 48-63 the id's secret tag.
// An id of a given root address (commid.go) has a key and tag that follow
// from the address: no secret.
//
// The tag is an HMAC of the key under a random key of the id-making
// process (tagOf), so that process's bootstrap root recognises its ids
// without a table: an id costs it nothing until ranks arrive, and the tag
// a connection presents is compared in constant time.
type ID [IDBytes]byte

// idMagic is "cecollID" read little-endian: it tells a cecoll id from
// garbage or from another library's id.
const idMagic uint64 = 0x44496c6c6f636563

const (
	tagOff   = 48
	TagBytes = 16 // a secret's tag
)

// Secret is what a rank proves to the root and to its peers' fd sockets
// (internal/peermem): the id's key and its tag.
type Secret struct {
	Key uint64
	Tag [TagBytes]byte
}

// NewID is ncclGetUniqueId: with a root address given (CECOLL_COMM_ID,
// NCCL_COMM_ID), the id every process makes for it (commid.go); else a
// fresh one of this process's root (NewRandomID).
func NewID() (ID, error) {
	a, err := commIDAddr()
	if err != nil || a != nil {
		if err != nil {
			return ID{}, err
		}
		return newCommID(a), nil
	}
	return NewRandomID()
}

// NewRandomID is a fresh key, its tag, and the address of this process's
// bootstrap root listener (started on first use), which ranks in any
// process of the node reach over TCP (root.go).
func NewRandomID() (ID, error) {
	var id ID
	binary.LittleEndian.PutUint64(id[0:8], idMagic)
	if _, err := rand.Read(id[8:16]); err != nil {
		return id, result.Errorf(result.SystemError, "ncclGetUniqueId: random key: %w", err)
	}
	if err := newTCPID(&id); err != nil {
		return id, err
	}
	tag := tagOf(binary.LittleEndian.Uint64(id[8:16]))
	copy(id[tagOff:], tag[:])
	return id, nil
}

// Key returns the rendezvous key, or InvalidArgument for a foreign id.
func (id *ID) Key() (uint64, error) {
	if binary.LittleEndian.Uint64(id[0:8]) != idMagic {
		return 0, result.Errorf(result.InvalidArgument, "unique id was not made by ncclGetUniqueId (bad magic)")
	}
	if _, _, err := getSockaddr(id[16:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(id[8:16]), nil
}

// RootAddr is the address of the root the id names (false: an id of the
// in-process bootstrap).
func (id *ID) RootAddr() (*net.TCPAddr, bool) {
	a, ok, err := getSockaddr(id[16:])
	return a, ok && err == nil
}

// Secret is the id's secret.
func (id *ID) Secret() Secret {
	s := Secret{Key: binary.LittleEndian.Uint64(id[8:16])}
	copy(s.Tag[:], id[tagOff:])
	return s
}

// LocalID is an id of the in-process bootstrap naming rendezvous key key
// (the id a communicator of ncclCommInitAll was made from, for Shrink).
func LocalID(key uint64) ID {
	var id ID
	binary.LittleEndian.PutUint64(id[0:8], idMagic)
	binary.LittleEndian.PutUint64(id[8:16], key)
	return id
}

// macKey is this process's HMAC key for the tags of its ids.
var macKey = sync.OnceValue(func() []byte {
	k := make([]byte, 32)
	rand.Read(k) // never fails (crypto/rand since Go 1.24)
	return k
})

// tagOf is the tag of the id with key made by this process.
func tagOf(key uint64) [TagBytes]byte {
	m := hmac.New(sha256.New, macKey())
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], key)
	m.Write(b[:])
	var t [TagBytes]byte
	copy(t[:], m.Sum(nil))
	return t
}

// ours reports, in constant time, whether s names an id this process
// made, or is the id of the given address this process's rank 0 listens
// at (which has no secret to check).
func (s *Secret) ours() bool {
	want := tagOf(s.Key)
	if subtle.ConstantTimeCompare(s.Tag[:], want[:]) == 1 {
		return true
	}
	k := commIDRoot.key.Load()
	return k != 0 && s.Key == k && s.Tag == commIDTag(k)
}

// SameTag compares two tags in constant time.
func SameTag(a, b [TagBytes]byte) bool { return subtle.ConstantTimeCompare(a[:], b[:]) == 1 }

// Derived ids (ncclCommShrink): ranks that cannot all meet (the excluded
// ones never call) make the same id each on its own, from the parent's id
// and a tag they agree on. It names the parent's root and keeps the
// parent's secret tag; the parent's key and the derivation tag ride in
// bytes derivedOff.. of the id, for the hello, where the root proves the
// parent's secret and recomputes the derived key (hello.ours).
const derivedOff = 64

// DerivedID is the id of a communicator made from parent with tag. A
// parent that is itself derived passes on its own parent's key, with the
// tags chained, so that the key the root proves is always one it made.
func DerivedID(parent *ID, tag uint64) ID {
	id := *parent
	pk, ptag := parent.Derivation()
	if pk == 0 {
		pk = binary.LittleEndian.Uint64(parent[8:16])
	} else {
		tag = deriveKey(ptag, tag)
	}
	binary.LittleEndian.PutUint64(id[8:16], deriveKey(pk, tag))
	binary.LittleEndian.PutUint64(id[derivedOff:], pk)
	binary.LittleEndian.PutUint64(id[derivedOff+8:], tag)
	return id
}

// Derivation returns the parent key and tag of a derived id (0, 0
// otherwise).
func (id *ID) Derivation() (parent, tag uint64) {
	return binary.LittleEndian.Uint64(id[derivedOff:]), binary.LittleEndian.Uint64(id[derivedOff+8:])
}

func deriveKey(parent, tag uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[0:], parent)
	binary.LittleEndian.PutUint64(b[8:], tag)
	sum := sha256.Sum256(b[:])
	return binary.LittleEndian.Uint64(sum[:8]) | 1 // never 0
}
