#include "runtime/server/sockets.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

namespace ferry::server {
namespace {

struct SocketInfo {
  int fd = -1;
  bool listening = false;
  int local_port = -1;
  std::string peer_addr;
  int peer_port = -1;
};

int port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
  return -1;
}

std::string addr_of(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&a)->sin_addr, buf, sizeof(buf));
  if (a.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr, buf, sizeof(buf));
  return buf;
}

// Every socket of this process bound to `port`, fn(info).
template <typename Fn>
void for_each_socket_on(int port, Fn fn) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return;
  std::vector<int> fds;
  while (const dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == '\0' && fd != dirfd(d)) fds.push_back(static_cast<int>(fd));
  }
  closedir(d);
  for (int fd : fds) {
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    SocketInfo info;
    info.fd = fd;
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0) continue;
    info.listening = listening != 0;
    sockaddr_storage local{};
    socklen_t llen = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0) continue;
    info.local_port = port_of(local);
    if (info.local_port != port) continue;
    sockaddr_storage peer{};
    socklen_t plen = sizeof(peer);
    if (!info.listening && getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) == 0) {
      info.peer_addr = addr_of(peer);
      info.peer_port = port_of(peer);
    }
    fn(info);
  }
}

}  // namespace

void raise_listen_backlog(int port) {
  for_each_socket_on(port, [](const SocketInfo& s) {
    if (s.listening) ::listen(s.fd, SOMAXCONN);
  });
}

void shut_down_connections(int port) {
  for_each_socket_on(port, [](const SocketInfo& s) {
    if (!s.listening) ::shutdown(s.fd, SHUT_RDWR);
  });
}

int find_connection(int port, const std::string& remote_addr, int remote_port) {
  int found = -1;
  for_each_socket_on(port, [&](const SocketInfo& s) {
    if (!s.listening && s.peer_port == remote_port && s.peer_addr == remote_addr) found = s.fd;
  });
  return found;
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, static_cast<short>(POLLRDHUP), 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace ferry::server
