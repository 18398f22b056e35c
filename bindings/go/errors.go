package kvrt

// #include "kvrt_go.h"
import "C"

import (
	"fmt"
	"runtime"
)

// Code is a kvrt_result: 0 for success, a negative value for an error. Each
// error code is also an error value (the sentinels ErrInvalidArgument, ...),
// and every *Error unwraps to its Code, so errors.Is(err, ErrCacheFull)
// works on what any function of this package returns.
type Code int32

// Error returns the library's name and description of the code
// (kvrt_result_string).
func (c Code) Error() string {
	return C.GoString(C.kvrt_result_string(C.kvrt_result(c)))
}

// The result codes of kvrt.h, pinned forever. Use them with errors.Is.
const (
	// ErrInvalidArgument: an argument is NULL where it may not be, out of
	// range, or inconsistent (also: a Go slice of the wrong length).
	ErrInvalidArgument Code = C.KVRT_ERROR_INVALID_ARGUMENT
	// ErrInvalidHandle: a handle is NULL, already destroyed, or not of the
	// expected kind (also: a closed Go object, or one whose Context was closed).
	ErrInvalidHandle Code = C.KVRT_ERROR_INVALID_HANDLE
	// ErrOutOfHostMemory: a host allocation failed.
	ErrOutOfHostMemory Code = C.KVRT_ERROR_OUT_OF_HOST_MEMORY
	// ErrOutOfDeviceMemory: a device allocation failed, or the request exceeds
	// what the device has.
	ErrOutOfDeviceMemory Code = C.KVRT_ERROR_OUT_OF_DEVICE_MEMORY
	// ErrDeviceLost: the Vulkan device was lost; the context must be closed.
	ErrDeviceLost Code = C.KVRT_ERROR_DEVICE_LOST
	// ErrTimeout: a wait ran past its timeout; the work may still complete.
	ErrTimeout Code = C.KVRT_ERROR_TIMEOUT
	// ErrCacheFull: the cache has no room for the request; nothing changed.
	ErrCacheFull Code = C.KVRT_ERROR_CACHE_FULL
	// ErrUnsupported: the device, driver or build lacks something needed.
	ErrUnsupported Code = C.KVRT_ERROR_UNSUPPORTED
	// ErrCorruptState: saved state is malformed, truncated or fails its checksum.
	ErrCorruptState Code = C.KVRT_ERROR_CORRUPT_STATE
	// ErrIO: a file could not be read or written.
	ErrIO Code = C.KVRT_ERROR_IO
	// ErrInvalidState: the object is not in a state that allows the call (for
	// example, submitting a stream that is not recording).
	ErrInvalidState Code = C.KVRT_ERROR_INVALID_STATE
	// ErrInternal: an unexpected internal failure; the message says where.
	ErrInternal Code = C.KVRT_ERROR_INTERNAL
)

// Error is a failed kvrt call: the function, its result code and the
// library's detail message (kvrt_last_error_message, read on the thread of
// the failing call).
type Error struct {
	Op      string // the kvrt function, e.g. "kvrt_cache_store"
	Code    Code   // the result code
	Message string // the detail message; may be empty
}

// Error formats the error as "op: KVRT_ERROR_...: message".
func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%s: %s", e.Op, e.Code.Error())
	}
	return fmt.Sprintf("%s: %s: %s", e.Op, e.Code.Error(), e.Message)
}

// Unwrap returns the Code, so that errors.Is(err, ErrCacheFull) holds.
func (e *Error) Unwrap() error { return e.Code }

// call runs f (one kvrt call) with the goroutine locked to its OS thread, and
// reads the thread-local detail message right after a failure.
func call(op string, f func() C.kvrt_result) error {
	runtime.LockOSThread()
	r := f()
	if r == C.KVRT_SUCCESS {
		runtime.UnlockOSThread()
		return nil
	}
	msg := C.GoString(C.kvrt_last_error_message())
	runtime.UnlockOSThread()
	return &Error{Op: op, Code: Code(r), Message: msg}
}

// argError reports a bad argument found on the Go side, before any C call.
func argError(op, format string, args ...any) error {
	return &Error{Op: op, Code: ErrInvalidArgument, Message: fmt.Sprintf(format, args...)}
}

// closedError reports a call on a closed object.
func closedError(op, what string) error {
	return &Error{Op: op, Code: ErrInvalidHandle, Message: what + " is closed"}
}
