// Tests of the CPU references in tests/reference (namespace kvrt::ref): fp16
// conversion, the Q8_0/Q4_0 quantizers against vectors produced by GGML's
// Python port, attention, RoPE, the MV/MK memory and the error metrics.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/attention.hpp"
#include "reference/half.hpp"
#include "reference/memory.hpp"
#include "reference/metrics.hpp"
#include "reference/quant.hpp"
#include "reference/rope.hpp"
#include "common/random.hpp"

using namespace kvrt::ref;

namespace {

// ---------------------------------------------------------------------------
// Q8_0 / Q4_0 test vectors.
//
// Generated once with the `gguf` Python package (gguf 0.19.0, numpy 2.4; its
// gguf.quants.Q8_0 / Q4_0 follow ggml-quants.c bit for bit), by quantizing
// these 512 floats (16 blocks of 32) as one row:
//    0: standard normal              1: uniform(-1, 1) * 1e-3
//    2: all +0.0 (zero block)        3: normal, with -5 the largest magnitude
//    4: 127 then k + 0.5, k = -16..14: Q8_0 d = 1, codes at exact halves
//    5: -8 then -7.5 + 0.5 k: Q4_0 d = 1, codes at exact halves, 7.5 and 8
//       clamped to 15
//    6: normal * 1e-5 (fp16 d subnormal)
//    7: normal * 1e-6 (Q8_0 fp16 d rounds to 0 while the codes are not 0)
//    8: +2 at [3] and -2 at [10] (Q4_0 magnitude tie: the first one wins)
//    9: -2 at [5] and +2 at [20]
//   10: a single 0.3 at [17]      11: normal * 10^k, k in [-3, 3]
//   12: Q8_0 d = 1 + 2^-11 (fp16 tie, rounds to even 1.0)
//   13: Q4_0 d = 1 + 3 * 2^-11 (fp16 tie, rounds to even 1 + 2^-9)
//   14: a block where x * (1/d) and x / d round to different Q8_0 codes
//       ([10]: 64 by GGML's multiplication, 63 by a division)
//   15: the same for Q4_0 ([8]: 2 by multiplication, 3 by a division)
// ---------------------------------------------------------------------------
constexpr float kGgmlInput[512] = {
    -0x1.b083ecp-3f, -0x1.09145cp-1f, 0x1.325f4ep-3f, -0x1.ca36aep+0f,
    0x1.234774p-2f, -0x1.496a92p-2f, -0x1.73bcdep-1f, 0x1.939bd2p-4f,
    -0x1.f393cap+0f, -0x1.446dfap-3f, -0x1.766af8p-1f, 0x1.a3872ep-2f,
    0x1.c50f72p-2f, -0x1.db10d2p-1f, -0x1.ddc83p-1f, -0x1.78545cp+0f,
    -0x1.934c02p-1f, 0x1.47149p-2f, 0x1.b6ec24p-1f, 0x1.d494f2p-3f,
    0x1.1d1352p-5f, -0x1.bc2208p-1f, 0x1.90effap-3f, -0x1.a1a20ep-1f,
    0x1.eac28cp-3f, -0x1.9ee94p-3f, 0x1.b64802p-1f, 0x1.9ea8c6p-3f,
    0x1.5e6b56p+0f, -0x1.a202f8p-2f, 0x1.830b3cp-1f, 0x1.cd211p-3f,
    -0x1.24acf2p-11f, -0x1.120c92p-14f, 0x1.013bfap-10f, 0x1.84c586p-14f,
    -0x1.ce590ep-11f, 0x1.c4bee2p-19f, -0x1.15af6ep-16f, -0x1.c0c6b2p-11f,
    -0x1.1a7a5ep-13f, 0x1.05677p-14f, -0x1.1cc1e4p-12f, -0x1.82e424p-12f,
    0x1.2315e2p-11f, 0x1.1cf894p-12f, 0x1.90becp-12f, 0x1.8a15b2p-11f,
    0x1.6c9252p-12f, -0x1.05b45ep-15f, -0x1.07cf0ep-12f, -0x1.9383dp-12f,
    -0x1.e84bfp-11f, -0x1.dc27e2p-11f, 0x1.a1ce14p-12f, 0x1.55809p-12f,
    -0x1.642f1ap-12f, -0x1.063204p-14f, 0x1.d5d83p-11f, 0x1.cf808ep-11f,
    -0x1.636f9ep-11f, 0x1.0cd39ap-11f, -0x1.abafacp-11f, 0x1.2603ccp-11f,
    0.0f, 0.0f, 0.0f, 0.0f,
    0.0f, 0.0f, 0.0f, 0.0f,
    0.0f, 0.0f, 0.0f, 0.0f,
    0.0f, 0.0f, 0.0f, 0.0f,
    0.0f, 0.0f, 0.0f, 0.0f,
    0.0f, 0.0f, 0.0f, 0.0f,
    0.0f, 0.0f, 0.0f, 0.0f,
    0.0f, 0.0f, 0.0f, 0.0f,
    -0x1.04355cp-8f, -0x1.2349cep-5f, 0x1.c04a2ep-1f, 0x1.918c4cp-1f,
    0x1.54d1b6p-2f, 0x1.d3ad7ep-1f, 0x1.e123ccp-1f, -0x1.4p+2f,
    0x1.17b6aap+1f, -0x1.90cf52p-5f, -0x1.363e14p-1f, 0x1.3346c6p-1f,
    -0x1.f44d92p-2f, 0x1.411abap-1f, -0x1.338eep+0f, 0x1.73623p-1f,
    -0x1.438d3ap+0f, 0x1.80c00ap-2f, -0x1.b4af58p-3f, -0x1.00c26p-1f,
    0x1.397e94p-3f, -0x1.268ed2p-1f, -0x1.8b3c1cp-1f, 0x1.94625ep-2f,
    0x1.ee6392p+0f, -0x1.fed9fep-1f, 0x1.27b90cp+0f, 0x1.14e0f8p+0f,
    -0x1.1ebd94p+0f, 0x1.8599b8p-3f, 0x1.0c4edap-1f, -0x1.d25bbap-1f,
    0x1.fcp+6f, -0x1.fp+3f, -0x1.dp+3f, -0x1.bp+3f,
    -0x1.9p+3f, -0x1.7p+3f, -0x1.5p+3f, -0x1.3p+3f,
    -0x1.1p+3f, -0x1.ep+2f, -0x1.ap+2f, -0x1.6p+2f,
    -0x1.2p+2f, -0x1.cp+1f, -0x1.4p+1f, -0x1.8p+0f,
    -0x1p-1f, 0x1p-1f, 0x1.8p+0f, 0x1.4p+1f,
    0x1.cp+1f, 0x1.2p+2f, 0x1.6p+2f, 0x1.ap+2f,
    0x1.ep+2f, 0x1.1p+3f, 0x1.3p+3f, 0x1.5p+3f,
    0x1.7p+3f, 0x1.9p+3f, 0x1.bp+3f, 0x1.dp+3f,
    -0x1p+3f, -0x1.ep+2f, -0x1.cp+2f, -0x1.ap+2f,
    -0x1.8p+2f, -0x1.6p+2f, -0x1.4p+2f, -0x1.2p+2f,
    -0x1p+2f, -0x1.cp+1f, -0x1.8p+1f, -0x1.4p+1f,
    -0x1p+1f, -0x1.8p+0f, -0x1p+0f, -0x1p-1f,
    0.0f, 0x1p-1f, 0x1p+0f, 0x1.8p+0f,
    0x1p+1f, 0x1.4p+1f, 0x1.8p+1f, 0x1.cp+1f,
    0x1p+2f, 0x1.2p+2f, 0x1.4p+2f, 0x1.6p+2f,
    0x1.8p+2f, 0x1.ap+2f, 0x1.cp+2f, 0x1.ep+2f,
    0x1.6a201ap-17f, 0x1.2693ep-17f, 0x1.1cf358p-16f, 0x1.059d0cp-18f,
    0x1.3d6f66p-17f, 0x1.3005dp-16f, 0x1.107306p-19f, -0x1.4fb19ep-18f,
    -0x1.e6d898p-17f, 0x1.80791ep-19f, -0x1.a93512p-17f, 0x1.705324p-17f,
    0x1.8b0b0ep-20f, 0x1.10254ap-17f, 0x1.b4c7ep-20f, 0x1.9f83dap-17f,
    -0x1.324122p-18f, 0x1.0ccc8ep-21f, 0x1.d5ccf6p-17f, -0x1.a63818p-17f,
    0x1.0267dap-19f, 0x1.473dfap-17f, -0x1.64dcd2p-17f, -0x1.d592cep-18f,
    -0x1.a3668ap-17f, 0x1.8c3228p-17f, -0x1.fc5c9cp-20f, -0x1.a6fda4p-19f,
    -0x1.d9f89ep-17f, -0x1.64f2b4p-17f, 0x1.36e488p-17f, -0x1.fc9838p-20f,
    -0x1.ae72dap-22f, 0x1.a9259cp-21f, -0x1.e655dcp-21f, 0x1.b11676p-20f,
    -0x1.8b5e0ap-22f, -0x1.13701cp-21f, -0x1.1cb80ap-22f, 0x1.40c30ep-25f,
    0x1.786fdep-21f, -0x1.772f4p-21f, -0x1.ba6574p-21f, 0x1.47c4d4p-25f,
    0x1.6bf0e6p-22f, 0x1.d6f912p-21f, -0x1.ffe8eap-22f, 0x1.03948ap-20f,
    -0x1.11c682p-20f, 0x1.73fdf4p-20f, -0x1.25269cp-20f, -0x1.728082p-24f,
    0x1.a36432p-23f, 0x1.0ff868p-20f, 0x1.87f5f4p-20f, 0x1.a6e43cp-25f,
    0x1.fcdbb2p-20f, -0x1.b7fab6p-21f, 0x1.5f34a8p-22f, -0x1.fcbd7ep-23f,
    0x1.3351bap-21f, -0x1.ff0652p-21f, -0x1.26b2cap-20f, 0x1.587222p-20f,
    0x1.ae5316p-2f, 0x1.c45d3cp-1f, 0x1.b0e614p-1f, 0x1p+1f,
    -0x1.e2f71p-1f, -0x1.2b356p-1f, -0x1.6b5046p-1f, -0x1.9088d6p-1f,
    -0x1.8134dcp-3f, -0x1.fdd41p-1f, -0x1p+1f, -0x1.72d88ap-1f,
    0x1.9360dap-2f, 0x1.d1996cp-4f, 0x1.58db18p-2f, 0x1.64bcf6p-1f,
    -0x1.9043ep-1f, -0x1.63fef2p-2f, -0x1.1860f6p-1f, -0x1.48de5cp-1f,
    0x1.872b3p-1f, 0x1.2d3106p-5f, -0x1.542efap-1f, -0x1.42ba6ep-3f,
    0x1.829cdep-1f, -0x1.983674p-1f, -0x1.af5868p-1f, 0x1.7cb022p-1f,
    0x1.fdaf96p-1f, 0x1.78780ep-1f, -0x1.3bfbc4p-1f, -0x1.477f0ap-1f,
    0x1.6c9f8ep-1f, 0x1.31a97cp-1f, -0x1.c8dc58p-1f, 0x1.20ad26p-1f,
    -0x1.bcd984p-2f, -0x1p+1f, -0x1.dabaaep-3f, -0x1.05dcd4p-7f,
    -0x1.5a3664p-1f, -0x1.2ac56ap-3f, 0x1.0f429ep-2f, 0x1.eee6fcp-1f,
    0x1.6d3b4p-1f, -0x1.b038fap-2f, 0x1.82d4cp-9f, 0x1.63c22ap-3f,
    -0x1.85ba92p-2f, -0x1.b80812p-2f, -0x1.f6d138p-1f, 0x1.13cc94p-5f,
    0x1p+1f, -0x1.513124p-2f, -0x1.2924f4p-5f, -0x1.a9c7eap-2f,
    0x1.5f1baap-1f, -0x1.94c992p-1f, -0x1.ad7af8p-1f, 0x1.60e538p-1f,
    0x1.974448p-4f, 0x1.9c628cp-2f, 0x1.564a14p-1f, -0x1.f2690ep-2f,
    0.0f, 0.0f, 0.0f, 0.0f,
    0.0f, 0.0f, 0.0f, 0.0f,
    0.0f, 0.0f, 0.0f, 0.0f,
    0.0f, 0.0f, 0.0f, 0.0f,
    0.0f, 0x1.333334p-2f, 0.0f, 0.0f,
    0.0f, 0.0f, 0.0f, 0.0f,
    0.0f, 0.0f, 0.0f, 0.0f,
    0.0f, 0.0f, 0.0f, 0.0f,
    -0x1.bbee56p+9f, 0x1.3681d2p-12f, -0x1.1e58f2p-14f, 0x1.9ab3dep+9f,
    0x1.f0f5p+1f, 0x1.ddd634p-8f, -0x1.e12838p+3f, -0x1.57a01ep+6f,
    0x1.4eeefcp-13f, 0x1.70e1c8p+8f, -0x1.991c72p-8f, -0x1.c12a3ep+2f,
    -0x1.c645bcp-16f, 0x1.05fbb6p-13f, 0x1.3a3e5cp+4f, -0x1.9299b8p-12f,
    0x1.57fa1ep+2f, -0x1.18a13cp-6f, -0x1.073104p-10f, -0x1.9b307p+1f,
    -0x1.9c4d3p+3f, -0x1.8d8feap-4f, -0x1.08554p-4f, -0x1.003ab6p-7f,
    -0x1.36f296p-6f, -0x1.a84b2ap-9f, -0x1.8bb49cp+6f, -0x1.e9d7b4p+4f,
    0x1.0ad7acp-7f, -0x1.1839dp-6f, 0x1.96a954p-4f, -0x1.cb8a9cp+1f,
    0x1.fc3f8p+6f, -0x1.11d69cp+3f, 0x1.2332aep+5f, -0x1.ab50a4p+5f,
    -0x1.eaf488p+5f, 0x1.17e864p+2f, 0x1.3000fcp+6f, 0x1.1d1dfep+4f,
    0x1.6559fap+6f, 0x1.55c11p+6f, 0x1.163be2p+6f, -0x1.50ce12p+6f,
    0x1.7144bep+6f, 0x1.e318c4p+5f, 0x1.11c662p+6f, 0x1.42b3b8p+5f,
    -0x1.eb591ep+5f, -0x1.16ecb6p+5f, 0x1.21f7aep+6f, 0x1.9dcf8ep+4f,
    -0x1.7b7f76p+6f, 0x1.f03a7ep+4f, 0x1.38a0bep+5f, 0x1.1cdc9p+4f,
    -0x1.c05aa8p+4f, -0x1.48aa38p+5f, 0x1.460344p+4f, 0x1.0c25e8p+3f,
    -0x1.204694p+5f, -0x1.1855f4p+4f, -0x1.157fbep+3f, -0x1.95e11p+3f,
    -0x1.ec6e22p-1f, 0x1.a1104ep+2f, 0x1.86382ap-3f, 0x1.449682p+2f,
    -0x1.f0b66ep+1f, -0x1.a6a354p-2f, 0x1.0fc8b8p+2f, -0x1.79c028p+1f,
    0x1.c93cccp+0f, -0x1.006p+3f, 0x1.9edfa2p+0f, -0x1.91b822p+2f,
    -0x1.bf2a2ep+1f, -0x1.651536p+1f, 0x1.0384b8p+2f, -0x1.d74f58p+1f,
    -0x1.b0fb68p+1f, 0x1.5e98dap-3f, 0x1.c0f7f4p+0f, 0x1.4c1512p+2f,
    -0x1.ca6306p+0f, -0x1.be81c2p+1f, 0x1.a2562p-2f, 0x1.6b0086p+2f,
    -0x1.966602p+2f, 0x1.874c84p+1f, -0x1.80287cp+2f, -0x1.c6c0fap+0f,
    0x1.5d52b2p+1f, 0x1.2a15aap+2f, 0x1.36f5dap-1f, -0x1.8b922ap+0f,
    0x1.1p+4f, -0x1.c8p+5f, -0x1.5p+3f, -0x1.8p+2f,
    0x1.1p+6f, -0x1.4p+4f, 0x1.1p+3f, 0x1.acp+5f,
    0x1.08p+5f, -0x1.4p+2f, 0x1.2p+5f, -0x1.cp+1f,
    -0x1.58p+4f, -0x1.4p+4f, 0x1.fcp+5f, 0x1.bp+4f,
    0x1.b8p+4f, 0x1.2p+2f, 0x1.1p+3f, -0x1.58p+4f,
    -0x1.8p+4f, -0x1.bp+3f, -0x1.ap+4f, 0x1.b8p+4f,
    0x1.4p+3f, 0x1.6p+2f, -0x1.3p+5f, -0x1.cp+4f,
    0x1.6p+3f, 0x1.2p+6f, 0x1.88p+4f, -0x1.bp+5f,
    -0x1.7p+5f, 0x1.9p+4f, 0x1.58p+4f, -0x1.3p+4f,
    -0x1.b8p+5f, 0x1.cp+4f, 0x1.48p+4f, -0x1.08p+5f,
    0x1.34p+5f, 0x1p-1f, 0x1.cp+3f, -0x1.78p+5f,
    -0x1p+1f, -0x1.7p+5f, 0x1.ep+4f, 0x1.8p+3f,
    -0x1.cp+4f, -0x1.f8p+4f, 0x1p+2f, 0x1.28p+5f,
    -0x1.bp+3f, 0x1p+1f, -0x1.08p+4f, -0x1.6p+2f,
    0x1.cp+5f, -0x1.cp+3f, -0x1.7p+4f, -0x1.3cp+5f,
    -0x1.4p+1f, 0x1.2p+3f, -0x1.1p+5f, 0x1.ep+4f,
};

constexpr uint8_t kGgmlQ8_0[544] = {
    0xde, 0x23, 0xf2, 0xde, 0x0a, 0x8c, 0x13, 0xeb, 0xd1, 0x06, 0x81, 0xf6, 0xd0, 0x1b, 0x1d, 0xc4, 0xc3,
    0xa0, 0xcd, 0x15, 0x38, 0x0f, 0x02, 0xc8, 0x0d, 0xcb, 0x10, 0xf3, 0x38, 0x0d, 0x59, 0xe5, 0x31, 0x0f,
    0x82, 0x00, 0xb8, 0xf8, 0x7f, 0x0c, 0x8e, 0x00, 0xfe, 0x91, 0xef, 0x08, 0xdd, 0xd0, 0x48, 0x23, 0x31,
    0x61, 0x2d, 0xfc, 0xdf, 0xce, 0x87, 0x8a, 0x34, 0x2a, 0xd4, 0xf8, 0x74, 0x72, 0xa8, 0x42, 0x96, 0x49,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x0a, 0x29, 0x00, 0xff, 0x16, 0x14, 0x08, 0x17, 0x18, 0x81, 0x38, 0xff, 0xf1, 0x0f, 0xf4, 0x10, 0xe1,
    0x12, 0xe0, 0x0a, 0xfb, 0xf3, 0x04, 0xf1, 0xec, 0x0a, 0x31, 0xe7, 0x1d, 0x1b, 0xe4, 0x05, 0x0d, 0xe9,
    0x00, 0x3c, 0x7f, 0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd,
    0xfe, 0xff, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x08, 0x2c, 0x81, 0x89, 0x91, 0x99, 0xa1, 0xa9, 0xb1, 0xb9, 0xc0, 0xc8, 0xd0, 0xd8, 0xe0, 0xe8, 0xf0,
    0xf8, 0x00, 0x08, 0x10, 0x18, 0x20, 0x28, 0x30, 0x38, 0x40, 0x47, 0x4f, 0x57, 0x5f, 0x67, 0x6f, 0x77,
    0x02, 0x00, 0x4c, 0x3e, 0x77, 0x1b, 0x42, 0x7f, 0x0e, 0xdd, 0x9a, 0x14, 0xa7, 0x4d, 0x0a, 0x39, 0x0b,
    0x57, 0xe0, 0x04, 0x62, 0xa8, 0x0d, 0x44, 0xb5, 0xcf, 0xa8, 0x53, 0xf3, 0xea, 0x9d, 0xb5, 0x41, 0xf3,
    0x00, 0x00, 0xe5, 0x35, 0xc3, 0x6c, 0xe7, 0xde, 0xee, 0x03, 0x2f, 0xd1, 0xc9, 0x03, 0x17, 0x3b, 0xe0,
    0x41, 0xbc, 0x5d, 0xb7, 0xfa, 0x0d, 0x44, 0x62, 0x03, 0x7f, 0xc9, 0x16, 0xf0, 0x26, 0xc0, 0xb6, 0x56,
    0x08, 0x24, 0x1b, 0x38, 0x36, 0x7f, 0xc4, 0xdb, 0xd3, 0xce, 0xf4, 0xc1, 0x81, 0xd2, 0x19, 0x07, 0x15,
    0x2c, 0xce, 0xea, 0xdd, 0xd7, 0x31, 0x02, 0xd6, 0xf6, 0x30, 0xcd, 0xcb, 0x2f, 0x3f, 0x2f, 0xd9, 0xd7,
    0x08, 0x24, 0x2d, 0x26, 0xc7, 0x24, 0xe4, 0x81, 0xf1, 0xff, 0xd5, 0xf7, 0x11, 0x3d, 0x2d, 0xe5, 0x00,
    0x0b, 0xe8, 0xe5, 0xc2, 0x02, 0x7f, 0xeb, 0xfe, 0xe6, 0x2c, 0xce, 0xcb, 0x2c, 0x06, 0x1a, 0x2a, 0xe1,
    0xd6, 0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xfe, 0x46, 0x81, 0x00, 0x00, 0x75, 0x01, 0x00, 0xfe, 0xf4, 0x00, 0x35, 0x00, 0xff, 0x00, 0x00, 0x03,
    0x00, 0x01, 0x00, 0x00, 0x00, 0xfe, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf2, 0xfc, 0x00, 0x00, 0x00, 0xff,
    0x00, 0x3c, 0x7f, 0xf7, 0x24, 0xcb, 0xc3, 0x04, 0x4c, 0x12, 0x59, 0x55, 0x46, 0xac, 0x5c, 0x3c, 0x44,
    0x28, 0xc3, 0xdd, 0x48, 0x1a, 0xa1, 0x1f, 0x27, 0x12, 0xe4, 0xd7, 0x14, 0x08, 0xdc, 0xee, 0xf7, 0xf3,
    0x0a, 0x2c, 0xf1, 0x67, 0x03, 0x50, 0xc2, 0xf9, 0x43, 0xd1, 0x1c, 0x81, 0x1a, 0x9d, 0xc9, 0xd4, 0x40,
    0xc6, 0xca, 0x03, 0x1c, 0x52, 0xe4, 0xc9, 0x06, 0x5a, 0x9b, 0x30, 0xa1, 0xe4, 0x2b, 0x4a, 0x0a, 0xe8,
    0x89, 0x38, 0x1e, 0x9b, 0xed, 0xf5, 0x78, 0xdd, 0x0f, 0x5e, 0x3a, 0xf7, 0x40, 0xfa, 0xda, 0xdd, 0x70,
    0x30, 0x31, 0x08, 0x0f, 0xda, 0xd6, 0xe8, 0xd2, 0x31, 0x12, 0x0a, 0xbd, 0xcf, 0x13, 0x7f, 0x2b, 0xa1,
    0x0e, 0x37, 0x98, 0x39, 0x31, 0xd5, 0x83, 0x40, 0x2e, 0xb5, 0x57, 0x01, 0x20, 0x95, 0xfb, 0x98, 0x44,
    0x1b, 0xc0, 0xb9, 0x09, 0x54, 0xe1, 0x05, 0xdb, 0xf4, 0x7f, 0xe0, 0xcc, 0xa6, 0xfa, 0x14, 0xb3, 0x44,
};

constexpr uint8_t kGgmlQ4_0[288] = {
    0xce, 0x33, 0x57, 0x96, 0xc9, 0x91, 0x89, 0x47, 0x95, 0x58, 0x90, 0x77, 0xc5, 0x9a, 0xea, 0x64, 0xb4, 0x92,
    0x05, 0x88, 0x5d, 0x89, 0xa0, 0xb7, 0xff, 0xf8, 0x58, 0x5f, 0xb9, 0x97, 0x1a, 0x1b, 0xe3, 0x46, 0xf5, 0x32,
    0x00, 0x80, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88,
    0x00, 0x39, 0x68, 0x98, 0x89, 0x79, 0x89, 0x79, 0x7a, 0x90, 0xbb, 0x68, 0xa7, 0xa9, 0x67, 0x89, 0x96, 0x79,
    0xf0, 0xcb, 0x80, 0x89, 0x89, 0x89, 0x89, 0x89, 0x89, 0x89, 0x89, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0x78,
    0x00, 0x3c, 0x80, 0x91, 0x91, 0xa2, 0xa2, 0xb3, 0xb3, 0xc4, 0xc4, 0xd5, 0xd5, 0xe6, 0xe6, 0xf7, 0xf7, 0xf8,
    0x26, 0x80, 0xa3, 0x84, 0x21, 0xe6, 0x74, 0x40, 0xd7, 0xba, 0xee, 0x37, 0x9e, 0x93, 0xe7, 0xd4, 0x47, 0x93,
    0x04, 0x80, 0xca, 0x25, 0xdc, 0x81, 0x7a, 0x4a, 0x29, 0x88, 0x05, 0xbb, 0x7b, 0x98, 0x67, 0xc4, 0xda, 0x34,
    0x00, 0xb4, 0xb6, 0x94, 0xa5, 0xb0, 0x5c, 0x8a, 0xbb, 0x9b, 0x59, 0xbc, 0xbf, 0x5b, 0x46, 0x58, 0xa7, 0xb5,
    0x00, 0x34, 0x6b, 0x6a, 0x44, 0x8a, 0xf6, 0x70, 0x87, 0x68, 0xb5, 0x57, 0x59, 0xbc, 0x8b, 0xa6, 0xb8, 0x69,
    0xcd, 0xa8, 0x88, 0x08, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88,
    0xf0, 0x56, 0x80, 0x88, 0x88, 0x8f, 0x88, 0x88, 0x88, 0x87, 0x88, 0x8b, 0x78, 0x88, 0x88, 0x88, 0x88, 0x88,
    0xf1, 0xcb, 0xc0, 0xa9, 0x36, 0x6b, 0xec, 0x68, 0x63, 0x77, 0xa2, 0xb3, 0x74, 0x7d, 0xa2, 0x94, 0x94, 0x95,
    0x02, 0x3c, 0x57, 0x8f, 0xa8, 0xdd, 0x64, 0x58, 0x8c, 0xe5, 0x2a, 0xb0, 0x2a, 0x62, 0xb5, 0xd5, 0x9c, 0x64,
    0x80, 0xc8, 0x56, 0x8e, 0x79, 0xa9, 0xb0, 0xaa, 0xb7, 0x52, 0x74, 0x79, 0xc4, 0xb8, 0x7a, 0x0a, 0x51, 0xe5,
    0x00, 0xc7, 0xcf, 0xd4, 0x75, 0x3b, 0xaf, 0x84, 0xa5, 0x9d, 0x02, 0xa8, 0xb6, 0xef, 0x88, 0x7f, 0xd4, 0x46,
};


// Deterministic pseudo-random floats in [-scale, scale).
std::vector<float> random_floats(size_t n, float scale, uint32_t seed) {
    return kvrt_test::Rng(seed).uniform(n, -scale, scale);
}

// The fp16 value with the given bits, as a float.
float h2f(uint32_t bits) { return f16_to_f32(static_cast<uint16_t>(bits)); }

// The float next to x towards +infinity / -infinity (x finite, > 0).
float next_up(float x) { return f32_from_bits(f32_bits(x) + 1u); }
float next_down(float x) { return f32_from_bits(f32_bits(x) - 1u); }

}  // namespace

// ===========================================================================
// fp16
// ===========================================================================

TEST_CASE("ref half: every fp16 value round-trips through f32", "[reference][half]") {
    int nans = 0;
    for (uint32_t h = 0; h < 65536u; ++h) {
        const float f = h2f(h);
        const uint16_t back = f32_to_f16(f);
        const bool is_nan = ((h >> 10) & 0x1Fu) == 0x1Fu && (h & 0x3FFu) != 0u;
        if (is_nan) {
            ++nans;
            REQUIRE(std::isnan(f));
            REQUIRE((back & 0x7C00u) == 0x7C00u);
            REQUIRE((back & 0x03FFu) != 0u);
            REQUIRE((back & 0x8000u) == (h & 0x8000u));
        } else if (back != h) {
            FAIL("fp16 0x" << std::hex << h << " came back as 0x" << back);
        }
    }
    REQUIRE(nans == 2 * 1023);
}

TEST_CASE("ref half: f16 -> f32 known values", "[reference][half]") {
    CHECK(h2f(0x0000) == 0.0f);
    CHECK(std::signbit(h2f(0x8000)));
    CHECK(h2f(0x3C00) == 1.0f);
    CHECK(h2f(0xC000) == -2.0f);
    CHECK(h2f(0x7BFF) == 65504.0f);
    CHECK(h2f(0x0001) == std::ldexp(1.0f, -24));
    CHECK(h2f(0x03FF) == std::ldexp(1023.0f, -24));
    CHECK(h2f(0x0400) == std::ldexp(1.0f, -14));
    CHECK(h2f(0x3555) == 0x1.554p-2f);
    CHECK(std::isinf(h2f(0x7C00)));
    CHECK(h2f(0xFC00) < 0.0f);
    CHECK(std::isinf(h2f(0xFC00)));
    CHECK(std::isnan(h2f(0x7E00)));
}

TEST_CASE("ref half: f32 -> f16 rounding, overflow, subnormals", "[reference][half]") {
    CHECK(f32_to_f16(1.0f) == 0x3C00);
    CHECK(f32_to_f16(-2.0f) == 0xC000);
    CHECK(f32_to_f16(0.1f) == 0x2E66);
    CHECK(f32_to_f16(1.0f / 3.0f) == 0x3555);
    CHECK(f32_to_f16(-0.0f) == 0x8000);
    CHECK(f32_to_f16(65504.0f) == 0x7BFF);
    CHECK(f32_to_f16(65519.996f) == 0x7BFF);           // just below the midpoint to 2^16
    CHECK(f32_to_f16(65520.0f) == 0x7C00);             // midpoint: rounds to even = inf
    CHECK(f32_to_f16(1e6f) == 0x7C00);
    CHECK(f32_to_f16(-1e30f) == 0xFC00);
    CHECK(f32_to_f16(-INFINITY) == 0xFC00);
    CHECK(f32_to_f16(1.0f + 0x1p-11f) == 0x3C00);       // tie -> even (down)
    CHECK(f32_to_f16(1.0f + 0x3p-11f) == 0x3C02);       // tie -> even (up)
    CHECK(f32_to_f16(next_up(1.0f + 0x1p-11f)) == 0x3C01);
    CHECK(f32_to_f16(0x1p-24f) == 0x0001);             // smallest subnormal
    CHECK(f32_to_f16(0x1p-25f) == 0x0000);             // tie with 0 -> even 0
    CHECK(f32_to_f16(-0x1p-25f) == 0x8000);
    CHECK(f32_to_f16(next_up(0x1p-25f)) == 0x0001);
    CHECK(f32_to_f16(0x3p-25f) == 0x0002);             // 1.5 ulp: tie -> even 2
    CHECK(f32_to_f16(0x5p-25f) == 0x0002);             // 2.5 ulp: tie -> even 2
    CHECK(f32_to_f16(0x1p-30f) == 0x0000);
    CHECK(f32_to_f16(0x1p-149f) == 0x0000);            // f32 subnormal
    CHECK(f32_to_f16(1023.5f * 0x1p-24f) == 0x0400);   // largest subnormal tie -> smallest normal
    CHECK(f32_to_f16(0x1p-14f) == 0x0400);
    const uint16_t nan_bits = f32_to_f16(NAN);
    CHECK((nan_bits & 0x7C00u) == 0x7C00u);
    CHECK((nan_bits & 0x03FFu) != 0u);
    CHECK(f32_to_f16(f32_from_bits(0x7F800001u)) != 0x7C00);  // a NaN never becomes inf
    CHECK(round_to_f16(0.1f) == h2f(0x2E66));
}

TEST_CASE("ref half: every midpoint between adjacent fp16 values rounds to even", "[reference][half]") {
    // Between h and h+1 (both finite, positive) the midpoint is exact in f32;
    // it must go to the one with an even mantissa, and one f32 ulp either
    // side must go to the nearer one. Mirrored for negative values.
    for (uint32_t h = 0; h < 0x7BFFu; ++h) {
        const float lo = h2f(h);
        const float hi = h2f(h + 1u);
        const float mid = lo + (hi - lo) / 2.0f;
        REQUIRE(mid > lo);
        REQUIRE(mid < hi);
        const uint32_t even = (h & 1u) == 0u ? h : h + 1u;
        REQUIRE(f32_to_f16(mid) == even);
        REQUIRE(f32_to_f16(next_down(mid)) == h);
        REQUIRE(f32_to_f16(next_up(mid)) == h + 1u);
        REQUIRE(f32_to_f16(-mid) == (even | 0x8000u));
        REQUIRE(f32_to_f16(-next_down(mid)) == (h | 0x8000u));
    }
    // Above the largest finite value: the "next" value is 2^16.
    CHECK(f32_to_f16(next_down(65520.0f)) == 0x7BFF);
    CHECK(f32_to_f16(65520.0f) == 0x7C00);
}

// ===========================================================================
// Q8_0 / Q4_0
// ===========================================================================

TEST_CASE("ref quant: sizes", "[reference][quant]") {
    CHECK(sizeof(BlockQ8_0) == 34);
    CHECK(sizeof(BlockQ4_0) == 18);
    CHECK(type_block_elems(Type::F32) == 1);
    CHECK(type_block_elems(Type::Q4_0) == 32);
    CHECK(type_block_bytes(Type::F16) == 2);
    CHECK(row_bytes(Type::F32, 7) == 28);
    CHECK(row_bytes(Type::F16, 7) == 14);
    CHECK(row_bytes(Type::Q8_0, 128) == 4 * 34);
    CHECK(row_bytes(Type::Q4_0, 128) == 4 * 18);
    CHECK(row_bytes(Type::Q8_0, 0) == 0);
    CHECK_THROWS_AS(row_bytes(Type::Q8_0, 33), std::invalid_argument);
    CHECK_THROWS_AS(row_bytes(Type::Q4_0, -32), std::invalid_argument);
}

TEST_CASE("ref quant: Q8_0 is bit-identical to GGML (gguf vectors)", "[reference][quant]") {
    constexpr int64_t n = 512;
    std::vector<unsigned char> bytes(row_bytes(Type::Q8_0, n));
    REQUIRE(bytes.size() == sizeof kGgmlQ8_0);
    encode_row(Type::Q8_0, kGgmlInput, n, bytes.data());
    for (size_t i = 0; i < bytes.size(); ++i) {
        INFO("byte " << i << " (block " << i / 34 << ")");
        REQUIRE(bytes[i] == kGgmlQ8_0[i]);
    }
    // The typed entry point gives the same blocks.
    std::vector<BlockQ8_0> blocks(n / 32);
    quantize_row_q8_0(kGgmlInput, blocks.data(), n);
    REQUIRE(std::memcmp(blocks.data(), kGgmlQ8_0, sizeof kGgmlQ8_0) == 0);

    // Spot checks of what the vectors exercise.
    CHECK(blocks[2].d == 0x0000);          // zero block: d = 0, codes 0
    CHECK(blocks[2].qs[5] == 0);
    CHECK(blocks[4].d == 0x3C00);          // d = 1: codes are roundf(x), halves away from 0
    CHECK(blocks[4].qs[1] == -16);         // -15.5
    CHECK(blocks[4].qs[16] == -1);         // -0.5
    CHECK(blocks[4].qs[17] == 1);          // 0.5
    CHECK(blocks[4].qs[19] == 3);          // 2.5
    CHECK(blocks[7].d == 0x0000);          // fp16(d) underflows ...
    CHECK(blocks[7].qs[0] != 0);           // ... but the codes come from the f32 d
    CHECK(blocks[12].d == 0x3C00);         // 1 + 2^-11 ties to even 1.0
    // Block 14: GGML multiplies by the f32 reciprocal; a division would give 63.
    const float* x14 = kGgmlInput + 14 * 32;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
        amax = std::fmax(amax, std::fabs(x14[j]));
    }
    const float d14 = amax / 127.0f;
    CHECK(blocks[14].qs[10] == 64);
    CHECK(std::roundf(x14[10] / d14) == 63.0f);
    CHECK(std::roundf(x14[10] * (1.0f / d14)) == 64.0f);

    // Decoding: value = fp16(d) * q.
    std::vector<float> dec(n);
    decode_row(Type::Q8_0, kGgmlQ8_0, n, dec.data());
    for (int64_t i = 0; i < n; ++i) {
        const BlockQ8_0& b = blocks[static_cast<size_t>(i / 32)];
        REQUIRE(dec[static_cast<size_t>(i)] == h2f(b.d) * static_cast<float>(b.qs[i % 32]));
    }
    CHECK(dec[4 * 32 + 19] == 3.0f);
}

TEST_CASE("ref quant: Q4_0 is bit-identical to GGML (gguf vectors)", "[reference][quant]") {
    constexpr int64_t n = 512;
    std::vector<unsigned char> bytes(row_bytes(Type::Q4_0, n));
    REQUIRE(bytes.size() == sizeof kGgmlQ4_0);
    encode_row(Type::Q4_0, kGgmlInput, n, bytes.data());
    for (size_t i = 0; i < bytes.size(); ++i) {
        INFO("byte " << i << " (block " << i / 18 << ")");
        REQUIRE(bytes[i] == kGgmlQ4_0[i]);
    }
    std::vector<BlockQ4_0> blocks(n / 32);
    quantize_row_q4_0(kGgmlInput, blocks.data(), n);
    REQUIRE(std::memcmp(blocks.data(), kGgmlQ4_0, sizeof kGgmlQ4_0) == 0);

    auto code = [&](int block, int j) {
        const uint8_t byte = blocks[static_cast<size_t>(block)].qs[j % 16];
        return j < 16 ? (byte & 0x0F) : (byte >> 4);
    };
    CHECK(blocks[2].d == 0x8000);          // zero block: d = +0 / -8 = -0.0
    CHECK(blocks[2].qs[0] == 0x88);        // codes 8 (value 0)
    CHECK(blocks[3].d == f32_to_f16(5.0f / 8.0f));  // m = -5 -> d = +0.625
    CHECK(blocks[5].d == 0x3C00);          // m = -8 -> d = 1
    CHECK(code(5, 0) == 0);                // -8 * 1 + 8.5 = 0.5 -> 0
    CHECK(code(5, 1) == 1);                // -7.5 + 8.5 = 1.0 -> 1
    CHECK(code(5, 15) == 8);               // -0.5 + 8.5 = 8.0 -> 8
    CHECK(code(5, 16) == 8);               // 0.0 + 8.5 -> 8 (truncation)
    CHECK(code(5, 17) == 9);               // 0.5 + 8.5 = 9.0 -> 9
    CHECK(code(5, 31) == 15);              // 7.5 + 8.5 = 16 -> clamped to 15
    CHECK(blocks[8].d == 0xB400);          // tie +2 / -2: +2 first -> d = -0.25
    CHECK(blocks[9].d == 0x3400);          // -2 first -> d = +0.25
    CHECK(blocks[13].d == 0x3C02);         // 1 + 3 * 2^-11 ties to even 1 + 2^-9
    CHECK(code(15, 8) == 2);               // multiplication, not division (gives 3)

    std::vector<float> dec(n);
    decode_row(Type::Q4_0, kGgmlQ4_0, n, dec.data());
    for (int64_t i = 0; i < n; ++i) {
        const int b = static_cast<int>(i / 32);
        REQUIRE(dec[static_cast<size_t>(i)] ==
                h2f(blocks[static_cast<size_t>(b)].d) * static_cast<float>(code(b, static_cast<int>(i % 32)) - 8));
    }
}

TEST_CASE("ref quant: Q4_0 zero block keeps GGML's -0 scale and nibble layout", "[reference][quant]") {
    // ggml-quants.c starts `max` at +0.0, so an all-zero block (whatever the
    // signs of its zeros) gets d = +0 / -8 = -0.0, bits 0x8000. (gguf's numpy
    // port picks the first element instead and gives 0x0000 when it is -0.0;
    // the C implementation is the format's definition.)
    float x[32] = {};
    x[0] = -0.0f;
    BlockQ4_0 b;
    quantize_row_q4_0(x, &b, 32);
    CHECK(b.d == 0x8000);
    for (int j = 0; j < 16; ++j) {
        CHECK(b.qs[j] == 0x88);
    }
    // Element j in the low nibble of byte j, j + 16 in the high nibble.
    float y[32];
    for (int j = 0; j < 32; ++j) {
        y[j] = 0.0f;
    }
    y[0] = -8.0f;   // d = 1
    y[3] = 2.0f;    // code 10 in the low nibble of byte 3
    y[19] = -3.0f;  // code 5 in the high nibble of byte 3
    quantize_row_q4_0(y, &b, 32);
    CHECK(b.d == 0x3C00);
    CHECK(b.qs[0] == 0x80);
    CHECK(b.qs[3] == 0x5A);
    CHECK(b.qs[1] == 0x88);
}

TEST_CASE("ref quant: round-trip error within the step bound", "[reference][quant]") {
    // With d the f32 scale and d16 = fp16(d) the stored one (their difference
    // matters when d16 is an fp16 subnormal, as for the 1e-3 scale):
    //   Q8_0: |x - d16 q| <= d/2 (rounding) + 127 |d - d16|;
    //   Q4_0: |x - d16 (q - 8)| <= |d| (the clamp of 8 to code 15) + 8 |d - d16|.
    const float scales[] = {1e-3f, 1.0f, 37.0f, 1000.0f};
    uint32_t seed = 1;
    for (float scale : scales) {
        const int64_t n = 64 * 32;
        const std::vector<float> x = random_floats(static_cast<size_t>(n), scale, seed++);
        for (Type type : {Type::Q8_0, Type::Q4_0}) {
            std::vector<unsigned char> bytes(row_bytes(type, n));
            std::vector<float> dec(static_cast<size_t>(n));
            encode_row(type, x.data(), n, bytes.data());
            decode_row(type, bytes.data(), n, dec.data());
            double worst = 0.0;
            for (int64_t i = 0; i < n; ++i) {
                const float* block = x.data() + (i / 32) * 32;
                float amax = 0.0f;
                float m = 0.0f;
                for (int j = 0; j < 32; ++j) {
                    if (std::fabs(block[j]) > amax) {
                        amax = std::fabs(block[j]);
                        m = block[j];
                    }
                }
                const double d = type == Type::Q8_0 ? amax / 127.0f : std::fabs(m / -8.0f);
                const double step = quant_step(type, bytes.data(), i);
                REQUIRE(step > 0.0);
                REQUIRE(step == block_step(type, block));
                const double bound = type == Type::Q8_0 ? 0.5 * d + 127.0 * std::fabs(d - step)
                                                        : d + 8.0 * std::fabs(d - step);
                const double err = std::fabs(static_cast<double>(x[static_cast<size_t>(i)]) - dec[static_cast<size_t>(i)]);
                REQUIRE(err <= bound * (1.0 + 1e-6));
                worst = std::fmax(worst, err / d);
            }
            // The bounds are not loose: the worst case comes close.
            CHECK(worst > (type == Type::Q8_0 ? 0.45 : 0.9));
            // Quantized rows are a bounded distance from the input overall.
            CHECK(nmse(dec, x) < (type == Type::Q8_0 ? 1e-4 : 2e-2));
        }
    }
}

TEST_CASE("ref quant: F32 and F16 rows", "[reference][quant]") {
    const std::vector<float> x = random_floats(13, 100.0f, 7);
    std::vector<unsigned char> bytes(row_bytes(Type::F32, 13));
    std::vector<float> dec(13);
    encode_row(Type::F32, x.data(), 13, bytes.data());
    decode_row(Type::F32, bytes.data(), 13, dec.data());
    CHECK(std::memcmp(dec.data(), x.data(), 13 * sizeof(float)) == 0);
    CHECK(quant_step(Type::F32, bytes.data(), 3) == 0.0);

    std::vector<unsigned char> half_bytes(row_bytes(Type::F16, 13));
    encode_row(Type::F16, x.data(), 13, half_bytes.data());
    decode_row(Type::F16, half_bytes.data(), 13, dec.data());
    for (size_t i = 0; i < 13; ++i) {
        uint16_t h;
        std::memcpy(&h, half_bytes.data() + 2 * i, 2);
        CHECK(h == f32_to_f16(x[i]));
        CHECK(dec[i] == round_to_f16(x[i]));
    }
    CHECK(quant_step(Type::F16, half_bytes.data(), 0) == 0.0);
    CHECK_THROWS_AS(encode_row(Type::Q8_0, x.data(), 13, bytes.data()), std::invalid_argument);
}

// ===========================================================================
// Attention
// ===========================================================================

namespace {

// One-head geometry with dk = dv = 1 and scale 1 unless changed.
AttnParams tiny_params() {
    AttnParams p;
    p.n_heads = 1;
    p.n_kv_heads = 1;
    p.head_dim_k = 1;
    p.head_dim_v = 1;
    p.scale = 1.0;
    return p;
}

AttnCell cell(int32_t pos, std::vector<int32_t> seqs = {0}) {
    AttnCell c;
    c.pos = pos;
    c.seq_ids = std::move(seqs);
    return c;
}

}  // namespace

TEST_CASE("ref attention: single cell gives its V row", "[reference][attention]") {
    AttnParams p;
    p.n_heads = 1;
    p.n_kv_heads = 1;
    p.head_dim_k = 4;
    p.head_dim_v = 3;
    p.scale = 0.5;
    const float q[4] = {0.3f, -1.0f, 2.0f, 0.5f};
    const float k[4] = {1.0f, 2.0f, -0.5f, 4.0f};
    const float v[3] = {1.5f, -2.25f, 7.0f};
    const std::vector<double> out = attention(p, q, {{5, 0}}, k, v, {cell(5)});
    REQUIRE(out.size() == 3);
    CHECK(out[0] == Approx(1.5).margin(1e-15));
    CHECK(out[1] == Approx(-2.25).margin(1e-15));
    CHECK(out[2] == Approx(7.0).margin(1e-15));
}

TEST_CASE("ref attention: equal scores average V; masks exclude cells", "[reference][attention]") {
    AttnParams p = tiny_params();
    const float q[1] = {1.0f};
    const float k[5] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f};  // all scores equal
    const float v[5] = {1.0f, 10.0f, 100.0f, 1000.0f, 10000.0f};
    std::vector<AttnCell> cells = {cell(0), cell(1), cell(2), cell(3), cell(4)};

    // Causal: query at position 1 sees cells 0 and 1 only.
    CHECK(attention(p, q, {{1, 0}}, k, v, cells)[0] == Approx(5.5).epsilon(1e-14));
    // Query at 4 sees all five.
    CHECK(attention(p, q, {{4, 0}}, k, v, cells)[0] == Approx(11111.0 / 5).epsilon(1e-14));
    // Not causal: a query at 1 sees everything.
    p.causal = false;
    CHECK(attention(p, q, {{1, 0}}, k, v, cells)[0] == Approx(11111.0 / 5).epsilon(1e-14));
    p.causal = true;

    // Sequence membership.
    cells[1].seq_ids = {1};
    cells[2].seq_ids = {0, 1};
    cells[3].seq_ids = {};
    CHECK(attention(p, q, {{4, 0}}, k, v, cells)[0] == Approx((1.0 + 100.0 + 10000.0) / 3).epsilon(1e-14));
    CHECK(attention(p, q, {{4, 1}}, k, v, cells)[0] == Approx((10.0 + 100.0) / 2).epsilon(1e-14));
    CHECK(attention(p, q, {{4, 7}}, k, v, cells)[0] == 0.0);  // sees nothing -> 0
    cells = {cell(0), cell(1), cell(2), cell(3), cell(4)};

    // Empty cells are never visible.
    cells[4].pos = -1;
    CHECK(attention(p, q, {{4, 0}}, k, v, cells)[0] == Approx(1111.0 / 4).epsilon(1e-14));
    cells[4].pos = 4;

    // Sliding window W = 2 at q.pos = 4: q.pos - cell.pos < 2 -> cells 3, 4.
    p.window = 2;
    CHECK(attention(p, q, {{4, 0}}, k, v, cells)[0] == Approx(11000.0 / 2).epsilon(1e-14));
    // StreamingLLM: the first n_keep = 1 positions ignore the window.
    p.n_keep = 1;
    CHECK(attention(p, q, {{4, 0}}, k, v, cells)[0] == Approx(11001.0 / 3).epsilon(1e-14));
    // ... but not causality or sequences.
    CHECK(attention(p, q, {{0, 0}}, k, v, cells)[0] == Approx(1.0).epsilon(1e-14));
    cells[0].seq_ids = {3};
    CHECK(attention(p, q, {{4, 0}}, k, v, cells)[0] == Approx(11000.0 / 2).epsilon(1e-14));
}

TEST_CASE("ref attention: softmax weights by hand", "[reference][attention]") {
    AttnParams p = tiny_params();
    p.scale = 0.5;
    const float q[1] = {2.0f};
    const float k[2] = {1.0f, -1.0f};  // scores 1 and -1
    const float v[2] = {3.0f, -5.0f};
    const std::vector<AttnCell> cells = {cell(0), cell(1)};
    const double e = std::exp(2.0);  // weight ratio e^1 / e^-1
    const double expect = (3.0 * e - 5.0) / (e + 1.0);
    CHECK(attention(p, q, {{1, 0}}, k, v, cells)[0] == Approx(expect).epsilon(1e-14));

    const std::vector<double> w = attention_weights(p, q, {1, 0}, 0, k, cells);
    CHECK(w[0] == Approx(e / (e + 1.0)).epsilon(1e-14));
    CHECK(w[0] + w[1] == Approx(1.0).epsilon(1e-15));
}

TEST_CASE("ref attention: learned sink logit only adds to the denominator", "[reference][attention]") {
    AttnParams p = tiny_params();
    const float q[1] = {1.0f};
    const float k[2] = {0.0f, 0.0f};  // scores 0, 0
    const float v[2] = {4.0f, 8.0f};
    const std::vector<AttnCell> cells = {cell(0), cell(1)};
    p.sinks = {static_cast<float>(std::log(2.0))};
    // Weights e^0 / (e^0 + e^0 + e^ln2) = 1/4 each.
    const std::vector<double> w = attention_weights(p, q, {1, 0}, 0, k, cells);
    CHECK(w[0] == Approx(0.25).epsilon(1e-7));  // sink stored as float
    CHECK(w[1] == Approx(0.25).epsilon(1e-7));
    const double sink = static_cast<double>(p.sinks[0]);
    CHECK(attention(p, q, {{1, 0}}, k, v, cells)[0] == Approx(12.0 / (2.0 + std::exp(sink))).epsilon(1e-14));
    // A very large sink takes nearly all the mass, without overflow.
    p.sinks = {1000.0f};
    const double out = attention(p, q, {{1, 0}}, k, v, cells)[0];
    CHECK(std::isfinite(out));
    CHECK(out == Approx(12.0 * std::exp(-1000.0)).margin(1e-300));
    // With no visible cell the output is zero, sink or not.
    CHECK(attention(p, q, {{1, 5}}, k, v, cells)[0] == 0.0);
}

TEST_CASE("ref attention: logit soft-capping", "[reference][attention]") {
    AttnParams p = tiny_params();
    p.scale = 1.5;
    p.softcap = 2.0;
    const float q[1] = {2.0f};
    const float k[2] = {1.0f, 0.0f};  // scaled scores 3 and 0
    const float v[2] = {1.0f, 0.0f};
    const double s0 = 2.0 * std::tanh(3.0 / 2.0);
    const double w0 = std::exp(s0) / (std::exp(s0) + 1.0);
    CHECK(attention(p, q, {{1, 0}}, k, v, {cell(0), cell(1)})[0] == Approx(w0).epsilon(1e-14));
    p.softcap = 0.0;
    const double w0_uncapped = std::exp(3.0) / (std::exp(3.0) + 1.0);
    CHECK(attention(p, q, {{1, 0}}, k, v, {cell(0), cell(1)})[0] == Approx(w0_uncapped).epsilon(1e-14));
}

TEST_CASE("ref attention: ALiBi slopes and bias", "[reference][attention]") {
    // 8 heads, max_bias 8: m0 = 2^-1, slopes 2^-1 .. 2^-8.
    for (int h = 0; h < 8; ++h) {
        CHECK(alibi_slope(h, 8, 8.0) == Approx(std::pow(2.0, -(h + 1))).epsilon(1e-15));
    }
    // 12 heads: n_log2 = 8; heads >= 8 use m1 = 2^(-4/8) with odd powers.
    CHECK(alibi_slope(7, 12, 8.0) == Approx(std::pow(2.0, -8)).epsilon(1e-15));
    CHECK(alibi_slope(8, 12, 8.0) == Approx(std::pow(2.0, -0.5)).epsilon(1e-15));
    CHECK(alibi_slope(9, 12, 8.0) == Approx(std::pow(2.0, -1.5)).epsilon(1e-15));
    CHECK(alibi_slope(11, 12, 8.0) == Approx(std::pow(2.0, -3.5)).epsilon(1e-15));
    CHECK(alibi_slope(3, 12, 0.0) == 1.0);

    AttnParams p = tiny_params();
    p.n_heads = 2;
    p.n_kv_heads = 1;
    p.max_bias = 8.0;  // n_log2 = 2: slopes 2^-4, 2^-8
    const float q[2] = {1.0f, 1.0f};
    const float k[2] = {0.0f, 0.0f};
    const float v[2] = {1.0f, 0.0f};
    // Query at 3; cells at 1 and 3: logits -2 slope and 0.
    const std::vector<double> out = attention(p, q, {{3, 0}}, k, v, {cell(1), cell(3)});
    for (int h = 0; h < 2; ++h) {
        const double slope = std::pow(2.0, -4.0 * (h + 1));
        const double a = std::exp(-2.0 * slope);
        CHECK(out[static_cast<size_t>(h)] == Approx(a / (a + 1.0)).epsilon(1e-14));
    }
}

TEST_CASE("ref attention: GQA maps query heads to KV heads", "[reference][attention]") {
    CHECK(kv_head_of(0, 8, 2) == 0);
    CHECK(kv_head_of(3, 8, 2) == 0);
    CHECK(kv_head_of(4, 8, 2) == 1);
    CHECK(kv_head_of(7, 8, 8) == 7);
    CHECK(kv_head_of(5, 8, 1) == 0);
    CHECK_THROWS_AS(kv_head_of(0, 6, 4), std::invalid_argument);

    AttnParams p;
    p.n_heads = 4;
    p.n_kv_heads = 2;
    p.head_dim_k = 2;
    p.head_dim_v = 2;
    p.scale = 1.0;
    // Two cells; KV head 0 prefers cell 0 strongly, KV head 1 prefers cell 1.
    const float k[2 * 2 * 2] = {
        20.0f, 0.0f, /* cell 0 head 0 */ 0.0f, 0.0f,    /* cell 0 head 1 */
        0.0f, 0.0f,  /* cell 1 head 0 */ 20.0f, 0.0f,   /* cell 1 head 1 */
    };
    const float v[2 * 2 * 2] = {1, 2, 3, 4, 5, 6, 7, 8};
    std::vector<float> q(4 * 2, 0.0f);
    for (int h = 0; h < 4; ++h) {
        q[static_cast<size_t>(h) * 2] = 1.0f;
    }
    const std::vector<double> out = attention(p, q.data(), {{1, 0}}, k, v, {cell(0), cell(1)});
    const double w = 1.0 / (1.0 + std::exp(-20.0));  // weight of the preferred cell
    // Heads 0, 1 read KV head 0: mostly V[0][0] = (1, 2), rest V[1][0] = (5, 6).
    for (int h = 0; h < 2; ++h) {
        CHECK(out[static_cast<size_t>(h) * 2 + 0] == Approx(w * 1 + (1 - w) * 5).epsilon(1e-14));
        CHECK(out[static_cast<size_t>(h) * 2 + 1] == Approx(w * 2 + (1 - w) * 6).epsilon(1e-14));
    }
    // Heads 2, 3 read KV head 1: mostly V[1][1] = (7, 8), rest V[0][1] = (3, 4).
    for (int h = 2; h < 4; ++h) {
        CHECK(out[static_cast<size_t>(h) * 2 + 0] == Approx(w * 7 + (1 - w) * 3).epsilon(1e-14));
        CHECK(out[static_cast<size_t>(h) * 2 + 1] == Approx(w * 8 + (1 - w) * 4).epsilon(1e-14));
    }
    p.n_kv_heads = 3;
    CHECK_THROWS_AS(attention(p, q.data(), {{1, 0}}, k, v, {cell(0), cell(1)}), std::invalid_argument);
}

TEST_CASE("ref attention: cell order does not matter; large logits are stable", "[reference][attention]") {
    AttnParams p;
    p.n_heads = 2;
    p.n_kv_heads = 1;
    p.head_dim_k = 8;
    p.head_dim_v = 4;
    p.scale = 40.0;  // logits in the hundreds: a naive exp would overflow
    const int n_cells = 6;
    const std::vector<float> q = random_floats(2 * 2 * 8, 1.0f, 11);
    const std::vector<float> k = random_floats(n_cells * 8, 1.0f, 12);
    const std::vector<float> v = random_floats(n_cells * 4, 1.0f, 13);
    std::vector<AttnCell> cells;
    for (int c = 0; c < n_cells; ++c) {
        cells.push_back(cell(c));
    }
    const std::vector<AttnQuery> queries = {{3, 0}, {5, 0}};
    const std::vector<double> out = attention(p, q.data(), queries, k.data(), v.data(), cells);
    for (double x : out) {
        REQUIRE(std::isfinite(x));
    }
    // Reverse the cells together with their K and V rows.
    std::vector<float> k_rev(k.size());
    std::vector<float> v_rev(v.size());
    std::vector<AttnCell> cells_rev;
    for (int c = 0; c < n_cells; ++c) {
        const int src = n_cells - 1 - c;
        std::copy(k.begin() + src * 8, k.begin() + src * 8 + 8, k_rev.begin() + c * 8);
        std::copy(v.begin() + src * 4, v.begin() + src * 4 + 4, v_rev.begin() + c * 4);
        cells_rev.push_back(cells[static_cast<size_t>(src)]);
    }
    const std::vector<double> out_rev = attention(p, q.data(), queries, k_rev.data(), v_rev.data(), cells_rev);
    CHECK(max_abs_diff(out, out_rev) < 1e-14);
}

// ===========================================================================
// RoPE
// ===========================================================================

namespace {

RopeParams yarn_params(bool neox) {
    RopeParams p;
    p.n_rot = 32;
    p.neox = neox;
    p.freq_base = 500000.0;
    p.freq_scale = 0.25;
    p.ext_factor = 1.0;
    p.attn_factor = 1.0;
    p.beta_fast = 32.0;
    p.beta_slow = 1.0;
    p.n_ctx_orig = 4096;
    return p;
}

double norm(const std::vector<double>& x, int from, int to) {
    double s = 0.0;
    for (int i = from; i < to; ++i) {
        s += x[static_cast<size_t>(i)] * x[static_cast<size_t>(i)];
    }
    return std::sqrt(s);
}

}  // namespace

TEST_CASE("ref rope: normal and NeoX pairing by hand", "[reference][rope]") {
    RopeParams p;
    p.n_rot = 4;
    p.freq_base = 10000.0;  // theta_0 = 1, theta_1 = 10000^-0.5 = 0.01
    CHECK(rope_theta(p, 0) == 1.0);
    CHECK(rope_theta(p, 1) == Approx(0.01).epsilon(1e-15));
    const std::vector<float> x = {1, 2, 3, 4, 5, 6};
    const double c0 = std::cos(1.0);
    const double s0 = std::sin(1.0);
    const double c1 = std::cos(0.01);
    const double s1 = std::sin(0.01);

    const std::vector<double> normal = rope_rotate(p, x, 1.0);
    const std::vector<double> want_normal = {c0 - 2 * s0, s0 + 2 * c0, 3 * c1 - 4 * s1, 3 * s1 + 4 * c1, 5, 6};
    CHECK(max_abs_diff(normal, want_normal) < 1e-15);

    p.neox = true;
    const std::vector<double> neox = rope_rotate(p, x, 1.0);
    const std::vector<double> want_neox = {c0 - 3 * s0, 2 * c1 - 4 * s1, s0 + 3 * c0, 2 * s1 + 4 * c1, 5, 6};
    CHECK(max_abs_diff(neox, want_neox) < 1e-15);

    int a = 0;
    int b = 0;
    rope_pair_dims(p, 1, &a, &b);
    CHECK((a == 1 && b == 3));
    p.neox = false;
    rope_pair_dims(p, 1, &a, &b);
    CHECK((a == 2 && b == 3));
    CHECK_THROWS_AS(rope_rotate(p, std::vector<float>(3, 1.0f), 1.0), std::invalid_argument);
}

TEST_CASE("ref rope: rotate to p then shift by d equals rotate to p+d", "[reference][rope]") {
    const int head_dim = 40;  // n_rot = 32 < head_dim: 8 tail dims
    const std::vector<float> k = random_floats(head_dim, 2.0f, 21);
    for (bool neox : {false, true}) {
        for (bool yarn : {false, true}) {
            RopeParams p = yarn ? yarn_params(neox) : RopeParams{};
            if (!yarn) {
                p.n_rot = 32;
                p.neox = neox;
                p.freq_scale = 0.5;
                p.attn_factor = 1.25;  // magnitude != 1 even without YaRN
                p.freq_factors.assign(16, 1.0f);
                p.freq_factors[3] = 8.0f;
            }
            for (double pos : {0.0, 7.0, 913.0}) {
                for (double d : {1.0, -5.0, 64.0, -400.0}) {
                    std::vector<double> shifted = rope_rotate(p, k, pos);
                    rope_shift(p, shifted.data(), shifted.data(), head_dim, d);
                    const std::vector<double> fresh = rope_rotate(p, k, pos + d);
                    INFO("neox " << neox << " yarn " << yarn << " pos " << pos << " d " << d);
                    REQUIRE(max_abs_diff(shifted, fresh) < 1e-12);
                }
            }
        }
    }
}

TEST_CASE("ref rope: +d then -d is the identity; shifts have magnitude 1", "[reference][rope]") {
    const int head_dim = 48;
    const RopeParams p = yarn_params(true);
    REQUIRE(rope_mscale(p) > 1.1);
    const std::vector<float> k = random_floats(head_dim, 1.0f, 22);
    std::vector<double> x(k.begin(), k.end());
    const std::vector<double> orig = x;
    rope_shift(p, x.data(), x.data(), head_dim, 123.0);
    CHECK(max_abs_diff(x, orig) > 0.1);  // it did move
    CHECK(norm(x, 0, head_dim) == Approx(norm(orig, 0, head_dim)).epsilon(1e-14));
    rope_shift(p, x.data(), x.data(), head_dim, -123.0);
    CHECK(max_abs_diff(x, orig) < 1e-14);
}

TEST_CASE("ref rope: dims at or beyond n_rot are untouched", "[reference][rope]") {
    const int head_dim = 64;
    for (bool neox : {false, true}) {
        RopeParams p = yarn_params(neox);  // n_rot = 32, mscale != 1
        const std::vector<float> k = random_floats(head_dim, 3.0f, 23);
        const std::vector<double> r = rope_rotate(p, k, 77.0);
        for (int i = p.n_rot; i < head_dim; ++i) {
            REQUIRE(r[static_cast<size_t>(i)] == static_cast<double>(k[static_cast<size_t>(i)]));
        }
        // The rotated part keeps its norm times the magnitude factor.
        const std::vector<double> kd(k.begin(), k.end());
        CHECK(norm(r, 0, p.n_rot) == Approx(rope_mscale(p) * norm(kd, 0, p.n_rot)).epsilon(1e-14));
        const std::vector<double> s = rope_shift(p, k, -9.0);
        for (int i = p.n_rot; i < head_dim; ++i) {
            REQUIRE(s[static_cast<size_t>(i)] == static_cast<double>(k[static_cast<size_t>(i)]));
        }
    }
}

TEST_CASE("ref rope: YaRN corr dims, ramp and magnitude", "[reference][rope]") {
    RopeParams p;
    p.n_rot = 128;
    p.freq_base = 10000.0;
    p.freq_scale = 0.25;
    p.ext_factor = 1.0;
    p.attn_factor = 1.0;
    p.beta_fast = 32.0;
    p.beta_slow = 1.0;
    p.n_ctx_orig = 4096;
    // cd(32) = 128 ln(4096 / 64 pi) / (2 ln 1e4) = 20.94; cd(1) = 45.03.
    double dims[2];
    rope_corr_dims(p, dims);
    CHECK(dims[0] == 20.0);
    CHECK(dims[1] == 46.0);
    auto base_i = [&](int i) { return std::pow(10000.0, -2.0 * i / 128); };
    // Below lo: pure extrapolation (ext_factor 1); above hi: interpolation.
    CHECK(rope_theta(p, 5) == Approx(base_i(5)).epsilon(1e-15));
    CHECK(rope_theta(p, 20) == Approx(base_i(20)).epsilon(1e-15));
    CHECK(rope_theta(p, 46) == Approx(0.25 * base_i(46)).epsilon(1e-15));
    CHECK(rope_theta(p, 63) == Approx(0.25 * base_i(63)).epsilon(1e-15));
    // In between: ramp = 1 - (i - 20) / 26.
    const double ramp = 1.0 - (33.0 - 20.0) / 26.0;
    CHECK(rope_theta(p, 33) == Approx(0.25 * base_i(33) * (1 - ramp) + base_i(33) * ramp).epsilon(1e-15));
    CHECK(rope_mscale(p) == Approx(1.0 + 0.1 * std::log(4.0)).epsilon(1e-15));
    CHECK(rope_angle(p, 33, 100.0) == Approx(100.0 * rope_theta(p, 33)).epsilon(1e-15));
    // Without YaRN: theta = freq_scale * base_i, magnitude = attn_factor.
    p.ext_factor = 0.0;
    p.attn_factor = 0.5;
    CHECK(rope_theta(p, 5) == Approx(0.25 * base_i(5)).epsilon(1e-15));
    CHECK(rope_mscale(p) == 0.5);
    // Frequency factors divide the base frequency.
    p.freq_factors.assign(64, 1.0f);
    p.freq_factors[5] = 4.0f;
    CHECK(rope_theta(p, 5) == Approx(0.25 * base_i(5) / 4.0).epsilon(1e-15));
}

// ===========================================================================
// MV/MK memory
// ===========================================================================

TEST_CASE("ref memory: update and read by hand", "[reference][memory]") {
    // M = 2, E = 1, D = 1; MK = [[1], [0]].
    MemoryHead mem = memory_head_init(2, 1, 1, {1.0f, 0.0f}, {0.0f, 0.0f});
    const float zero[1] = {0.0f};
    double out[1] = {-1.0};
    memory_read(mem, zero, 1.0, out);
    CHECK(out[0] == 0.0);  // empty memory reads 0

    // wq = ln 3: scores (ln 3, 0) -> ww = (3/4, 1/4); wv = 4 -> MV = (3, 1).
    const float wq1[1] = {static_cast<float>(std::log(3.0))};
    const float wv1[1] = {4.0f};
    const std::vector<double> ww = memory_update_weights(mem, wq1);
    CHECK(ww[0] == Approx(0.75).epsilon(1e-7));
    memory_update(mem, wq1, wv1);
    CHECK(mem.mv[0] == Approx(3.0).epsilon(1e-7));
    CHECK(mem.mv[1] == Approx(1.0).epsilon(1e-7));
    CHECK(mem.mk[0] == 1.0);  // MK never changes

    memory_read(mem, zero, 1.0, out);  // weights (1/2, 1/2)
    CHECK(out[0] == Approx(2.0).epsilon(1e-7));
    memory_read(mem, wq1, 1.0, out);   // weights (3/4, 1/4): 9/4 + 1/4
    CHECK(out[0] == Approx(2.5).epsilon(1e-7));
    memory_read(mem, wq1, 0.0, out);   // scale 0: uniform
    CHECK(out[0] == Approx(2.0).epsilon(1e-15));

    // wq = 0: ww = (1/2, 1/2); wv = 2 -> MV = (4, 2).
    const float wv2[1] = {2.0f};
    memory_update(mem, zero, wv2);
    CHECK(mem.mv[0] == Approx(4.0).epsilon(1e-7));
    CHECK(mem.mv[1] == Approx(2.0).epsilon(1e-7));
}

TEST_CASE("ref memory: a chunk reads MV including each token's own update", "[reference][memory]") {
    const int m = 4;
    const int e = 3;
    const int d = 2;
    const int n = 5;
    const std::vector<float> mk = random_floats(m * e, 1.0f, 31);
    const std::vector<float> wq = random_floats(n * e, 1.0f, 32);
    const std::vector<float> wv = random_floats(n * d, 1.0f, 33);
    const std::vector<float> q = random_floats(n * e, 1.0f, 34);
    MemoryHead chunk = memory_head_init(m, e, d, mk, std::vector<float>(m * d, 0.0f));
    MemoryHead step = chunk;
    std::vector<double> out(n * d);
    memory_process_chunk(chunk, n, wq.data(), wv.data(), q.data(), 0.7, out.data());

    // The explicit sum MV_t = MV_0 + sum_{i<=t} ww_i (outer) wv_i.
    std::vector<double> mv(m * d, 0.0);
    for (int t = 0; t < n; ++t) {
        const std::vector<double> ww = memory_update_weights(step, wq.data() + t * e);
        for (int r = 0; r < m; ++r) {
            for (int j = 0; j < d; ++j) {
                mv[static_cast<size_t>(r * d + j)] += ww[static_cast<size_t>(r)] * wv[static_cast<size_t>(t * d + j)];
            }
        }
        MemoryHead at_t = step;
        at_t.mv = mv;
        double read[2];
        memory_read(at_t, q.data() + t * e, 0.7, read);
        CHECK(read[0] == Approx(out[static_cast<size_t>(t * d)]).epsilon(1e-14));
        CHECK(read[1] == Approx(out[static_cast<size_t>(t * d + 1)]).epsilon(1e-14));
    }
    CHECK(max_abs_diff(chunk.mv, mv) < 1e-14);

    Memory all = memory_zero(2, 3, m, e, d);
    CHECK(all.heads.size() == 6);
    CHECK(all.at(1, 2).m == m);
    CHECK_THROWS_AS(all.at(2, 0), std::out_of_range);
    CHECK_THROWS_AS(memory_head_init(2, 1, 1, {1.0f}, {0.0f, 0.0f}), std::invalid_argument);
}

// ===========================================================================
// Metrics
// ===========================================================================

TEST_CASE("ref metrics: nmse and max_abs_diff", "[reference][metrics]") {
    const std::vector<double> b = {1.0, -2.0, 2.0};
    const std::vector<float> a = {1.0f, -2.0f, 3.0f};
    CHECK(nmse(a, b) == Approx(1.0 / 9.0).epsilon(1e-15));
    CHECK(nmse(b, b) == 0.0);
    CHECK(max_abs_diff(a, b) == 1.0);
    const std::vector<double> zeros = {0.0, 0.0};
    CHECK(nmse(zeros, zeros) == 0.0);
    CHECK(std::isinf(nmse(std::vector<double>{0.0, 1e-30}, zeros)));
    CHECK(std::isnan(nmse(std::vector<double>{NAN, 0.0}, std::vector<double>{1.0, 1.0})));
    CHECK(std::isnan(max_abs_diff(std::vector<double>{NAN}, std::vector<double>{1.0})));
    CHECK_THROWS_AS(nmse(a, zeros), std::invalid_argument);
}
