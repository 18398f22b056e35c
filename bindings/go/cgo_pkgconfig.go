//go:build !kvrt_nopkgconfig

package kvrt

// #cgo pkg-config: kvrt
import "C"
