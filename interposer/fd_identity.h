// A descriptor the recorder keeps, and what it named when opened: a program that closes every
// descriptor (a daemon's close_range(3, ~0)) and opens its own files gets these numbers back, and
// its files must never be read, written, locked or closed by the recorder. ours() before each
// use (fstat: async-signal-safe).
#pragma once

#include <sys/stat.h>

namespace lockstep::rec {

struct FdIdentity {
  int fd = -1;  // -1: nothing known, never ours
  dev_t dev = 0;
  ino_t ino = 0;

  static FdIdentity of(int fd) {
    FdIdentity f;
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0) f.fd = fd, f.dev = st.st_dev, f.ino = st.st_ino;
    return f;
  }
  bool ours() const {
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
  }
};

}  // namespace lockstep::rec
