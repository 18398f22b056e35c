package kvrt

// #include "kvrt_go.h"
import "C"

import (
	"cmp"
	"runtime"
	"slices"
	"time"
	"unsafe"
)

// StreamOptions configures Context.NewStream (kvrt_stream_desc). The zero
// value is a stream without timestamps.
type StreamOptions struct {
	// Timestamps records GPU timestamps around every operation, read with
	// Stream.Timings (KVRT_STREAM_TIMESTAMPS); without them Timings gives an
	// error matching ErrInvalidState.
	Timestamps bool
	// MaxTimings is the number of operations timed per submission; 0 = 256.
	MaxTimings uint32
	// Label is a debug name; may be empty.
	Label string
}

// Timing is the GPU time of one recorded operation (kvrt_timing).
type Timing struct {
	Label string        // names the operation, e.g. "fill"
	Time  time.Duration // between the operation's start and end stamps
}

// Stream records kvrt operations, submits them to the context's queue and
// waits for them (kvrt_stream):
//
//	s.Begin(); cache.Store(s, ...); cache.Attention(s, ...); s.Submit(); s.Wait(timeout)
//
// Concurrency: a Stream is safe for concurrent use; its calls are serialized
// (kvrt.h marks them Unsafe per stream). Calls of different streams of one
// context run in parallel. An open recording ties the stream to the caches
// and memories it recorded work for ("Threading": until it is submitted or
// dropped, a call on the stream must not overlap a call on those objects):
// Submit and Close therefore also lock those caches and memories.
type Stream struct {
	ctx *Context
	o   *objState
}

// NewStream creates a stream (kvrt_stream_create). Safe for concurrent use.
func (c *Context) NewStream(opts StreamOptions) (*Stream, error) {
	const op = "kvrt_stream_create"
	g, err := c.lock(op)
	if err != nil {
		return nil, err
	}
	defer g.unlock()
	d := C.go_stream_desc_init()
	if opts.Timestamps {
		d.flags |= C.KVRT_STREAM_TIMESTAMPS
	}
	d.max_timings = C.uint32_t(opts.MaxTimings)
	if opts.Label != "" {
		cs := C.CString(opts.Label)
		defer C.free(unsafe.Pointer(cs))
		d.label = cs
	}
	var h C.kvrt_stream
	if err := call(op, func() C.kvrt_result { return C.kvrt_stream_create(c.handle(), &d, &h) }); err != nil {
		return nil, err
	}
	runtime.KeepAlive(c)
	o := &objState{h: unsafe.Pointer(h), what: "stream", exclusive: true,
		destroy: func(p unsafe.Pointer) { C.kvrt_stream_destroy(C.kvrt_stream(p)) }}
	c.s.register(o)
	s := &Stream{ctx: c, o: o}
	runtime.AddCleanup(s, func(o *objState) { o.closeStream() }, o)
	return s, nil
}

func (s *Stream) handle() C.kvrt_stream { return C.kvrt_stream(s.o.h) }

// tie records that the open recording uses o; called with the stream locked.
func (s *Stream) tie(o *objState) {
	st := s.o
	st.tiedMu.Lock()
	defer st.tiedMu.Unlock()
	i, found := slices.BinarySearchFunc(st.tied, o.id, func(t *objState, id uint64) int { return cmp.Compare(t.id, id) })
	if !found {
		st.tied = slices.Insert(st.tied, i, o)
	}
}

// lockTied locks the context, the objects tied to the recording, then the
// stream; it retries while the tied set grows between snapshot and locking.
func (st *objState) lockTied(op string) (*guard, error) {
	for {
		st.tiedMu.Lock()
		tied := slices.Clone(st.tied)
		st.tiedMu.Unlock()
		g, err := lockObjsOpt(op, st.ctx, len(tied), append(tied, st)...)
		if err != nil {
			return nil, err
		}
		st.tiedMu.Lock()
		same := len(tied) == len(st.tied)
		st.tiedMu.Unlock()
		if same {
			return g, nil
		}
		g.unlock()
	}
}

func (st *objState) untieAll() {
	st.tiedMu.Lock()
	st.tied = nil
	st.tiedMu.Unlock()
}

// closeStream destroys a stream under the locks of the objects its open
// recording uses (destroying drops the recording and rolls back their
// metadata). Idempotent.
func (st *objState) closeStream() {
	g, err := st.lockTied("kvrt_stream_destroy")
	if err != nil {
		return // closed already, or with its context
	}
	h := st.h
	st.h = nil
	C.kvrt_stream_destroy(C.kvrt_stream(h))
	g.unlock()
	st.untieAll()
	st.ctx.childMu.Lock()
	delete(st.ctx.children, st)
	st.ctx.childMu.Unlock()
}

// Close destroys the stream (kvrt_stream_destroy): submitted work finishes on
// its own, an open recording is dropped and rolled back. Idempotent; always
// returns nil.
func (s *Stream) Close() error {
	s.o.closeStream()
	runtime.KeepAlive(s)
	return nil
}

// simple runs one call that uses only the stream.
func (s *Stream) simple(op string, f func(h C.kvrt_stream) C.kvrt_result) error {
	g, err := lockObjs(op, s.o.ctx, s.o)
	if err != nil {
		return err
	}
	defer g.unlock()
	err = call(op, func() C.kvrt_result { return f(s.handle()) })
	runtime.KeepAlive(s)
	return err
}

// Begin starts recording (kvrt_stream_begin).
func (s *Stream) Begin() error {
	return s.simple("kvrt_stream_begin", func(h C.kvrt_stream) C.kvrt_result { return C.kvrt_stream_begin(h) })
}

// Submit ends the recording and submits it (kvrt_stream_submit). On failure
// the recording is dropped and what it changed rolled back.
func (s *Stream) Submit() error {
	const op = "kvrt_stream_submit"
	g, err := s.o.lockTied(op)
	if err != nil {
		return err
	}
	// Submitted or dropped: either way the recording is closed.
	err = call(op, func() C.kvrt_result { return C.kvrt_stream_submit(s.handle()) })
	s.o.untieAll()
	g.unlock()
	runtime.KeepAlive(s)
	return err
}

// Wait waits up to timeout for the last submission (kvrt_stream_wait); 0
// polls. An error matching ErrTimeout means it has not completed yet.
func (s *Stream) Wait(timeout time.Duration) error {
	ns := uint64(0)
	if timeout > 0 {
		ns = uint64(timeout.Nanoseconds())
	}
	return s.simple("kvrt_stream_wait", func(h C.kvrt_stream) C.kvrt_result { return C.kvrt_stream_wait(h, C.uint64_t(ns)) })
}

// Timings returns the GPU time of each operation of the last submission, in
// recording order, after a successful Wait on a stream with Timestamps
// (kvrt_stream_get_timings).
func (s *Stream) Timings() ([]Timing, error) {
	const op = "kvrt_stream_get_timings"
	var out []Timing
	err := s.simple(op, func(h C.kvrt_stream) C.kvrt_result {
		var count C.uint32_t
		if r := C.kvrt_stream_get_timings(h, nil, &count); r != C.KVRT_SUCCESS || count == 0 {
			return r
		}
		arr := (*C.kvrt_timing)(C.calloc(C.size_t(count), C.size_t(unsafe.Sizeof(C.kvrt_timing{}))))
		defer C.free(unsafe.Pointer(arr))
		ts := unsafe.Slice(arr, int(count))
		for i := range ts {
			ts[i] = C.go_timing_init()
		}
		r := C.kvrt_stream_get_timings(h, arr, &count)
		if r == C.KVRT_SUCCESS {
			for _, t := range ts[:int(count)] {
				out = append(out, Timing{Label: C.GoString(t.label), Time: time.Duration(t.ns)})
			}
		}
		return r
	})
	return out, err
}

// Fill records a kernel that writes the 32-bit value over size bytes of buf
// from offset (kvrt_cmd_fill); offset and size are multiples of 4.
func (s *Stream) Fill(buf *Buffer, offset, size uint64, value uint32) error {
	const op = "kvrt_cmd_fill"
	if buf == nil {
		return argError(op, "nil buffer")
	}
	g, err := lockObjs(op, s.o.ctx, s.o, buf.o)
	if err != nil {
		return err
	}
	defer g.unlock()
	err = call(op, func() C.kvrt_result {
		return C.kvrt_cmd_fill(s.handle(), buf.handle(), C.uint64_t(offset), C.uint64_t(size), C.uint32_t(value))
	})
	runtime.KeepAlive(s)
	runtime.KeepAlive(buf)
	return err
}

// Copy records a kernel that copies size bytes from src at srcOffset to dst
// at dstOffset (kvrt_cmd_copy); offsets and size are multiples of 4.
func (s *Stream) Copy(src *Buffer, srcOffset uint64, dst *Buffer, dstOffset, size uint64) error {
	const op = "kvrt_cmd_copy"
	if src == nil || dst == nil {
		return argError(op, "nil buffer")
	}
	g, err := lockObjs(op, s.o.ctx, s.o, src.o, dst.o)
	if err != nil {
		return err
	}
	defer g.unlock()
	err = call(op, func() C.kvrt_result {
		return C.kvrt_cmd_copy(s.handle(), src.handle(), C.uint64_t(srcOffset), dst.handle(),
			C.uint64_t(dstOffset), C.uint64_t(size))
	})
	runtime.KeepAlive(s)
	runtime.KeepAlive(src)
	runtime.KeepAlive(dst)
	return err
}
