// The torch.compile cache listener: [torch_cache] socket (and optional loopback TCP
// address), served with the Redis protocol (kiln::torch_cache::Connection) over the
// store. Internal to kiln_daemon.
//
// Roles: a Unix peer's from SO_PEERCRED and [access] (read: GET, write: SET); a TCP peer
// has no credentials and gets what [access] grants "*". Taken at accept from the current
// configuration, so a reload applies to new connections.
// Threading: accepts on its own strand of kilnd's control loop (the io_context given to
// create()). Each connection is then served start to finish by one of kilnd's connection
// loops (io_loops.hpp, shared with the kiln socket): the thread that reads a request runs
// the command and writes the reply, with no hand-off between threads on a hit held in
// memory. Store work still goes to the store pool and resumes on the connection's loop.
#pragma once

#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/strand.hpp>

#include "io_loops.hpp"
#include "kiln/torch_cache/connection.hpp"
#include "server_state.hpp"
#include "torch_cache_backend.hpp"

namespace kiln::daemon {

class TorchCacheListener {
 public:
  // Binds what config.torch_cache names (a stale socket file is replaced; busy if a live
  // server answers on it; invalid_argument for an address that is not loopback).
  // Connections are served on `loops` (not owned): they must be started before start(),
  // and stopped, joined and destroyed before the listener is destroyed (handlers left on
  // them refer to the listener).
  static Result<std::unique_ptr<TorchCacheListener>> create(asio::io_context& io, IoLoops& loops,
                                                            ServerState& state, const Config& config);
  ~TorchCacheListener();
  // Starts accepting.
  void start();
  // Stops accepting, removes the socket file and closes every connection (a SET being
  // stored completes in the store; its client gets no reply). The connections end on
  // their loops afterwards. Safe from any thread.
  void stop();
  // "127.0.0.1:<bound port>", or "" without TCP.
  std::string tcp_address() const { return tcp_address_; }

 private:
  TorchCacheListener(asio::io_context& io, IoLoops& loops, ServerState& state);
  asio::awaitable<void> accept_unix();
  asio::awaitable<void> accept_tcp();
  void serve(torch_cache::Socket socket, const PeerCred* cred, std::string peer);

  asio::io_context& io_;
  IoLoops& loops_;  // the connections' loops
  ServerState& state_;
  TorchCacheBackend backend_;
  asio::strand<asio::io_context::executor_type> strand_;
  asio::local::stream_protocol::acceptor unix_;
  asio::ip::tcp::acceptor tcp_;
  std::filesystem::path socket_path_;
  bool created_socket_ = false;
  std::string tcp_address_;
  std::atomic<std::uint32_t> open_{0};
  std::atomic<bool> stopped_{false};
  std::mutex conns_mu_;
  std::list<std::weak_ptr<torch_cache::Connection>> conns_;  // protected by conns_mu_
};

}  // namespace kiln::daemon
