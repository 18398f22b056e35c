package kvrt

// #include "kvrt_go.h"
import "C"

import (
	"runtime"
	"unsafe"
)

// BufferOptions configures Context.NewBuffer (kvrt_buffer_desc).
type BufferOptions struct {
	Size  uint64 // bytes, > 0
	Label string // debug name for Vulkan tools; may be empty
	// Exportable allocates memory that ExportMemory can hand to another
	// process or processor (KVRT_BUFFER_EXPORTABLE); ErrUnsupported where
	// the device cannot export memory.
	Exportable bool
}

// Buffer is device memory (kvrt_buffer), zeroed when created.
//
// Concurrency: kvrt's calls only read a buffer's handle, so a Buffer is safe
// for concurrent use: any number of goroutines may upload, download or pass it
// to other calls at once (kvrt.h, "Threading"); Close waits for those calls.
// The order in which concurrent work touches its bytes is the caller's to
// arrange.
type Buffer struct {
	ctx  *Context
	o    *objState
	size uint64
}

// NewBuffer creates a zeroed device buffer (kvrt_buffer_create). Safe for
// concurrent use.
func (c *Context) NewBuffer(opts BufferOptions) (*Buffer, error) {
	const op = "kvrt_buffer_create"
	g, err := c.lock(op)
	if err != nil {
		return nil, err
	}
	defer g.unlock()
	d := C.go_buffer_desc_init()
	d.size = C.uint64_t(opts.Size)
	if opts.Exportable {
		d.flags = C.KVRT_BUFFER_EXPORTABLE
	}
	if opts.Label != "" {
		cs := C.CString(opts.Label)
		defer C.free(unsafe.Pointer(cs))
		d.label = cs
	}
	var h C.kvrt_buffer
	if err := call(op, func() C.kvrt_result { return C.kvrt_buffer_create(c.handle(), &d, &h) }); err != nil {
		return nil, err
	}
	runtime.KeepAlive(c)
	o := &objState{h: unsafe.Pointer(h), what: "buffer",
		destroy: func(p unsafe.Pointer) { C.kvrt_buffer_destroy(C.kvrt_buffer(p)) }}
	c.s.register(o)
	b := &Buffer{ctx: c, o: o, size: opts.Size}
	runtime.AddCleanup(b, func(o *objState) { o.close() }, o)
	return b, nil
}

// Close destroys the buffer (kvrt_buffer_destroy); memory still used by
// submitted work is released when that work completes. Idempotent; always
// returns nil. The buffer of a static window (StaticWindow.Buffer) belongs to
// its cache: Close does nothing for it.
func (b *Buffer) Close() error {
	if b.o.borrowed {
		return nil
	}
	b.o.close()
	return nil
}

// Size returns the buffer's size in bytes.
func (b *Buffer) Size() uint64 { return b.size }

func (b *Buffer) handle() C.kvrt_buffer { return C.kvrt_buffer(b.o.h) }

// transfer uploads or downloads n bytes at p (Go memory, used only during
// the call).
func (b *Buffer) transfer(op string, offset uint64, p unsafe.Pointer, n uint64, up bool) error {
	g, err := lockObjs(op, b.o.ctx, b.o)
	if err != nil {
		return err
	}
	defer g.unlock()
	err = call(op, func() C.kvrt_result {
		if up {
			return C.kvrt_buffer_upload(b.handle(), C.uint64_t(offset), p, C.uint64_t(n))
		}
		return C.kvrt_buffer_download(b.handle(), C.uint64_t(offset), p, C.uint64_t(n))
	})
	runtime.KeepAlive(b)
	return err
}

// MemoryHandleType says how exported memory is handed over
// (kvrt_memory_handle_type).
type MemoryHandleType int32

const (
	// HandleOpaqueFD: a file descriptor of Vulkan's opaque type, imported by
	// another Vulkan instance on a device with the same device and driver
	// UUIDs.
	HandleOpaqueFD MemoryHandleType = C.KVRT_MEMORY_HANDLE_OPAQUE_FD
	// HandleDmaBuf: a Linux dma-buf, mapped by other processors and drivers
	// such as a DSP (devices with VK_EXT_external_memory_dma_buf).
	HandleDmaBuf MemoryHandleType = C.KVRT_MEMORY_HANDLE_DMA_BUF
)

// ExportedMemory is the allocation holding an exported byte
// (kvrt_exported_memory).
type ExportedMemory struct {
	// FD is a new file descriptor of the allocation; the caller closes it
	// (syscall.Close) or hands it to an importer that takes it.
	FD              int
	MemoryTypeIndex uint32 // the allocation's memory type (an opaque-fd import uses it)
	MemorySize      uint64 // the allocation's size in bytes
	Offset          uint64 // the byte asked for is at this offset in the allocation
	ContiguousBytes uint64 // bytes of the buffer that follow it there
	DeviceUUID      [16]byte
	DriverUUID      [16]byte
}

// ExportMemory exports the memory holding byte offset as a file descriptor
// (kvrt_buffer_export_memory), so that another process or processor maps the
// same bytes. The buffer must be Exportable, or be a static window's buffer
// of a cache with CacheOptions.Exportable.
func (b *Buffer) ExportMemory(offset uint64, t MemoryHandleType) (ExportedMemory, error) {
	const op = "kvrt_buffer_export_memory"
	g, err := lockObjs(op, b.o.ctx, b.o)
	if err != nil {
		return ExportedMemory{}, err
	}
	defer g.unlock()
	e := C.go_exported_memory_init()
	err = call(op, func() C.kvrt_result {
		return C.kvrt_buffer_export_memory(b.handle(), C.uint64_t(offset), C.kvrt_memory_handle_type(t), &e)
	})
	runtime.KeepAlive(b)
	if err != nil {
		return ExportedMemory{}, err
	}
	out := ExportedMemory{FD: int(e.fd), MemoryTypeIndex: uint32(e.memory_type_index),
		MemorySize: uint64(e.memory_size), Offset: uint64(e.offset), ContiguousBytes: uint64(e.contiguous_bytes)}
	for i := range out.DeviceUUID {
		out.DeviceUUID[i] = byte(e.device_uuid[i])
		out.DriverUUID[i] = byte(e.driver_uuid[i])
	}
	return out, nil
}

// Upload copies data into the buffer at offset (kvrt_buffer_upload), after
// the submitted work that uses the buffer.
func (b *Buffer) Upload(offset uint64, data []byte) error {
	return b.transfer("kvrt_buffer_upload", offset, slicePtr(data), uint64(len(data)), true)
}

// UploadF32 copies float32 values into the buffer at offset (bytes).
func (b *Buffer) UploadF32(offset uint64, data []float32) error {
	return b.transfer("kvrt_buffer_upload", offset, slicePtr(data), 4*uint64(len(data)), true)
}

// UploadF16 copies f16 values (IEEE binary16 bits) into the buffer at offset (bytes).
func (b *Buffer) UploadF16(offset uint64, data []uint16) error {
	return b.transfer("kvrt_buffer_upload", offset, slicePtr(data), 2*uint64(len(data)), true)
}

// Download fills out with the buffer's bytes from offset (kvrt_buffer_download),
// after the submitted work that uses the buffer.
func (b *Buffer) Download(offset uint64, out []byte) error {
	return b.transfer("kvrt_buffer_download", offset, slicePtr(out), uint64(len(out)), false)
}

// DownloadF32 fills out with float32 values from offset (bytes).
func (b *Buffer) DownloadF32(offset uint64, out []float32) error {
	return b.transfer("kvrt_buffer_download", offset, slicePtr(out), 4*uint64(len(out)), false)
}

// DownloadF16 fills out with f16 values (bits) from offset (bytes).
func (b *Buffer) DownloadF16(offset uint64, out []uint16) error {
	return b.transfer("kvrt_buffer_download", offset, slicePtr(out), 2*uint64(len(out)), false)
}

// slicePtr returns the address of a slice's first element, or nil when it is
// empty. Passing it to C is allowed for the duration of one call: the
// elements hold no Go pointers.
func slicePtr[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}
