#include "agent/process/process_service.h"

#include <signal.h>

#include <chrono>

#include "agent/connect/connect.h"

namespace cordon::agent::process {

namespace {

namespace cn = cordon::agent::connect;
using Clock = std::chrono::steady_clock;
constexpr std::string_view kPrefix = "/process.Process/";

cn::RpcError to_rpc(const Error& e) {
  switch (e.code) {
    case kErrNotFound:
      return {cn::Code::kNotFound, e.message};
    case kErrInvalid:
      return {cn::Code::kInvalidArgument, e.message};
    case kErrFailedPrecondition:
      return {cn::Code::kFailedPrecondition, e.message};
    case kErrResourceExhausted:
      return {cn::Code::kResourceExhausted, e.message};
    case kErrDeadline:
      return {cn::Code::kDeadlineExceeded, e.message};
    default:
      return {cn::Code::kInternal, e.message};
  }
}

std::optional<Selector> selector_of(const ::process::ProcessSelector& s) {
  switch (s.selector_case()) {
    case ::process::ProcessSelector::kPid:
      return Selector{s.pid(), std::nullopt};
    case ::process::ProcessSelector::kTag:
      return Selector{std::nullopt, s.tag()};
    default:
      return std::nullopt;
  }
}

const cn::RpcError kNoSelector{cn::Code::kInvalidArgument,
                               "process selector missing (expected process.pid or process.tag)"};

std::chrono::seconds keepalive_interval(const http::RequestHead& head) {
  const std::string* v = head.header("keepalive-ping-interval");
  long secs = 90;  // envd's default
  if (v && !v->empty() && v->size() < 6 &&
      v->find_first_not_of("0123456789") == std::string::npos) {
    secs = std::stol(*v);
  }
  return std::chrono::seconds(std::clamp(secs, 1L, 3600L));
}

// Sends the events of `sub` until the process ends, the deadline passes or the client leaves.
template <class Response>
void stream_events(cn::ServerStream& stream, Subscription& sub,
                   std::optional<Clock::time_point> deadline, std::chrono::seconds keepalive) {
  Response msg;
  msg.mutable_event()->mutable_start()->set_pid(sub.pid());
  if (!stream.send(msg)) return;
  auto last_sent = Clock::now();
  while (true) {
    auto now = Clock::now();
    if (deadline && now >= *deadline) {
      (void)stream.finish({cn::Code::kDeadlineExceeded, "process " + std::to_string(sub.pid()) +
                                                            ": the call's deadline passed"});
      return;
    }
    auto wait = std::chrono::milliseconds(250);
    auto until_keepalive =
        std::chrono::duration_cast<std::chrono::milliseconds>(last_sent + keepalive - now);
    wait = std::clamp(until_keepalive, std::chrono::milliseconds(0), wait);
    if (deadline) {
      auto until_deadline = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - now);
      wait = std::clamp(until_deadline + std::chrono::milliseconds(1), std::chrono::milliseconds(0),
                        wait);
    }
    // Checked before taking output: what a departed client would have been sent stays in
    // the ring for the next Connect.
    if (stream.exchange().client_gone()) return;  // the process goes on
    auto ev = sub.next(wait);
    msg.Clear();
    auto* event = msg.mutable_event();
    if (ev.type == Subscription::Event::kData) {
      auto* data = event->mutable_data();
      switch (ev.kind) {
        case OutKind::kStdout:
          data->set_stdout(std::move(ev.data));
          break;
        case OutKind::kStderr:
          data->set_stderr(std::move(ev.data));
          break;
        case OutKind::kPty:
          data->set_pty(std::move(ev.data));
          break;
      }
    } else if (ev.type == Subscription::Event::kEnd) {
      auto* end = event->mutable_end();
      end->set_exit_code(ev.end.exit_code);
      end->set_exited(ev.end.exited);
      end->set_status(ev.end.status);
      if (ev.end.error) end->set_error(*ev.end.error);
      if (stream.send(msg)) (void)stream.finish();
      return;
    } else {
      if (Clock::now() - last_sent < keepalive) continue;
      event->mutable_keepalive();
    }
    if (!stream.send(msg)) return;
    last_sent = Clock::now();
  }
}

std::optional<Clock::time_point> call_deadline(const http::RequestHead& head) {
  auto ms = cn::timeout_ms(head);
  if (!ms || *ms == 0) return std::nullopt;
  return Clock::now() + std::chrono::milliseconds(*ms);
}

void do_start(http::Exchange& ex, AgentState& state, ProcessManager& mgr) {
  ::process::StartRequest req;
  if (!cn::read_stream_request(ex, req)) return;
  cn::ServerStream stream(ex);
  const auto& cfg = req.process();
  if (cfg.cmd().empty()) {
    (void)stream.finish({cn::Code::kInvalidArgument, "process.cmd is empty"});
    return;
  }
  auto user = state.request_user(ex.head());
  if (!user) {
    (void)stream.finish({cn::Code::kInvalidArgument, user.error().message});
    return;
  }
  StartSpec spec;
  spec.spawn.cmd = cfg.cmd();
  spec.spawn.args.assign(cfg.args().begin(), cfg.args().end());
  std::map<std::string, std::string> envs(cfg.envs().begin(), cfg.envs().end());
  spec.spawn.env = state.process_env(*user, envs);
  std::string cwd = cfg.has_cwd() ? cfg.cwd() : std::string();
  if (cwd.empty()) {
    cwd = state.default_cwd(*user);
  } else if (cwd[0] != '/') {
    cwd = (user->home.empty() ? std::string("/") : user->home + "/") + cwd;
  }
  spec.spawn.cwd = cwd;
  spec.spawn.user = *user;
  spec.spawn.stdin_pipe = req.has_stdin() ? req.stdin() : true;
  if (req.has_pty()) {
    uint32_t cols = req.pty().size().cols(), rows = req.pty().size().rows();
    spec.spawn.pty = std::make_pair(static_cast<uint16_t>(cols ? std::min(cols, 10000u) : 80),
                                    static_cast<uint16_t>(rows ? std::min(rows, 10000u) : 24));
  }
  spec.config = cfg;
  if (req.has_tag()) spec.tag = req.tag();
  auto deadline = call_deadline(ex.head());
  spec.deadline = deadline;
  auto sub = mgr.start(std::move(spec));
  if (!sub) {
    (void)stream.finish(to_rpc(sub.error()));
    return;
  }
  stream_events<::process::StartResponse>(stream, **sub, deadline, keepalive_interval(ex.head()));
}

void do_connect(http::Exchange& ex, ProcessManager& mgr) {
  ::process::ConnectRequest req;
  if (!cn::read_stream_request(ex, req)) return;
  cn::ServerStream stream(ex);
  auto sel = selector_of(req.process());
  if (!sel) {
    (void)stream.finish(kNoSelector);
    return;
  }
  auto sub = mgr.connect(*sel);
  if (!sub) {
    (void)stream.finish(to_rpc(sub.error()));
    return;
  }
  stream_events<::process::ConnectResponse>(stream, **sub, call_deadline(ex.head()),
                                            keepalive_interval(ex.head()));
}

Failure bad(std::string msg) {
  return fail(std::move(msg), -1);
}

template <class Request, class Response, class Fn>
void unary_call(http::Exchange& ex, Fn&& fn) {
  Request req;
  if (!cn::read_unary_request(ex, req)) return;
  Response resp;
  Status st = fn(req, resp);
  if (!st) {
    cn::RpcError e = st.error().code == -1
                         ? cn::RpcError{cn::Code::kInvalidArgument, st.error().message}
                         : to_rpc(st.error());
    (void)cn::send_unary_error(ex, e);
    return;
  }
  (void)cn::send_unary(ex, resp);
}

}  // namespace

bool handle_process(http::Exchange& ex, AgentState& state, ProcessManager& mgr) {
  const std::string& path = ex.head().path;
  if (path.compare(0, kPrefix.size(), kPrefix) != 0) return false;
  std::string method = path.substr(kPrefix.size());
  if (ex.head().method != "POST") {
    (void)cn::send_unary_error(
        ex, {cn::Code::kUnimplemented, "method " + ex.head().method + " not allowed, use POST"});
    return true;
  }
  if (method == "Start") {
    do_start(ex, state, mgr);
  } else if (method == "Connect") {
    do_connect(ex, mgr);
  } else if (method == "List") {
    unary_call<::process::ListRequest, ::process::ListResponse>(
        ex, [&](const auto&, ::process::ListResponse& resp) -> Status {
          for (const auto& info : mgr.list()) {
            auto* p = resp.add_processes();
            *p->mutable_config() = info.config;
            p->set_pid(info.pid);
            if (info.tag) p->set_tag(*info.tag);
          }
          return {};
        });
  } else if (method == "SendInput") {
    unary_call<::process::SendInputRequest, ::process::SendInputResponse>(
        ex, [&](const ::process::SendInputRequest& req, auto&) -> Status {
          auto sel = selector_of(req.process());
          if (!sel) return bad(kNoSelector.message);
          switch (req.input().input_case()) {
            case ::process::ProcessInput::kStdin:
              return mgr.send_input(*sel, req.input().stdin());
            case ::process::ProcessInput::kPty:
              return mgr.send_input(*sel, req.input().pty());
            default:
              return bad("input missing (expected input.stdin or input.pty)");
          }
        });
  } else if (method == "SendSignal") {
    unary_call<::process::SendSignalRequest, ::process::SendSignalResponse>(
        ex, [&](const ::process::SendSignalRequest& req, auto&) -> Status {
          auto sel = selector_of(req.process());
          if (!sel) return bad(kNoSelector.message);
          switch (req.signal()) {
            case ::process::SIGNAL_SIGKILL:
              return mgr.signal(*sel, SIGKILL);
            case ::process::SIGNAL_SIGTERM:
              return mgr.signal(*sel, SIGTERM);
            default:
              return bad("signal " + std::to_string(req.signal()) + " not supported");
          }
        });
  } else if (method == "CloseStdin") {
    unary_call<::process::CloseStdinRequest, ::process::CloseStdinResponse>(
        ex, [&](const ::process::CloseStdinRequest& req, auto&) -> Status {
          auto sel = selector_of(req.process());
          if (!sel) return bad(kNoSelector.message);
          return mgr.close_stdin(*sel);
        });
  } else if (method == "Update") {
    unary_call<::process::UpdateRequest, ::process::UpdateResponse>(
        ex, [&](const ::process::UpdateRequest& req, auto&) -> Status {
          auto sel = selector_of(req.process());
          if (!sel) return bad(kNoSelector.message);
          if (!req.has_pty()) return {};  // nothing to change
          uint32_t cols = std::min(req.pty().size().cols(), 10000u);
          uint32_t rows = std::min(req.pty().size().rows(), 10000u);
          if (cols == 0 || rows == 0) return bad("pty.size needs cols and rows above 0");
          return mgr.resize(*sel, static_cast<uint16_t>(cols), static_cast<uint16_t>(rows));
        });
  } else {
    (void)cn::send_unary_error(
        ex, {cn::Code::kUnimplemented, "process.Process/" + method + " is not implemented"});
  }
  return true;
}

}  // namespace cordon::agent::process
