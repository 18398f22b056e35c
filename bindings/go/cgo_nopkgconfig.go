//go:build kvrt_nopkgconfig

package kvrt

// Built with the kvrt_nopkgconfig tag, the package does not ask pkg-config:
// CGO_CFLAGS must name the folder of kvrt/kvrt.h (-I<prefix>/include) and
// CGO_LDFLAGS the library's folder (-L<prefix>/lib).

// #cgo LDFLAGS: -lkvrt
import "C"
