// Package result carries NCCL result classes through Go errors, so that
// export/ can map any error of internal/ to an ncclResult_t in one place.
package result

import (
	"errors"
	"fmt"

	"cecoll/internal/hip"
)

// Code is ncclResult_t.
type Code int32

const (
	Success            Code = 0
	UnhandledCudaError Code = 1
	SystemError        Code = 2
	InternalError      Code = 3
	InvalidArgument    Code = 4
	InvalidUsage       Code = 5
	RemoteError        Code = 6
	InProgress         Code = 7
)

// Error is an error with an NCCL result class.
type Error struct {
	Code Code
	Msg  string // the whole text, cause included
	Err  error  // wrapped cause, may be nil
}

func (e *Error) Error() string { return e.Msg }

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error of class c. A %w verb in format becomes its cause.
func Errorf(c Code, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &Error{Code: c, Msg: err.Error(), Err: errors.Unwrap(err)}
}

// Of classifies err: the Code of the outermost *Error it wraps; a runtime
// hip.Error alone is UnhandledCudaError; anything else InternalError.
func Of(err error) Code {
	if err == nil {
		return Success
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var he hip.Error
	if errors.As(err, &he) {
		return UnhandledCudaError
	}
	return InternalError
}
