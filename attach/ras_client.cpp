#include "ras_client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

namespace lockstep::attach {
namespace {

constexpr size_t kMaxReply = 16 << 20;
constexpr int kRasProtocol = 2;

using Clock = std::chrono::steady_clock;

struct Conn {
  int fd = -1;
  Clock::time_point deadline;
  std::string pending;  // bytes read past the last line
  ~Conn() {
    if (fd >= 0) ::close(fd);
  }
  int remaining_ms() const {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return ms > 0 ? static_cast<int>(ms) : 0;
  }
  bool send_line(const std::string& s) {
    std::string line = s + "\n";
    size_t done = 0;
    while (done < line.size()) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, remaining_ms()) <= 0) return false;
      ssize_t n = ::send(fd, line.data() + done, line.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads more bytes into pending; false on EOF, error or deadline.
  bool fill() {
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, remaining_ms());
    if (r <= 0) return false;
    char buf[8192];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) return true;
    if (n <= 0) return false;
    pending.append(buf, static_cast<size_t>(n));
    return pending.size() <= kMaxReply;
  }
  bool read_line(std::string& line) {
    size_t nl;
    while ((nl = pending.find('\n')) == std::string::npos)
      if (!fill()) return false;
    line = pending.substr(0, nl);
    pending.erase(0, nl + 1);
    return true;
  }
};

bool connect_to(const std::string& address, Conn& c, std::string& error) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    error = "bad address '" + address + "' (want host:port, as NCCL_RAS_ADDR)";
    return false;
  }
  std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    error = std::string("resolving ") + address + ": " + gai_strerror(rc);
    return false;
  }
  error = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    pollfd p{fd, POLLOUT, 0};
    int soerr = 0;
    socklen_t len = sizeof soerr;
    if (::poll(&p, 1, c.remaining_ms()) <= 0) {
      error = "connection timed out";
      ::close(fd);
      continue;
    }
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
    if (soerr != 0) {
      error = std::strerror(soerr);
      ::close(fd);
      continue;
    }
    c.fd = fd;
    break;
  }
  ::freeaddrinfo(res);
  if (c.fd >= 0) error.clear();
  return c.fd >= 0;
}

bool ok_line(const std::string& l) { return strncasecmp(l.c_str(), "OK", 2) == 0; }

}  // namespace

bool parse_ras_json(const std::string& text, RasAnswer& answer) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("communicators") || !j["communicators"].is_array()) return false;
  auto str = [](const nlohmann::json& o, const char* k) {
    return o.is_object() && o.contains(k) && o[k].is_string() ? o[k].get<std::string>() : std::string();
  };
  auto num = [](const nlohmann::json& o, const char* k, long long fallback) {
    return o.is_object() && o.contains(k) && o[k].is_number_integer() ? o[k].get<long long>() : fallback;
  };
  auto flag = [](const nlohmann::json& o, const char* k) {
    return o.is_object() && o.contains(k) && o[k].is_boolean() && o[k].get<bool>();
  };
  answer.nccl_version = str(j, "nccl_version");
  for (const auto& cj : j["communicators"]) {
    if (!cj.is_object()) continue;
    RasComm c;
    c.hash = str(cj, "hash");
    c.size = static_cast<int>(num(cj, "size", 0));
    if (cj.contains("ranks") && cj["ranks"].is_array())
      for (const auto& rj : cj["ranks"]) {
        RasRank r;
        r.rank = static_cast<int>(num(rj, "rank", -1));
        r.host = str(rj, "host");
        r.pid = static_cast<int>(num(rj, "pid", -1));
        r.cuda_dev = static_cast<int>(num(rj, "cuda_dev", -1));
        if (rj.is_object() && rj.contains("status")) {
          const auto& s = rj["status"];
          r.init_state = static_cast<int>(num(s, "init_state", 0));
          r.async_error = static_cast<int>(num(s, "async_error", 0));
          r.finalize_called = flag(s, "finalize_called");
          r.destroy_flag = flag(s, "destroy_flag");
          r.abort_flag = flag(s, "abort_flag");
        }
        if (rj.is_object() && rj.contains("collective_counts") && rj["collective_counts"].is_object())
          for (const auto& [k, v] : rj["collective_counts"].items())
            if (v.is_number_unsigned() || v.is_number_integer()) r.coll_counts[k] = v.get<uint64_t>();
        c.ranks.push_back(std::move(r));
      }
    if (cj.contains("missing_ranks") && cj["missing_ranks"].is_array())
      for (const auto& mj : cj["missing_ranks"]) {
        RasMissingRank m;
        m.rank = static_cast<int>(num(mj, "rank", -1));
        m.host = str(mj, "host");
        m.pid = static_cast<int>(num(mj, "pid", -1));
        if (mj.is_object() && mj.contains("status")) {
          m.unresponsive = flag(mj["status"], "unresponsive");
          m.considered_dead = flag(mj["status"], "considered_dead");
        }
        c.missing.push_back(std::move(m));
      }
    answer.comms.push_back(std::move(c));
  }
  return true;
}

RasAnswer query_ras(const std::string& address, int timeout_s) {
  RasAnswer a;
  a.address = address;
  Conn c;
  // RAS itself is told timeout_s (its TIMEOUT command); connecting, the handshake and reading the
  // report get 2 s more (docs/attach.md, --ras-timeout).
  c.deadline = Clock::now() + std::chrono::seconds(timeout_s + 2);
  if (!connect_to(address, c, a.error)) {
    a.error = "NCCL RAS at " + address + ": " + a.error;
    return a;
  }
  std::string line;
  if (!c.send_line("CLIENT PROTOCOL " + std::to_string(kRasProtocol)) || !c.read_line(line)) {
    a.error = "NCCL RAS at " + address + ": no answer to the handshake";
    return a;
  }
  if (strncasecmp(line.c_str(), "SERVER PROTOCOL ", 16) != 0) {
    a.error = "NCCL RAS at " + address + ": not a RAS server (answered '" + line.substr(0, 80) + "')";
    return a;
  }
  a.reached = true;
  a.server_protocol = std::atoi(line.c_str() + 16);
  if (!c.send_line("TIMEOUT " + std::to_string(timeout_s)) || !c.read_line(line) || !ok_line(line)) {
    a.error = "TIMEOUT refused: " + line.substr(0, 80);
    return a;
  }
  if (c.send_line("SET FORMAT json") && c.read_line(line)) a.json = ok_line(line);
  if (!c.send_line("VERBOSE STATUS")) {
    a.error = "could not send VERBOSE STATUS";
    return a;
  }
  while (c.fill()) {
  }
  a.raw = c.pending;
  if (a.raw.empty()) {
    a.error = "empty status reply (timed out after " + std::to_string(timeout_s + 2) + " s?)";
    return a;
  }
  if (a.json && !parse_ras_json(a.raw, a)) a.error = "status reply is not the JSON report expected";
  return a;
}

}  // namespace lockstep::attach
