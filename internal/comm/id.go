package comm

import (
	"crypto/rand"
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
