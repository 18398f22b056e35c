package kvrt

// #include "kvrt_go.h"
import "C"

import "unsafe"

// Version returns the loaded library's version, packed as
// KVRT_MAKE_VERSION packs it: major<<22 | minor<<12 | patch (kvrt_version).
func Version() uint32 { return uint32(C.kvrt_version()) }

// VersionString returns the loaded library's version as "MAJOR.MINOR.PATCH"
// (kvrt_version_string).
func VersionString() string { return C.GoString(C.kvrt_version_string()) }

// Type is an element type (kvrt_type): of a cache's stored K and V, of data
// given to kvrt, of its results and of the fixed memory's state. The zero
// value, TypeUndefined, stands for "the default" in options structs.
type Type int32

// The element types.
const (
	TypeUndefined Type = C.KVRT_TYPE_UNDEFINED
	TypeF32       Type = C.KVRT_TYPE_F32
	TypeF16       Type = C.KVRT_TYPE_F16 // IEEE binary16, carried as uint16 bits
	TypeQ8_0      Type = C.KVRT_TYPE_Q8_0
	TypeQ4_0      Type = C.KVRT_TYPE_Q4_0
	TypeU8Static  Type = C.KVRT_TYPE_U8_STATIC
	TypeU16Static Type = C.KVRT_TYPE_U16_STATIC
)

// String returns the type's name as kvrt_type_name spells it ("f16"), or
// "undefined".
func (t Type) String() string {
	n := C.kvrt_type_name(C.kvrt_type(t))
	if n == nil {
		return "undefined"
	}
	return C.GoString(n)
}

// BlockSize returns the values per block of the type (1, or 32 for Q8_0 and
// Q4_0); 0 for TypeUndefined.
func (t Type) BlockSize() uint32 { return uint32(C.kvrt_type_block_size(C.kvrt_type(t))) }

// BlockBytes returns the bytes per block of the type; 0 for TypeUndefined.
func (t Type) BlockBytes() uint32 { return uint32(C.kvrt_type_block_bytes(C.kvrt_type(t))) }

// RowBytes returns the bytes of n values of the type, or 0 when n is not a
// multiple of the block size or the type is undefined.
func (t Type) RowBytes(n uint32) uint64 {
	bs := t.BlockSize()
	if bs == 0 || n%bs != 0 {
		return 0
	}
	return uint64(n/bs) * uint64(t.BlockBytes())
}

// ParseType returns the type with the given name, case-insensitive
// (kvrt_type_from_name).
func ParseType(name string) (Type, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var t C.kvrt_type
	err := call("kvrt_type_from_name", func() C.kvrt_result { return C.kvrt_type_from_name(cs, &t) })
	return Type(t), err
}

// KVArray selects the K or the V array of a cache (kvrt_kv_array).
type KVArray int32

// The arrays of a cache.
const (
	ArrayK KVArray = C.KVRT_KV_ARRAY_K
	ArrayV KVArray = C.KVRT_KV_ARRAY_V
)

// AllLayers as a layer argument makes a call cover every layer (-1 in kvrt.h).
const AllLayers int32 = -1
