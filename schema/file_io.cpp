#include "file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace lockstep::schema {

std::optional<std::string> read_regular_file(const std::string& path, size_t max_bytes, std::string* why) {
  auto fail = [&](const std::string& w) -> std::optional<std::string> {
    if (why) *why = w;
    return std::nullopt;
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return fail(std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail("not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return fail("larger than " + std::to_string(max_bytes) + " bytes");
  }
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string err = std::strerror(errno);
      ::close(fd);
      return fail(err);
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {  // grew while read
      ::close(fd);
      return fail("larger than " + std::to_string(max_bytes) + " bytes");
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

void write_file_replacing(const std::string& path, std::string_view bytes, bool sync) {
  std::string tmp = path + ".partial-XXXXXX";
  const int fd = ::mkstemp(tmp.data());  // O_EXCL: never an existing file or link
  if (fd < 0) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  const mode_t mask = ::umask(0);  // mkstemp creates 0600
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  size_t put = 0;
  int err = 0;
  while (put < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + put, bytes.size() - put);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      err = w < 0 ? errno : EIO;
      break;
    }
    put += static_cast<size_t>(w);
  }
  if (!err && sync && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot write " + path + ": " + std::strerror(err));
  }
}

}  // namespace lockstep::schema
