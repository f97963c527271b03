#include "agent/filesystem/filesystem_service.h"

#include <charconv>
#include <string_view>

#include "agent/connect/connect.h"
#include "agent/filesystem/fs_ops.h"
#include "agent/filesystem/watch.h"

namespace cordon::agent::filesystem {

using connect::Code;
using connect::RpcError;

namespace {

constexpr std::string_view kPrefix = "/filesystem.Filesystem/";

template <class Req, class Resp>
void unary(http::Exchange& ex, const FsContext& ctx,
           connect::RpcResult<Resp> (*fn)(const FsContext&, const Req&)) {
  Req req;
  if (!connect::read_unary_request(ex, req)) return;
  auto r = fn(ctx, req);
  if (auto* e = std::get_if<RpcError>(&r)) {
    (void)connect::send_unary_error(ex, *e);
    return;
  }
  (void)connect::send_unary(ex, std::get<Resp>(r));
}

WatchOptions watch_options(const http::RequestHead& head) {
  WatchOptions o;
  if (const std::string* v = head.header("keepalive-ping-interval")) {
    int secs = 0;
    auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), secs);
    if (ec == std::errc() && p == v->data() + v->size() && secs > 0)
      o.keepalive = std::chrono::seconds(secs);
  }
  if (auto ms = connect::timeout_ms(head))
    o.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(*ms);
  return o;
}

}  // namespace

bool handle_filesystem(http::Exchange& ex, AgentState& state) {
  const http::RequestHead& head = ex.head();
  if (!std::string_view(head.path).starts_with(kPrefix)) return false;
  std::string_view method = std::string_view(head.path).substr(kPrefix.size());
  if (head.method != "POST") {
    (void)connect::send_unary_error(ex, RpcError{Code::kUnimplemented, "use POST"});
    return true;
  }
  if (!state.token_ok(head)) {
    (void)connect::send_unary_error(
        ex, RpcError{Code::kUnauthenticated,
                     "unauthorized access, please provide a valid access token or method "
                     "signing if supported"});
    return true;
  }
  auto user = state.request_user(head);
  if (!user) {
    (void)connect::send_unary_error(ex, RpcError{Code::kUnauthenticated, user.error().message});
    return true;
  }
  FsContext ctx{*user, state.settings().default_workdir, state.paths().passwd, state.paths().group};
  if (method == "Stat") {
    unary<pb::StatRequest, pb::StatResponse>(ex, ctx, &stat);
  } else if (method == "MakeDir") {
    unary<pb::MakeDirRequest, pb::MakeDirResponse>(ex, ctx, &make_dir);
  } else if (method == "Move") {
    unary<pb::MoveRequest, pb::MoveResponse>(ex, ctx, &move);
  } else if (method == "ListDir") {
    unary<pb::ListDirRequest, pb::ListDirResponse>(ex, ctx, &list_dir);
  } else if (method == "Remove") {
    unary<pb::RemoveRequest, pb::RemoveResponse>(ex, ctx, &remove);
  } else if (method == "WatchDir") {
    pb::WatchDirRequest req;
    if (!connect::read_stream_request(ex, req)) return true;
    watch_dir(ex, ctx, req, watch_options(head));
  } else {
    (void)connect::send_unary_error(
        ex, RpcError{Code::kUnimplemented,
                     "filesystem.Filesystem/" + std::string(method) + " is not implemented"});
  }
  return true;
}

}  // namespace cordon::agent::filesystem
