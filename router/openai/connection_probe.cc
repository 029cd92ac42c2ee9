#include "router/openai/connection_probe.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <string>

namespace mlaserve::router::openai {
namespace {

// The numeric host and port of a socket address, formatted as httplib formats them.
bool HostPort(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
  char h[NI_MAXHOST];
  char s[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof(h), s, sizeof(s),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  *host = h;
  *port = std::atoi(s);
  return true;
}

}  // namespace

int ConnectionProbe::FindSocket() const {
  if (request_.ssl != nullptr) return SSL_get_fd(request_.ssl);
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
      continue;  // not a connected socket
    }
    std::string local_host, peer_host;
    int local_port = -1, peer_port = -1;
    if (HostPort(local, local_len, &local_host, &local_port) &&
        HostPort(peer, peer_len, &peer_host, &peer_port) && local_port == request_.local_port &&
        peer_port == request_.remote_port && local_host == request_.local_addr &&
        peer_host == request_.remote_addr) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool ConnectionProbe::ClientGone() {
  if (!searched_) {
    fd_ = FindSocket();
    searched_ = true;
  }
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) return true;
  char byte;
  // Readable: either the next pipelined request (alive) or end of stream (gone).
  return recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

}  // namespace mlaserve::router::openai
