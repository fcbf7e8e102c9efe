package comm

// Config is the part of ncclConfig_t cecoll keeps, decoded by export.
// Fields the caller's header did not have, or left undefined, hold their
// defaults.
type Config struct {
	// Blocking false is accepted; cecoll still completes before returning.
	Blocking  bool
	CommName  string
	CTAPolicy int
	CTASet    bool // CTAPolicy was set (else NCCL_CTA_POLICY applies)
	// Raw is the caller's ncclConfig_t as it was given (its size bytes;
	// nil: none), for the real library in forward mode (pair.go).
	Raw []byte
	// Host, for tests, is the host name this rank reports at init (empty:
	// the machine's): ranks on several hosts forward everything.
	Host string
}

// DefaultConfig is what a NULL config means.
func DefaultConfig() Config { return Config{Blocking: true} }
