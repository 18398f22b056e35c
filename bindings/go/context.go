package kvrt

// #include "kvrt_go.h"
import "C"

import (
	"runtime"
	"runtime/cgo"
	"time"
	"unsafe"
)

// LogLevel is the severity of a log message (kvrt_log_level).
type LogLevel int32

// The log levels, lowest first.
const (
	LogDefault LogLevel = C.KVRT_LOG_LEVEL_DEFAULT // as a threshold: LogWarn
	LogDebug   LogLevel = C.KVRT_LOG_LEVEL_DEBUG
	LogInfo    LogLevel = C.KVRT_LOG_LEVEL_INFO
	LogWarn    LogLevel = C.KVRT_LOG_LEVEL_WARN
	LogError   LogLevel = C.KVRT_LOG_LEVEL_ERROR
	LogNone    LogLevel = C.KVRT_LOG_LEVEL_NONE // as a threshold: nothing
)

// String returns the level's lowercase name.
func (l LogLevel) String() string {
	switch l {
	case LogDebug:
		return "debug"
	case LogInfo:
		return "info"
	case LogWarn:
		return "warn"
	case LogError:
		return "error"
	case LogNone:
		return "none"
	}
	return "default"
}

// LogFunc receives the log messages of a context. It may be called from any
// thread that calls into the context and from the driver's threads, from
// several at once, sometimes with kvrt's own locks held: it must be safe for
// concurrent use, return quickly, and must not call any function of this
// package. A panic in it is recovered and dropped.
type LogFunc func(level LogLevel, message string)

// ContextOptions configures NewContext (kvrt_context_desc). The zero value
// gives the defaults of KVRT_CONTEXT_DESC_INIT: the default device, no log,
// a 60 s wait timeout.
type ContextOptions struct {
	// Validation enables the Khronos validation layer (KVRT_CONTEXT_VALIDATION);
	// creation fails with ErrUnsupported when it is not installed. The
	// environment variable KVRT_VALIDATION=1 enables it too.
	Validation bool
	// ForceStaging never maps device memory (KVRT_CONTEXT_FORCE_STAGING).
	ForceStaging bool
	// PortableKernels uses the fallback kernels (KVRT_CONTEXT_PORTABLE_KERNELS).
	PortableKernels bool
	// ShuffleKernels forces the subgroup-shuffle kernels, also on CPU drivers
	// (KVRT_CONTEXT_SHUFFLE_KERNELS); NewContext fails with ErrUnsupported on a
	// device without them. KVRT_KERNELS=portable|shuffle|tiled|auto in the
	// environment chooses only when none of these options is set.
	ShuffleKernels bool
	// TiledKernels runs every attention call with the kernel that loads K/V
	// tiles into shared memory once per workgroup of query rows
	// (KVRT_CONTEXT_TILED_KERNELS); it excludes the two options above.
	TiledKernels bool
	// Device picks the device: a decimal index in Devices order, or a
	// case-insensitive substring of the name; "" leaves the choice to kvrt
	// (KVRT_DEVICE in the environment, else the default). A device given here
	// stands whatever KVRT_DEVICE says.
	Device string
	// Log receives the context's log messages at LogLevel and above; nil
	// drops them.
	Log LogFunc
	// LogLevel is the lowest level delivered; LogDefault means LogWarn.
	LogLevel LogLevel
	// WaitTimeout limits the waits the library does on its own; 0 = 60 s.
	WaitTimeout time.Duration
	// MaxBindingBytes caps the storage-buffer bindings kvrt uses; 0 = the
	// device's limit.
	MaxBindingBytes uint64
	// PipelineCache is data from an earlier Context.PipelineCache, copied
	// during creation; nil for none.
	PipelineCache []byte
}

// Context is a Vulkan device with kvrt's kernels (kvrt_context). Every other
// object is created from one.
//
// Concurrency: a Context is safe for concurrent use, and so is using its
// objects on different goroutines at the same time, each as its own type
// documents (kvrt.h, "Threading": objects of one context may be used on
// different threads at once; the functions that create objects from the
// context or read it are Safe).
//
// Lifetime: Close destroys the context and, as the C library does, every
// Buffer, Stream, Cache and Memory created from it. Close first waits for the
// calls in progress on the context and its objects to return; afterwards
// those objects' Close returns nil and their other methods return an error
// that matches ErrInvalidHandle. Objects keep their Context reachable, so the
// garbage collector never destroys a context whose objects are in use; a
// Context that becomes unreachable without Close is destroyed by a cleanup.
type Context struct {
	s *ctxState
}

//export kvrtGoLog
func kvrtGoLog(handle C.uintptr_t, level C.int, message *C.char) {
	defer func() { _ = recover() }()
	if handle == 0 || message == nil {
		return
	}
	f, ok := cgo.Handle(handle).Value().(LogFunc)
	if !ok || f == nil {
		return
	}
	f(LogLevel(level), C.GoString(message))
}

// NewContext creates a context on the device opts.Device names
// (kvrt_context_create).
func NewContext(opts ContextOptions) (*Context, error) {
	d := C.go_context_desc_init()
	var flags C.kvrt_flags
	if opts.Validation {
		flags |= C.KVRT_CONTEXT_VALIDATION
	}
	if opts.ForceStaging {
		flags |= C.KVRT_CONTEXT_FORCE_STAGING
	}
	if opts.ShuffleKernels {
		flags |= C.KVRT_CONTEXT_SHUFFLE_KERNELS
	}
	if opts.PortableKernels {
		flags |= C.KVRT_CONTEXT_PORTABLE_KERNELS
	}
	if opts.TiledKernels {
		flags |= C.KVRT_CONTEXT_TILED_KERNELS
	}
	d.flags = flags
	if opts.Device != "" {
		cs := C.CString(opts.Device)
		defer C.free(unsafe.Pointer(cs))
		d.device = cs
	}
	d.log_level = C.kvrt_log_level(opts.LogLevel)
	if opts.WaitTimeout > 0 {
		d.wait_timeout_ns = C.uint64_t(opts.WaitTimeout.Nanoseconds())
	}
	d.max_binding_bytes = C.uint64_t(opts.MaxBindingBytes)

	var pins runtime.Pinner
	defer pins.Unpin()
	pc := C.go_pipeline_cache_desc_init()
	if len(opts.PipelineCache) > 0 {
		pins.Pin(&opts.PipelineCache[0])
		pc.data = unsafe.Pointer(&opts.PipelineCache[0])
		pc.size = C.uint64_t(len(opts.PipelineCache))
		pins.Pin(&pc)
		C.go_chain(&d.next, unsafe.Pointer(&pc))
	}

	s := &ctxState{children: make(map[*objState]struct{})}
	var logh cgo.Handle
	if opts.Log != nil {
		logh = cgo.NewHandle(opts.Log)
		s.logh = uintptr(logh)
		C.go_set_log(&d, C.uintptr_t(logh))
	}
	var h C.kvrt_context
	err := call("kvrt_context_create", func() C.kvrt_result { return C.kvrt_context_create(&d, &h) })
	if err != nil {
		if logh != 0 {
			logh.Delete()
		}
		return nil, err
	}
	s.h = unsafe.Pointer(h)
	c := &Context{s: s}
	runtime.AddCleanup(c, func(s *ctxState) { s.destroy() }, s)
	return c, nil
}

// destroy invalidates every object of the context, then destroys it. Idempotent.
func (s *ctxState) destroy() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == nil {
		return
	}
	s.childMu.Lock()
	for o := range s.children {
		o.mu.Lock()
		o.h = nil
		o.mu.Unlock()
	}
	s.children = map[*objState]struct{}{}
	s.childMu.Unlock()
	C.kvrt_context_destroy(C.kvrt_context(s.h))
	s.h = nil
	if s.logh != 0 {
		cgo.Handle(s.logh).Delete()
		s.logh = 0
	}
}

// Close destroys the context and every object created from it
// (kvrt_context_destroy), after waiting for the calls in progress on them and
// for the device's work. It is idempotent and always returns nil.
func (c *Context) Close() error {
	c.s.destroy()
	return nil
}

func (c *Context) lock(op string) (*guard, error) { return lockObjs(op, c.s) }

func (c *Context) handle() C.kvrt_context { return C.kvrt_context(c.s.h) }

// DeviceType is the kind of a device (kvrt_device_type).
type DeviceType int32

// The device types.
const (
	DeviceOther         DeviceType = C.KVRT_DEVICE_TYPE_OTHER
	DeviceIntegratedGPU DeviceType = C.KVRT_DEVICE_TYPE_INTEGRATED_GPU
	DeviceDiscreteGPU   DeviceType = C.KVRT_DEVICE_TYPE_DISCRETE_GPU
	DeviceVirtualGPU    DeviceType = C.KVRT_DEVICE_TYPE_VIRTUAL_GPU
	DeviceCPU           DeviceType = C.KVRT_DEVICE_TYPE_CPU
)

// Device feature bits of DeviceInfo.Features (kvrt_device_feature_bits).
const (
	FeatureShaderFloat16 uint32 = C.KVRT_DEVICE_FEATURE_SHADER_FLOAT16
	FeatureShaderInt8    uint32 = C.KVRT_DEVICE_FEATURE_SHADER_INT8
	FeatureShaderInt16   uint32 = C.KVRT_DEVICE_FEATURE_SHADER_INT16
	FeatureStorage16Bit  uint32 = C.KVRT_DEVICE_FEATURE_STORAGE_16BIT
	FeatureStorage8Bit   uint32 = C.KVRT_DEVICE_FEATURE_STORAGE_8BIT
	FeatureTimestamps    uint32 = C.KVRT_DEVICE_FEATURE_TIMESTAMPS
	FeatureUnifiedMemory uint32 = C.KVRT_DEVICE_FEATURE_UNIFIED_MEMORY
	FeatureShaderInt64   uint32 = C.KVRT_DEVICE_FEATURE_SHADER_INT64
)

// DeviceInfo describes a device (kvrt_device_info).
type DeviceInfo struct {
	Index                   uint32     // index in Devices order
	Type                    DeviceType // kind of device
	Name                    string     // e.g. "llvmpipe (LLVM 15.0.6, 256 bits)"
	DriverName              string     // e.g. "llvmpipe"; "" if unknown
	DriverInfo              string     // e.g. "Mesa 22.3.6"; "" if unknown
	VendorID                uint32     // PCI vendor id
	DeviceID                uint32     // device id
	APIVersion              uint32     // Vulkan version, VK_MAKE_API_VERSION packing
	DriverVersion           uint32     // driver version
	Features                uint32     // Feature* bits
	SubgroupOps             uint32     // kvrt_subgroup_op_bits of the compute stage
	SubgroupSize            uint32     // subgroup size
	MaxSharedMemoryBytes    uint32     // shared memory per workgroup
	MaxWorkgroupInvocations uint32     // invocations per workgroup
	MaxPushConstantsBytes   uint32     // push constant bytes
	MaxStorageBufferRange   uint64     // largest storage-buffer binding, bytes
	MaxMemoryAllocationSize uint64     // largest single allocation, bytes
	DeviceLocalBytes        uint64     // size of the largest device-local heap
	TimestampPeriodNs       float32    // nanoseconds per timestamp tick
}

func deviceInfoFromC(r *C.kvrt_device_info) DeviceInfo {
	return DeviceInfo{
		Index:                   uint32(r.index),
		Type:                    DeviceType(r.device_type),
		Name:                    C.GoString(&r.name[0]),
		DriverName:              C.GoString(&r.driver_name[0]),
		DriverInfo:              C.GoString(&r.driver_info[0]),
		VendorID:                uint32(r.vendor_id),
		DeviceID:                uint32(r.device_id),
		APIVersion:              uint32(r.api_version),
		DriverVersion:           uint32(r.driver_version),
		Features:                uint32(r.features),
		SubgroupOps:             uint32(r.subgroup_ops),
		SubgroupSize:            uint32(r.subgroup_size),
		MaxSharedMemoryBytes:    uint32(r.max_shared_memory_bytes),
		MaxWorkgroupInvocations: uint32(r.max_workgroup_invocations),
		MaxPushConstantsBytes:   uint32(r.max_push_constants_bytes),
		MaxStorageBufferRange:   uint64(r.max_storage_buffer_range),
		MaxMemoryAllocationSize: uint64(r.max_memory_allocation_size),
		DeviceLocalBytes:        uint64(r.device_local_bytes),
		TimestampPeriodNs:       float32(r.timestamp_period_ns),
	}
}

// Devices lists the Vulkan devices kvrt can use (kvrt_enumerate_devices).
// Safe for concurrent use.
func Devices() ([]DeviceInfo, error) {
	for {
		var count C.uint32_t
		if err := call("kvrt_enumerate_devices", func() C.kvrt_result {
			return C.kvrt_enumerate_devices(nil, &count)
		}); err != nil {
			return nil, err
		}
		n := int(count)
		infos := (*C.kvrt_device_info)(C.calloc(C.size_t(n+1), C.size_t(unsafe.Sizeof(C.kvrt_device_info{}))))
		arr := unsafe.Slice(infos, n+1)
		for i := range arr {
			arr[i] = C.go_device_info_init()
		}
		filled := count
		err := call("kvrt_enumerate_devices", func() C.kvrt_result { return C.kvrt_enumerate_devices(infos, &filled) })
		var out []DeviceInfo
		if err == nil {
			for i := 0; i < int(filled); i++ {
				out = append(out, deviceInfoFromC(&arr[i]))
			}
		}
		C.free(unsafe.Pointer(infos))
		if e, ok := err.(*Error); ok && e.Code == ErrInvalidArgument && filled == count {
			continue // a device appeared between the two calls
		}
		return out, err
	}
}

// DeviceInfo describes the context's device (kvrt_context_get_device_info).
// Safe for concurrent use.
func (c *Context) DeviceInfo() (DeviceInfo, error) {
	const op = "kvrt_context_get_device_info"
	g, err := c.lock(op)
	if err != nil {
		return DeviceInfo{}, err
	}
	defer g.unlock()
	info := C.go_device_info_init()
	err = call(op, func() C.kvrt_result { return C.kvrt_context_get_device_info(c.handle(), &info) })
	runtime.KeepAlive(c)
	if err != nil {
		return DeviceInfo{}, err
	}
	return deviceInfoFromC(&info), nil
}

// ContextStats are the counters of a context (kvrt_context_stats).
type ContextStats struct {
	ValidationErrors   uint64 // validation-layer errors seen so far
	ValidationWarnings uint64 // validation-layer warnings seen so far
	DeviceBytes        uint64 // device memory held by kvrt now
	PeakDeviceBytes    uint64 // most device memory held at once
	Submissions        uint64 // queue submissions made so far
}

// Stats reads the context's counters (kvrt_context_get_stats). Safe for
// concurrent use.
func (c *Context) Stats() (ContextStats, error) {
	const op = "kvrt_context_get_stats"
	g, err := c.lock(op)
	if err != nil {
		return ContextStats{}, err
	}
	defer g.unlock()
	st := C.go_context_stats_init()
	err = call(op, func() C.kvrt_result { return C.kvrt_context_get_stats(c.handle(), &st) })
	runtime.KeepAlive(c)
	if err != nil {
		return ContextStats{}, err
	}
	return ContextStats{
		ValidationErrors:   uint64(st.validation_errors),
		ValidationWarnings: uint64(st.validation_warnings),
		DeviceBytes:        uint64(st.device_bytes),
		PeakDeviceBytes:    uint64(st.peak_device_bytes),
		Submissions:        uint64(st.submissions),
	}, nil
}

// PipelineCache returns the device's compiled kernels, to hand back as
// ContextOptions.PipelineCache at the next start
// (kvrt_context_get_pipeline_cache). Safe for concurrent use.
func (c *Context) PipelineCache() ([]byte, error) {
	const op = "kvrt_context_get_pipeline_cache"
	g, err := c.lock(op)
	if err != nil {
		return nil, err
	}
	defer g.unlock()
	defer runtime.KeepAlive(c)
	for attempt := 0; ; attempt++ {
		var size C.uint64_t
		if err := call(op, func() C.kvrt_result { return C.kvrt_context_get_pipeline_cache(c.handle(), nil, &size) }); err != nil {
			return nil, err
		}
		if size == 0 {
			return []byte{}, nil
		}
		buf := make([]byte, int(size))
		n := size
		err := call(op, func() C.kvrt_result {
			return C.kvrt_context_get_pipeline_cache(c.handle(), unsafe.Pointer(&buf[0]), &n)
		})
		if e, ok := err.(*Error); ok && e.Code == ErrInvalidArgument && attempt < 8 {
			continue // grew meanwhile
		}
		if err != nil {
			return nil, err
		}
		return buf[:int(n)], nil
	}
}

// Tuning returns what kvrt picked for the context's device: one "name value"
// line per choice (attention kernel variant, workgroups, lane groups, tiles,
// splits, the device profile in force), as kvrt_context_get_tuning gives it.
// Safe for concurrent use.
func (c *Context) Tuning() (string, error) {
	const op = "kvrt_context_get_tuning"
	g, err := c.lock(op)
	if err != nil {
		return "", err
	}
	defer g.unlock()
	defer runtime.KeepAlive(c)
	var size C.uint64_t
	if err := call(op, func() C.kvrt_result { return C.kvrt_context_get_tuning(c.handle(), nil, &size) }); err != nil {
		return "", err
	}
	buf := make([]byte, int(size))
	if err := call(op, func() C.kvrt_result {
		return C.kvrt_context_get_tuning(c.handle(), (*C.char)(unsafe.Pointer(&buf[0])), &size)
	}); err != nil {
		return "", err
	}
	return string(buf[:len(buf)-1]), nil
}
