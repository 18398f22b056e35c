// Cache state in files: written atomically (a temporary file in the same
// directory, written, flushed to the disk, then renamed over the target, and
// the directory flushed), so that a crash at any point leaves either the old
// file or the new one; read whole and parsed like a state in memory.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/cache.hpp"
#include "core/fault.hpp"

namespace kvrt::cache {

namespace {

Result io_error(const char* what, const std::string& path, int err) {
    return fail(KVRT_ERROR_IO, "%s \"%s\": %s", what, path.c_str(), std::strerror(err));
}

// Closes a descriptor and removes a temporary file unless released.
class TempFile {
public:
    ~TempFile() {
        if (fd_ >= 0) ::close(fd_);
        if (!path_.empty()) ::unlink(path_.c_str());
    }
    int fd_ = -1;
    std::string path_;
};

Result write_all(int fd, const uint8_t* p, uint64_t n, const std::string& path) {
    while (n) {
        const ssize_t w = ::write(fd, p, static_cast<size_t>(std::min<uint64_t>(n, 1u << 30)));
        if (w < 0) {
            if (errno == EINTR) continue;
            return io_error("cannot write", path, errno);
        }
        p += w;
        n -= static_cast<uint64_t>(w);
    }
    return KVRT_SUCCESS;
}

Result write_atomically(const char* path, const std::vector<uint8_t>& bytes) {
    const std::string target(path);
    TempFile tmp;
    std::vector<char> name(target.begin(), target.end());
    const char suffix[] = ".tmp-XXXXXX";
    name.insert(name.end(), suffix, suffix + sizeof suffix);  // with the terminating zero
    tmp.fd_ = ::mkstemp(name.data());
    if (tmp.fd_ < 0) return io_error("cannot create a temporary file beside", target, errno);
    tmp.path_ = name.data();
    KVRT_TRY(write_all(tmp.fd_, bytes.data(), bytes.size(), tmp.path_));
    if (::fsync(tmp.fd_) != 0) return io_error("cannot flush", tmp.path_, errno);
    const int fd = tmp.fd_;
    tmp.fd_ = -1;
    if (::close(fd) != 0) return io_error("cannot close", tmp.path_, errno);
    KVRT_FAULT_POINT("state file rename", KVRT_ERROR_IO);
    if (::rename(tmp.path_.c_str(), target.c_str()) != 0) return io_error("cannot rename a temporary file to", target, errno);
    tmp.path_.clear();
    // The rename itself reaches the disk with the directory.
    const size_t slash = target.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : target.substr(0, slash);
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        const int r = ::fsync(dfd);
        const int err = errno;
        ::close(dfd);
        if (r != 0 && err != EINVAL) return io_error("cannot flush the directory of", target, err);
    }
    return KVRT_SUCCESS;
}

Result read_file(const char* path, std::vector<uint8_t>* out) {
    const std::string name(path);
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_error("cannot open", name, errno);
    TempFile guard;  // closes fd; removes nothing
    guard.fd_ = fd;
    struct stat st {};
    if (::fstat(fd, &st) != 0) return io_error("cannot stat", name, errno);
    if (!S_ISREG(st.st_mode)) return fail(KVRT_ERROR_IO, "\"%s\" is not a regular file", path);
    if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) > SIZE_MAX)
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "\"%s\" (%lld bytes) does not fit host memory", path,
                    static_cast<long long>(st.st_size));
    out->resize(static_cast<size_t>(st.st_size));
    uint64_t got = 0;
    while (got < out->size()) {
        const ssize_t r = ::read(fd, out->data() + got, out->size() - got);
        if (r < 0) {
            if (errno == EINTR) continue;
            return io_error("cannot read", name, errno);
        }
        if (r == 0) break;  // shorter than it was: parsed as it is (truncated)
        got += static_cast<uint64_t>(r);
    }
    out->resize(static_cast<size_t>(got));
    return KVRT_SUCCESS;
}

}  // namespace

Result Cache::state_save_file(int32_t seq, const char* path) {
    if (!path || !*path) return fail(KVRT_ERROR_INVALID_ARGUMENT, "path is NULL or empty");
    uint64_t size = 0;
    KVRT_TRY(state_save(seq, nullptr, &size));
    if (size > SIZE_MAX)
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "the state (%llu bytes) does not fit host memory",
                    static_cast<unsigned long long>(size));
    std::vector<uint8_t> bytes(static_cast<size_t>(size));
    KVRT_TRY(state_save(seq, bytes.data(), &size));
    return write_atomically(path, bytes);
}

Result Cache::state_load_file(int32_t seq, const char* path) {
    if (!path || !*path) return fail(KVRT_ERROR_INVALID_ARGUMENT, "path is NULL or empty");
    std::vector<uint8_t> bytes;
    KVRT_TRY(read_file(path, &bytes));
    return state_load(seq, bytes.data(), bytes.size());
}

Result Cache::seq_swap_out_file(int32_t seq, const char* path) {
    if (seq < 0 || seq >= static_cast<int32_t>(geo_.max_seqs))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, geo_.max_seqs - 1);
    KVRT_TRY(state_save_file(seq, path));
    return seq_rm(seq, -1, -1);
}

Result Cache::seq_swap_in_file(int32_t seq, const char* path) {
    if (!path || !*path) return fail(KVRT_ERROR_INVALID_ARGUMENT, "path is NULL or empty");
    // The sequence first: a sequence in use is refused before any file is read.
    KVRT_TRY(check_swap_in(seq));
    std::vector<uint8_t> bytes;
    KVRT_TRY(read_file(path, &bytes));
    return seq_swap_in(seq, bytes.data(), bytes.size());
}

}  // namespace kvrt::cache
