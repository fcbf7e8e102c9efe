// Package param is cecoll's one registry of environment variables, in the
// spirit of NCCL's NCCL_PARAM: every variable the library reads is declared
// once, in params.go, with its default, the values it accepts, its parser,
// a one-line doc and a class (User: docs/environment.md's "What a user
// sets"; Tuning: docs/tuning.md, for tests and cecoll-perf; Host:
// docs/environment.md's "The host device"). Code reads a typed value:
//
//	limit := param.Timeout.Get()      // time.Duration
//	bytes := param.StagingBytes.Get() // uintptr
//
// No other package calls os.Getenv for a setting (a test walks the tree).
//
// # NCCL's twins
//
// Where NCCL has a variable for the same thing (NCCL_DEBUG, NCCL_DEBUG_SUBSYS,
// NCCL_DEBUG_FILE, NCCL_SOCKET_IFNAME, NCCL_SOCKET_FAMILY, NCCL_COMM_ID), both
// are declared here and the relation once (orElse): Get reads the CECOLL_
// variable, and its NCCL_ twin, with NCCL's meaning, only when the CECOLL_
// one is blank; From says which answered. A twin the real library owns in
// forward mode (NCCL_COMM_ID: unlessForwarding) stands in only while no
// real NCCL or RCCL is loaded (SetForwarding).
//
// # Values
//
// Get looks the variable up (a map read, no allocation) and parses its text
// only when that text differs from the last one parsed. In the library that
// is once per process: export copies the C environment into Go's once,
// before the first call, and nothing changes it after. Tests may
// t.Setenv freely; Reset also forgets the warnings given.
//
// A blank value (after trimming) is the default. A value that does not
// parse, or lies outside the accepted range, is never a crash: Get returns
// the default and a WARN line names the variable, the value and the
// default, once per process per variable. A few variables are strict
// (CECOLL_BACKEND and the host device's, and the root addresses
// CECOLL_COMM_ID and NCCL_COMM_ID): their readers refuse a bad value
// through Err instead, since running on another device, or meeting at
// another address, than the one asked for would mislead, so they give no
// warning.
//
// # Warnings and the log
//
// internal/log reads CECOLL_DEBUG, CECOLL_DEBUG_SUBSYS and CECOLL_DEBUG_FILE
// (and their twins) from here, so this package cannot import it. Warnings
// go to stderr until the log is set up; log's setup then routes them
// through the log (SetWarn). The export layer
// sets the log up right after copying the environment, so in the library
// only a bad CECOLL_DEBUG itself warns on plain stderr.
package param
