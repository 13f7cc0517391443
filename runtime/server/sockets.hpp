#pragma once
// What cpp-httplib 0.11 does not expose about its sockets, found through /proc/self/fd: its
// listening socket (to raise the backlog it hard-codes to 5), its connections (to close the
// idle ones at stop), and the connection of one request (to see its client leave while a
// non-streamed reply is being generated, since nothing is written to it until the end).
#include <string>

namespace ferry::server {

// listen() again on the socket listening on `port` with the system's maximum backlog.
void raise_listen_backlog(int port);
// shutdown(SHUT_RDWR) of every accepted connection on `port`: their blocked reads end.
void shut_down_connections(int port);
// The accepted socket on `port` whose peer is remote_addr:remote_port; -1 when none.
int find_connection(int port, const std::string& remote_addr, int remote_port);
// True when the peer of `fd` has closed or reset the connection (poll: RDHUP, HUP, ERR).
bool peer_closed(int fd);

}  // namespace ferry::server
