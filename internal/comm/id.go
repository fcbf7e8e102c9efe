package comm

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"

	"cecoll/internal/result"
)

// IDBytes is NCCL_UNIQUE_ID_BYTES.
const IDBytes = 128

// ID is ncclUniqueId: bytes 0-7 a magic, 8-15 a random secret (the
// rendezvous key), 16.. the root listener's address as a Linux struct
// sockaddr_in or sockaddr_in6 (family u16 little-endian, port big-endian);
// family 0 selects the in-process bootstrap.
type ID [IDBytes]byte

// idMagic is "cecollID" read little-endian: it tells a cecoll id from
// garbage or from another library's id.
const idMagic uint64 = 0x44496c6c6f636563

// NewID is ncclGetUniqueId: a fresh secret and the address of this
// process's bootstrap root listener (started on first use), which ranks in
// any process of the node reach over TCP (tcproot.go).
func NewID() (ID, error) {
	var id ID
	binary.LittleEndian.PutUint64(id[0:8], idMagic)
	if _, err := rand.Read(id[8:16]); err != nil {
		return id, result.Errorf(result.SystemError, "ncclGetUniqueId: random key: %w", err)
	}
	if err := newTCPID(&id); err != nil {
		return id, err
	}
	return id, nil
}

// key returns the rendezvous key, or InvalidArgument for a foreign id.
func (id *ID) key() (uint64, error) {
	if binary.LittleEndian.Uint64(id[0:8]) != idMagic {
		return 0, result.Errorf(result.InvalidArgument, "unique id was not made by ncclGetUniqueId (bad magic)")
	}
	if _, _, err := getSockaddr(id[16:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(id[8:16]), nil
}

// Derived ids (ncclCommShrink): ranks that cannot all meet (the excluded
// ones never call) make the same id each on its own, from the parent's id
// and a tag they agree on. It names the parent's root, which accepts the
// derived secret (tcproot.go); the parent's secret and the tag ride in
// bytes derivedOff.. of the id, for the hello.
const derivedOff = 64

// DerivedID is the id of a communicator made from parent with tag.
func DerivedID(parent *ID, tag uint64) ID {
	id := *parent
	ps := binary.LittleEndian.Uint64(parent[8:16])
	binary.LittleEndian.PutUint64(id[8:16], deriveSecret(ps, tag))
	binary.LittleEndian.PutUint64(id[derivedOff:], ps)
	binary.LittleEndian.PutUint64(id[derivedOff+8:], tag)
	return id
}

// derivation returns the parent secret and tag of a derived id (0, 0
// otherwise).
func (id *ID) derivation() (parent, tag uint64) {
	return binary.LittleEndian.Uint64(id[derivedOff:]), binary.LittleEndian.Uint64(id[derivedOff+8:])
}

func deriveSecret(parent, tag uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[0:], parent)
	binary.LittleEndian.PutUint64(b[8:], tag)
	sum := sha256.Sum256(b[:])
	return binary.LittleEndian.Uint64(sum[:8]) | 1 // never 0
}
