#include "log.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>

namespace lockstep::rec {

void warn(const char* fmt, ...) {
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "lockstep: ");
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
  va_end(ap);
  if (m < 0) m = 0;
  n += m;
  if (n > int(sizeof buf) - 2) n = sizeof buf - 2;
  buf[n++] = '\n';
  ssize_t ignored = write(2, buf, n);
  (void)ignored;
}

}  // namespace lockstep::rec
