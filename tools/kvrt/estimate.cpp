// `kvrt estimate`: the memory a cache needs, before anything is allocated.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.hpp"
#include "kv_types.hpp"

namespace cli {

namespace {

const char* kUsage =
    "usage: kvrt estimate --layers N --kv-heads N --head-dim N [--head-dim-v N] [--heads N]\n"
    "                     [--type T] [--type-v T] [--layout cells|static|paged] [--cells N]\n"
    "                     [--seq-len S] [--reserve R] [--style S] [--seqs N] [--block B]\n"
    "                     [--prefix P --own T]\n"
    "                     [--window W [--global-every N] [--window-cells C] [--keep K]] [--json]\n"
    "  Prints the sizes of a cache with this geometry, computed by kvrt_cache_estimate_size\n"
    "  before anything is allocated (assuming a 128 MiB largest binding, the common mobile\n"
    "  and lavapipe limit). Byte counts are exact integers, printed with thousands\n"
    "  separators and plain.\n"
    "\n"
    "  --layers N        layers (required)\n"
    "  --kv-heads N      KV heads (required)\n"
    "  --head-dim N      K head dim (required); --head-dim-v N: V's, if it differs\n"
    "  --heads N         query heads (default: --kv-heads; does not change the sizes)\n"
    "  --type T          K type, and V's unless --type-v: f32, f16 (default), q8_0, q4_0,\n"
    "                    u8_static, u16_static. The static-scale types are estimated with a\n"
    "                    placeholder scale (1, zero point 0): only sizes are computed, and\n"
    "                    they do not depend on the scales. The static layout takes f32,\n"
    "                    f16, u8_static and u16_static.\n"
    "  --layout L        cells (default): --cells N tokens (default 4096) shared by the\n"
    "                    sequences.\n"
    "                    static: the static padded layout of NPU/DSP graphs (SPEC 5): each\n"
    "                    sequence has, per layer and KV head, a K and a V window of S-1\n"
    "                    rows inside a region of ceil(R x (S-1)) reserved rows. Prints the\n"
    "                    window and reserved rows, the bytes per region, the K/V data (whole\n"
    "                    rows, what kvrt allocates), SPEC 5's fractional count\n"
    "                    R x layers x KV heads x (S-1) x (D_k x bytes_k + D_v x bytes_v)\n"
    "                    per sequence (2 x R x ... x D x bytes when K and V are alike), and\n"
    "                    the device memory.\n"
    "                    paged: a pool of blocks of B tokens with prefix sharing and\n"
    "                    copy-on-write (kvrt_paged.h): --cells N (a multiple of B, default\n"
    "                    4096), or the cells that --seqs sequences need when they share a\n"
    "                    --prefix of P tokens and add --own T tokens each: the prefix's full\n"
    "                    blocks once, every other block per sequence. Then also prints what a\n"
    "                    cell cache needs for the same sequences, each keeping its own copy.\n"
    "  --block B         paged: tokens per block, 16 (default), 32 or 64\n"
    "  --prefix P        paged: tokens every sequence starts with (with --own)\n"
    "  --own T           paged: tokens of each sequence after the prefix (with --prefix)\n"
    "  --seq-len S       static: the graph's sequence length S >= 2 (required with static)\n"
    "  --reserve R       static: rows reserved per region as a multiple of S-1, a decimal\n"
    "                    >= 1 (default 2)\n"
    "  --style S         static: shift-pointer (default) or smart-mask (a ring of S-1 rows\n"
    "                    that never moves: R = 1)\n"
    "  --window W        cells, paged: layers with a sliding window of W tokens that keep their rows\n"
    "                    in a group of their own (kvrt_window_layout_desc), so their memory\n"
    "                    follows the window, not --cells. Prints the group's cells and what\n"
    "                    the cache would need with every layer keeping every cell.\n"
    "  --global-every N  with --window: every N-th layer (N-1, 2N-1, ...) attends to the whole\n"
    "                    context (2: alternating, as Gemma 2; 6: Gemma 3's 5 local to 1\n"
    "                    global); 0 (default): every layer is windowed (Mistral 7B v0.1)\n"
    "  --window-cells C  with --window: the group's cells (default: min(--cells,\n"
    "                    seqs x (W + K) + 512))\n"
    "  --keep K          with --window: positions below K the group never drops (sinks)\n"
    "  --seqs N          sequences (max_seqs): static: each has its own windows (default\n"
    "                    1); cells: ids 0..N-1 (default 64; the size does not depend on it)\n"
    "  --json            print one JSON object with the same figures\n"
    "\n"
    "Exit status: 0, or 2 for bad options or a geometry kvrt refuses.\n";

const char* const kOptions[] = {"layers", "kv-heads", "heads",   "head-dim", "head-dim-v", "type",
                                "type-v", "layout",   "cells",   "seq-len",  "reserve",    "seqs",
                                "block",  "prefix",   "own",     "json",     "help",       "window",
                                "global-every", "window-cells", "keep", "style"};

int usage_error(const std::string& message) {
    std::fprintf(stderr, "error: %s\nRun 'kvrt estimate --help' for the options.\n", message.c_str());
    return 2;
}

// Rejects unknown options and positional arguments, which Args accepts.
bool known_options(int argc, char** argv, std::string* error) {
    for (int i = 0; i < argc; ++i) {
        const std::string a = argv[i];
        if (a.rfind("--", 0) != 0) {
            *error = "unexpected argument '" + a + "'";
            return false;
        }
        const size_t eq = a.find('=');
        const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
        bool known = false;
        for (const char* n : kOptions) known = known || name == n;
        if (!known) {
            *error = "unknown option '" + a + "'";
            return false;
        }
        if (name != "json" && name != "help" && eq == std::string::npos) ++i;  // skip the value
    }
    return true;
}

// 2146435072 -> "2,146,435,072".
std::string grouped(uint64_t v) {
    std::string digits = std::to_string(v), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

std::string human(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.2f %s", bytes, units[u]);
    return buf;
}

// "2,146,435,072 (2146435072) bytes, 2.00 GiB".
std::string bytes_text(uint64_t v) {
    return grouped(v) + " (" + std::to_string(v) + ") bytes, " + human(static_cast<double>(v));
}

// A non-negative decimal with up to two decimals, trailing zeros dropped:
// "1609826304", "1609826304.5". `group` adds thousands separators.
std::string decimal(long double v, bool group) {
    const long double cents = std::round(v * 100.0L);
    const uint64_t whole = static_cast<uint64_t>(cents / 100.0L);
    const unsigned frac = static_cast<unsigned>(cents - static_cast<long double>(whole) * 100.0L);
    std::string out = group ? grouped(whole) : std::to_string(whole);
    if (frac) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), frac % 10 ? ".%02u" : ".%u", frac % 10 ? frac : frac / 10);
        out += buf;
    }
    return out;
}

unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }

struct Request {
    kvrt_cache_desc desc = KVRT_CACHE_DESC_INIT;
    std::string type_k, type_v;
    bool is_static = false, is_paged = false;
    uint32_t seq_len = 0, seqs = 0, block = 16;
    uint64_t prefix = 0, own = 0;  // paged: the workload the cells were sized for (0: --cells given)
    double reserve = 2.0;
    bool smart_mask = false;  // --style smart-mask
    // --window: each layer's window and the group's desc.
    std::vector<uint32_t> windows;
    uint32_t window = 0, windowed_layers = 0;
    kvrt_window_layout_desc group = KVRT_WINDOW_LAYOUT_DESC_INIT;
    uint32_t group_cells = 0;       // resolved as kvrt does
    uint64_t plain_data_bytes = 0;  // with every layer keeping every cell
};

// Reads the options into `req`; false with a message for bad values.
bool parse(const Args& args, Request* req, std::string* error) {
    uint64_t layers = 0, kv_heads = 0, heads = 0, dk = 0, dv = 0, cells = 0, seq_len = 0, seqs = 0;
    if (!args.u64("layers", 0, &layers, error) || !args.u64("kv-heads", 0, &kv_heads, error) ||
        !args.u64("heads", 0, &heads, error) || !args.u64("head-dim", 0, &dk, error) ||
        !args.u64("head-dim-v", 0, &dv, error) || !args.u64("cells", 4096, &cells, error) ||
        !args.u64("seq-len", 0, &seq_len, error) || !args.u64("seqs", 0, &seqs, error) ||
        !args.f64("reserve", 2.0, &req->reserve, error))
        return false;
    if (layers == 0 || kv_heads == 0 || dk == 0) {
        *error = "--layers, --kv-heads and --head-dim are required and must be positive";
        return false;
    }
    for (const char* name : {"heads", "head-dim-v", "seqs"}) {
        uint64_t v = 0;
        args.u64(name, 1, &v, error);
        if (v == 0) {
            *error = "--" + std::string(name) + " must be positive";
            return false;
        }
    }
    if (layers > UINT32_MAX || kv_heads > UINT32_MAX || heads > UINT32_MAX || dk > UINT32_MAX || dv > UINT32_MAX ||
        cells > UINT32_MAX || seq_len > UINT32_MAX || seqs > UINT32_MAX) {
        *error = "sizes must fit in 32 bits";
        return false;
    }

    const std::string layout = args.str("layout", "cells");
    if (layout != "cells" && layout != "static" && layout != "paged") {
        *error = "unknown --layout '" + layout + "' (cells, static or paged)";
        return false;
    }
    req->is_static = layout == "static";
    req->is_paged = layout == "paged";
    for (const char* name : {"block", "prefix", "own"}) {
        if (!req->is_paged && args.has(name)) {
            *error = "--" + std::string(name) + " applies to --layout paged only";
            return false;
        }
    }
    if (req->is_paged) {
        uint64_t block = 0;
        if (!args.u64("block", 16, &block, error) || !args.u64("prefix", 0, &req->prefix, error) ||
            !args.u64("own", 0, &req->own, error))
            return false;
        if (block != 16 && block != 32 && block != 64) {
            *error = "--block must be 16, 32 or 64, not " + args.str("block");
            return false;
        }
        req->block = static_cast<uint32_t>(block);
        if (args.has("prefix") != args.has("own")) {
            *error = "--prefix and --own go together (the tokens every sequence shares, and its own)";
            return false;
        }
        if (args.has("prefix")) {
            if (args.has("cells")) {
                *error = "give --cells or --prefix and --own, not both";
                return false;
            }
            if (req->own == 0 || req->prefix > (1u << 30) || req->own > (1u << 30)) {
                *error = "--own must be positive, and --prefix and --own at most 2^30";
                return false;
            }
            const uint64_t n_seqs = seqs ? seqs : 64, per_seq = (req->prefix + req->own + block - 1) / block;
            const uint64_t blocks = req->prefix / block + n_seqs * (per_seq - req->prefix / block);
            cells = blocks * block;
        } else if (cells % block != 0) {
            *error = "--cells " + std::to_string(cells) + " is not a multiple of --block " + std::to_string(block);
            return false;
        }
    }
    if (req->is_static) {
        if (args.has("cells")) {
            *error = "--cells does not apply to --layout static: its rows are seqs x ceil(R x (S-1)) (give --seq-len, "
                     "--reserve and --seqs)";
            return false;
        }
        if (!args.has("seq-len")) {
            *error = "--layout static needs --seq-len S (the graph's sequence length, at least 2)";
            return false;
        }
        if (seq_len < 2) {
            *error = "--seq-len must be at least 2 (windows of S-1 rows), not " + std::to_string(seq_len);
            return false;
        }
        if (!std::isfinite(req->reserve) || req->reserve < 1.0) {
            *error = "--reserve must be a finite decimal >= 1 (the region holds R x (S-1) rows), not " +
                     args.str("reserve");
            return false;
        }
        const std::string style = args.str("style", "shift-pointer");
        if (style != "shift-pointer" && style != "smart-mask") {
            *error = "unknown --style '" + style + "' (shift-pointer or smart-mask)";
            return false;
        }
        req->smart_mask = style == "smart-mask";
        if (req->smart_mask) {
            if (args.has("reserve") && req->reserve != 1.0) {
                *error = "--style smart-mask keeps S-1 rows per region (R = 1), not --reserve " + args.str("reserve");
                return false;
            }
            req->reserve = 1.0;
        }
    } else {
        for (const char* name : {"seq-len", "reserve", "style"}) {
            if (args.has(name)) {
                *error = "--" + std::string(name) + " applies to --layout static only";
                return false;
            }
        }
        if (cells == 0) {
            *error = "--cells must be positive";
            return false;
        }
    }

    for (const char* name : {"global-every", "window-cells", "keep"}) {
        if (args.has(name) && !args.has("window")) {
            *error = "--" + std::string(name) + " goes with --window";
            return false;
        }
    }
    if (args.has("window")) {
        uint64_t window = 0, every = 0, group_cells = 0, keep = 0;
        if (!args.u64("window", 0, &window, error) || !args.u64("global-every", 0, &every, error) ||
            !args.u64("window-cells", 0, &group_cells, error) || !args.u64("keep", 0, &keep, error))
            return false;
        if (req->is_static) {
            *error = "--window applies to --layout cells and paged only";
            return false;
        }
        if (window == 0 || window > UINT32_MAX || every > layers || group_cells > UINT32_MAX || keep > UINT32_MAX) {
            *error = "--window must be positive, --global-every at most --layers, and sizes must fit in 32 bits";
            return false;
        }
        req->window = static_cast<uint32_t>(window);
        req->windows.assign(layers, static_cast<uint32_t>(window));
        for (uint64_t l = 0; every && l < layers; ++l)
            if ((l + 1) % every == 0) req->windows[l] = 0;
        for (uint32_t w : req->windows) req->windowed_layers += w ? 1 : 0;
        req->group.cells = static_cast<uint32_t>(group_cells);
        req->group.n_keep = static_cast<uint32_t>(keep);
    }

    req->type_k = args.str("type", "f16");
    req->type_v = args.str("type-v", req->type_k);
    kvrt_cache_desc& d = req->desc;
    if (kvrt_type_from_name(req->type_k.c_str(), &d.type_k) != KVRT_SUCCESS) {
        *error = "--type: unknown type '" + req->type_k + "' (" + type_names() + ")";
        return false;
    }
    if (kvrt_type_from_name(req->type_v.c_str(), &d.type_v) != KVRT_SUCCESS) {
        *error = "--type-v: unknown type '" + req->type_v + "' (" + type_names() + ")";
        return false;
    }
    req->type_k = type_name(d.type_k);
    req->type_v = type_name(d.type_v);
    d.n_layers = static_cast<uint32_t>(layers);
    d.n_kv_heads = static_cast<uint32_t>(kv_heads);
    d.n_heads = static_cast<uint32_t>(heads ? heads : kv_heads);
    d.head_dim_k = static_cast<uint32_t>(dk);
    d.head_dim_v = static_cast<uint32_t>(dv ? dv : dk);
    d.max_seqs = static_cast<uint32_t>(seqs);  // 0: the layout's default
    d.layout = req->is_static ? KVRT_LAYOUT_STATIC : req->is_paged ? KVRT_LAYOUT_PAGED : KVRT_LAYOUT_CELLS;
    d.capacity = req->is_static ? 0 : static_cast<uint32_t>(cells);
    req->seq_len = static_cast<uint32_t>(seq_len);
    req->seqs = seqs ? static_cast<uint32_t>(seqs) : req->is_static ? 1 : 64;
    return true;
}

// The static layout's figures, derived from the request as kvrt.h defines
// them (W = S-1, ceil(R x W) reserved rows per region).
struct StaticFigures {
    uint64_t window_rows = 0, reserved_rows = 0, region_bytes_k = 0, region_bytes_v = 0, regions = 0;
    long double reserved_exact = 0;  // R x (S-1), fractional
    long double fractional_bytes = 0;
};

StaticFigures static_figures(const Request& req) {
    const kvrt_cache_desc& d = req.desc;
    StaticFigures f;
    f.window_rows = req.seq_len - 1u;
    f.reserved_rows = static_cast<uint64_t>(std::ceil(req.reserve * static_cast<double>(f.window_rows)));
    f.region_bytes_k = f.reserved_rows * d.head_dim_k * value_bytes(d.type_k);
    f.region_bytes_v = f.reserved_rows * d.head_dim_v * value_bytes(d.type_v);
    f.regions = 2ull * req.seqs * d.n_layers * d.n_kv_heads;
    f.reserved_exact = static_cast<long double>(req.reserve) * static_cast<long double>(f.window_rows);
    const long double row_pair = static_cast<long double>(d.head_dim_k) * value_bytes(d.type_k) +
                                 static_cast<long double>(d.head_dim_v) * value_bytes(d.type_v);
    f.fractional_bytes = f.reserved_exact * d.n_layers * d.n_kv_heads * row_pair * req.seqs;
    return f;
}

void print_json(const Request& req, const kvrt_cache_estimate& e) {
    const kvrt_cache_desc& d = req.desc;
    std::printf("{\"layout\": \"%s\", \"layers\": %u, \"kv_heads\": %u, \"heads\": %u, \"head_dim_k\": %u, "
                "\"head_dim_v\": %u, \"type_k\": \"%s\", \"type_v\": \"%s\", \"seqs\": %u, ",
                req.is_static ? "static" : req.is_paged ? "paged" : "cells", d.n_layers, d.n_kv_heads, d.n_heads, d.head_dim_k, d.head_dim_v,
                req.type_k.c_str(), req.type_v.c_str(), req.seqs);
    if (req.is_static) {
        const StaticFigures f = static_figures(req);
        std::printf("\"style\": \"%s\", ", req.smart_mask ? "smart-mask" : "shift-pointer");
        std::printf("\"seq_len\": %u, \"reserve\": %.15g, \"window_rows\": %llu, \"reserved_rows\": %llu, "
                    "\"reserved_rows_fractional\": %s, \"region_bytes_k\": %llu, \"region_bytes_v\": %llu, "
                    "\"regions\": %llu, \"fractional_bytes\": %s, ",
                    req.seq_len, req.reserve, ull(f.window_rows), ull(f.reserved_rows),
                    decimal(f.reserved_exact, false).c_str(), ull(f.region_bytes_k), ull(f.region_bytes_v),
                    ull(f.regions), decimal(f.fractional_bytes, false).c_str());
    } else {
        std::printf("\"cells\": %u, ", d.capacity);
    }
    if (req.window)
        std::printf("\"window\": %u, \"windowed_layers\": %u, \"window_cells\": %u, \"every_cell_data_bytes\": %llu, ",
                    req.window, req.windowed_layers, req.group_cells, ull(req.plain_data_bytes));
    if (req.is_paged) {
        std::printf("\"block\": %u, \"blocks\": %u, ", req.block, d.capacity / req.block);
        if (req.own)
            std::printf("\"prefix\": %llu, \"own\": %llu, \"own_copies_cells\": %llu, \"own_copies_data_bytes\": %llu, ",
                        ull(req.prefix), ull(req.own), ull(uint64_t{req.seqs} * (req.prefix + req.own)),
                        ull(uint64_t{req.seqs} * (req.prefix + req.own) * e.bytes_per_token));
    }
    std::printf("\"bytes_per_token\": %llu, \"data_bytes\": %llu, \"device_bytes\": %llu, "
                "\"max_binding_bytes\": %llu}\n",
                ull(e.bytes_per_token), ull(e.data_bytes), ull(e.device_bytes), ull(e.max_binding_bytes));
}

// The window group's lines: its cells, the data, and the same cache with
// every layer keeping every cell.
void print_window_group(const Request& req, const kvrt_cache_estimate& e) {
    const kvrt_cache_desc& d = req.desc;
    std::printf("window group      %u of %u layers with a window of %u keep %u cells\n", req.windowed_layers,
                d.n_layers, req.window, req.group_cells);
    std::printf("K/V data          %s\n", bytes_text(e.data_bytes).c_str());
    std::printf("every cell        %s: every layer keeping %u cells (group: %.3fx)\n",
                bytes_text(req.plain_data_bytes).c_str(), d.capacity,
                static_cast<double>(e.data_bytes) / static_cast<double>(req.plain_data_bytes));
}

void print_text(const Request& req, const kvrt_cache_estimate& e) {
    const kvrt_cache_desc& d = req.desc;
    std::printf("geometry          %u layers, %u KV heads (%u query heads), head dim K %u / V %u, K %s, V %s\n",
                d.n_layers, d.n_kv_heads, d.n_heads, d.head_dim_k, d.head_dim_v, req.type_k.c_str(),
                req.type_v.c_str());
    std::printf("bytes per token   %s: one token's K and V over all layers\n", bytes_text(e.bytes_per_token).c_str());
    if (req.is_paged) {
        std::printf("layout            paged: %u cells = %u blocks of %u tokens, up to %u sequences\n", d.capacity,
                    d.capacity / req.block, req.block, req.seqs);
        if (req.own)
            std::printf("                  sized for %u sequences sharing a %llu-token prefix with %llu own tokens "
                        "each\n",
                        req.seqs, ull(req.prefix), ull(req.own));
        if (req.window) print_window_group(req, e);
        else std::printf("K/V data          %s for %u cells\n", bytes_text(e.data_bytes).c_str(), d.capacity);
        if (req.own) {
            const uint64_t cells = uint64_t{req.seqs} * (req.prefix + req.own);
            std::printf("own copies        %s: a cell cache of %llu cells, each sequence\n"
                        "                  keeping its own copy (paged: %.3fx)\n",
                        bytes_text(cells * e.bytes_per_token).c_str(), ull(cells),
                        static_cast<double>(e.data_bytes) / static_cast<double>(cells * e.bytes_per_token));
        }
    } else if (!req.is_static) {
        std::printf("layout            cells: %u cells shared by up to %u sequences\n", d.capacity, req.seqs);
        if (req.window) {
            print_window_group(req, e);
        } else {
            std::printf("K/V data          %s for %u cells\n", bytes_text(e.data_bytes).c_str(), d.capacity);
        }
    } else {
        const StaticFigures f = static_figures(req);
        std::printf("layout            static padded (SPEC 5)%s: S = %u, R = %s, %u sequence%s with %s own K and V\n"
                    "                  window per layer and KV head\n",
                    req.smart_mask ? ", smart-mask ring" : "", req.seq_len, decimal(req.reserve, false).c_str(),
                    req.seqs, req.seqs == 1 ? "" : "s", req.seqs == 1 ? "its" : "their");
        std::printf("window rows       %s (S-1)\n", grouped(f.window_rows).c_str());
        std::printf("reserved rows     %s per region: ceil(R x (S-1)) = ceil(%s)\n", grouped(f.reserved_rows).c_str(),
                    decimal(f.reserved_exact, true).c_str());
        if (f.region_bytes_k == f.region_bytes_v)
            std::printf("bytes per region  %s (%llu), K and V alike: reserved rows x head dim x element size\n",
                        grouped(f.region_bytes_k).c_str(), ull(f.region_bytes_k));
        else
            std::printf("bytes per region  K %s (%llu), V %s (%llu): reserved rows x head dim x element size\n",
                        grouped(f.region_bytes_k).c_str(), ull(f.region_bytes_k), grouped(f.region_bytes_v).c_str(),
                        ull(f.region_bytes_v));
        std::printf("regions           %s: K and V x %u sequence%s x %u layers x %u KV heads\n",
                    grouped(f.regions).c_str(), req.seqs, req.seqs == 1 ? "" : "s", d.n_layers, d.n_kv_heads);
        std::printf("K/V data          %s: every region's whole reserved rows\n", bytes_text(e.data_bytes).c_str());
        const bool alike = d.head_dim_k == d.head_dim_v && req.type_k == req.type_v;
        std::printf("SPEC 5 count      %s (%s) bytes: R x (S-1) = %s rows, not rounded up:\n"
                    "                  %s%s\n",
                    decimal(f.fractional_bytes, true).c_str(), decimal(f.fractional_bytes, false).c_str(),
                    decimal(f.reserved_exact, true).c_str(),
                    alike ? "2 x R x layers x KV heads x (S-1) x D x bytes"
                          : "R x layers x KV heads x (S-1) x (D_k x bytes_k + D_v x bytes_v)",
                    req.seqs > 1 ? " x sequences" : "");
    }
    std::printf("device memory     %s, with alignment padding\n", bytes_text(e.device_bytes).c_str());
}

}  // namespace

int cmd_estimate(int argc, char** argv) {
    Args args;
    std::string error;
    if (!known_options(argc, argv, &error) || !args.parse(argc, argv, {"json", "help"}, &error))
        return usage_error(error);
    if (args.has("help")) {
        std::printf("%s", kUsage);
        return 0;
    }
    Request req;
    if (!parse(args, &req, &error)) return usage_error(error);

    // Placeholder scales for static-scale types: the sizes do not depend on them.
    const float unit_scale = 1.0f;
    const int32_t zero_point = 0;
    kvrt_static_scales_desc scales = KVRT_STATIC_SCALES_DESC_INIT;
    scales.count = 1;
    if (is_static_scale(req.desc.type_k)) {
        scales.k_scales = &unit_scale;
        scales.k_zero_points = &zero_point;
    }
    if (is_static_scale(req.desc.type_v)) {
        scales.v_scales = &unit_scale;
        scales.v_zero_points = &zero_point;
    }
    kvrt_static_layout_desc layout = KVRT_STATIC_LAYOUT_DESC_INIT;
    layout.seq_len = req.seq_len;
    layout.reserve = req.reserve;
    kvrt_static_style_desc style = KVRT_STATIC_STYLE_DESC_INIT;
    style.style = KVRT_STATIC_STYLE_SMART_MASK;
    const void** tail = &req.desc.next;
    kvrt_paged_layout_desc paged = KVRT_PAGED_LAYOUT_DESC_INIT;
    paged.block_size = req.block;
    if (req.is_static) {
        *tail = &layout;
        tail = &layout.next;
        if (req.smart_mask) {
            *tail = &style;
            tail = &style.next;
        }
    } else if (req.is_paged) {
        *tail = &paged;
        tail = &paged.next;
    }
    if (scales.k_scales || scales.v_scales) {
        *tail = &scales;
        tail = &scales.next;
    }

    kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
    kvrt_result r = KVRT_SUCCESS;
    if (req.window) {
        // The same cache with every layer keeping every cell, then the group.
        req.desc.layer_windows = req.windows.data();
        r = kvrt_cache_estimate_size(nullptr, &req.desc, &e);
        req.plain_data_bytes = e.data_bytes;
        *tail = &req.group;
        req.group_cells = req.group.cells;
        if (!req.group_cells) {
            const uint64_t fit = uint64_t{req.seqs} * (uint64_t{req.window} + req.group.n_keep) + 512;
            req.group_cells = static_cast<uint32_t>(std::min<uint64_t>(fit, req.desc.capacity));
        }
    }
    if (r == KVRT_SUCCESS) r = kvrt_cache_estimate_size(nullptr, &req.desc, &e);
    if (r == KVRT_ERROR_INVALID_ARGUMENT || r == KVRT_ERROR_UNSUPPORTED) {
        // The geometry itself is refused: a usage error, with kvrt's reason.
        std::fprintf(stderr, "error: kvrt refuses this geometry: %s\n", kvrt_last_error_message());
        return 2;
    }
    if (r != KVRT_SUCCESS) return report("estimating", r);
    if (args.has("json")) print_json(req, e);
    else print_text(req, e);
    return 0;
}

}  // namespace cli
