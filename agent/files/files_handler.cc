#include "agent/files/files_handler.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <vector>

#include "agent/files/gzip.h"
#include "agent/files/multipart.h"
#include "agent/files/signature.h"
#include "agent/files/upload.h"
#include "agent/filesystem/entry_info.h"
#include "agent/filesystem/identity.h"
#include "agent/filesystem/paths.h"

namespace cordon::agent::files {

namespace fs = cordon::agent::filesystem;

namespace {

constexpr size_t kIoBytes = 64 * 1024;  // one read of the file or the request body

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

void json_error(http::Exchange& ex, int status, const std::string& message) {
  (void)http::respond_json_error(ex, status, message);
}

std::string query(const http::RequestHead& head, std::string_view name) {
  const std::string* v = head.query_param(name);
  return v ? *v : std::string();
}

}  // namespace

bool accepts_gzip(std::string_view header) {
  std::optional<double> gzip_q, star_q;
  while (!header.empty()) {
    size_t comma = header.find(',');
    std::string_view item = trim(header.substr(0, comma));
    header.remove_prefix(comma == std::string_view::npos ? header.size() : comma + 1);
    size_t semi = item.find(';');
    std::string coding = lower(trim(item.substr(0, semi)));
    double q = 1.0;
    if (semi != std::string_view::npos) {
      std::string params = lower(item.substr(semi + 1));
      size_t at = params.find("q=");
      if (at != std::string::npos) q = std::strtod(params.c_str() + at + 2, nullptr);
    }
    if (coding == "gzip" || coding == "x-gzip") gzip_q = q;
    if (coding == "*") star_q = q;
  }
  if (gzip_q) return *gzip_q > 0;
  return star_q && *star_q > 0;
}

bool gzip_requested(std::string_view header) {
  if (!accepts_gzip(header)) return false;
  while (!header.empty()) {
    size_t comma = header.find(',');
    std::string_view item = trim(header.substr(0, comma));
    header.remove_prefix(comma == std::string_view::npos ? header.size() : comma + 1);
    std::string coding = lower(trim(item.substr(0, item.find(';'))));
    if (!coding.empty() && coding != "gzip" && coding != "x-gzip" && coding != "identity")
      return false;
  }
  return true;
}

std::string content_disposition(std::string_view filename) {
  bool token = !filename.empty();
  bool ascii = true;
  for (unsigned char c : filename) {
    if (c >= 0x80 || c < 0x20 || c == 0x7f) ascii = false;
    if (!(std::isalnum(c) ||
          std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos))
      token = false;
  }
  if (!ascii) {
    std::string out = "inline; filename*=utf-8''";
    constexpr char kHex[] = "0123456789ABCDEF";
    for (unsigned char c : filename) {
      if (std::isalnum(c) ||
          std::string_view("!#$&+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos) {
        out += static_cast<char>(c);
      } else {
        out += '%';
        out += kHex[c >> 4];
        out += kHex[c & 15];
      }
    }
    return out;
  }
  if (token) return "inline; filename=" + std::string(filename);
  std::string out = "inline; filename=\"";
  for (char c : filename) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

void serve_download(http::Exchange& ex, const FilesContext& ctx) {
  const http::RequestHead& head = ex.head();
  auto path = fs::resolve_path(query(head, "path"), ctx.user, ctx.default_workdir);
  if (!path) return json_error(ex, 400, "error resolving path: " + path.error().message);
  fs::UserScope scope(ctx.user);
  if (!scope.status()) return json_error(ex, 403, scope.status().error().message);
  // O_NONBLOCK so that a fifo without a writer cannot hang the request in open().
  int fd = open(path->c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      return json_error(ex, 404, "path '" + *path + "' does not exist");
    return json_error(ex, http_status_for_errno(err),
                      "error opening file '" + *path + "': " + std::strerror(err));
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) return json_error(ex, 500, "stat '" + *path + "' failed");
  if (S_ISDIR(st.st_mode)) return json_error(ex, 400, "path '" + *path + "' is a directory");
  if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))
    return json_error(ex, 400, "path '" + *path + "' is not a regular file");
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);

  const std::string* ae = head.header("accept-encoding");
  bool gzip = ae && gzip_requested(*ae);
  http::Headers headers = {{"Content-Type", "application/octet-stream"},
                           {"Content-Disposition", content_disposition(fs::base_name(*path))},
                           {"Vary", "Accept-Encoding"}};
  if (gzip) headers.emplace_back("Content-Encoding", "gzip");
  if (!ex.begin_stream(200, headers)) return;
  std::optional<GzipEncoder> enc;
  if (gzip) enc.emplace();
  ByteSink send = [&](std::string_view piece) { return ex.write(piece); };
  std::vector<char> buf(kIoBytes);
  for (;;) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    // A read error after the 200 cannot be reported: the stream is left unterminated so the
    // client sees a truncated body rather than a short file.
    if (n < 0) return;
    if (n == 0) break;
    std::string_view piece(buf.data(), n);
    if (!(enc ? enc->write(piece, send) : send(piece))) return;
  }
  if (enc && !enc->finish(send)) return;
  (void)ex.end_stream();
}

namespace {

struct UploadedEntry {
  std::string path;
  std::map<std::string, std::string> metadata;
};

Failure bad_request(const std::string& msg) {
  return fail(msg, 400);
}

// The multipart side: one FileWriter per `file` part.
class UploadSink : public MultipartParser::Sink {
 public:
  UploadSink(const FilesContext& ctx, const std::string* query_path,
             const std::map<std::string, std::string>& metadata)
      : ctx_(ctx), query_path_(query_path), metadata_(metadata) {}

  Status on_part_begin(const PartHeaders& part) override {
    if (part.form_name != "file") return {};  // other form fields are ignored, as envd does
    std::string requested;
    if (query_path_) {
      requested = *query_path_;
    } else if (part.filename) {
      requested = *part.filename;
    } else {
      return bad_request("filename not found in Content-Disposition header");
    }
    auto path = fs::resolve_path(requested, ctx_.user, ctx_.default_workdir);
    if (!path) return bad_request("error resolving path: " + path.error().message);
    if (!seen_.insert(*path).second)
      return bad_request("you cannot upload multiple files to the same path '" + *path +
                         "' in one upload request");
    auto w = FileWriter::open(*path);
    if (!w) return fail(w.error());
    writer_.emplace(std::move(*w));
    path_ = *path;
    return {};
  }
  Status on_part_data(std::string_view bytes) override {
    return writer_ ? writer_->write(bytes) : Status{};
  }
  Status on_part_end() override {
    if (!writer_) return {};
    auto s = writer_->commit(metadata_);
    writer_.reset();
    if (!s) return s;
    done_.push_back({path_, fs::read_metadata(path_)});
    return {};
  }
  std::vector<UploadedEntry>& done() { return done_; }

 private:
  const FilesContext& ctx_;
  const std::string* query_path_;
  const std::map<std::string, std::string>& metadata_;
  std::set<std::string> seen_;
  std::optional<FileWriter> writer_;
  std::string path_;
  std::vector<UploadedEntry> done_;
};

// Reads the whole request body through the optional gzip stage into `sink`.
Status pump_body(http::Exchange& ex, bool gzip, const ByteSink& sink, bool& client_failed) {
  std::optional<GzipDecoder> dec;
  if (gzip) dec.emplace();
  std::vector<char> buf(kIoBytes);
  for (;;) {
    auto n = ex.read_body(buf.data(), buf.size());
    if (!n) {
      client_failed = true;
      return fail("reading the request body: " + n.error().message, 400);
    }
    if (*n == 0) break;
    std::string_view piece(buf.data(), *n);
    if (dec) {
      if (auto s = dec->write(piece, sink); !s)
        return s.error().code ? s
                              : fail("error decompressing request body: " + s.error().message, 400);
    } else if (auto s = sink(piece); !s) {
      return s;
    }
  }
  if (dec)
    if (auto s = dec->finish(); !s)
      return fail("error decompressing request body: " + s.error().message, 400);
  return {};
}

std::string upload_reply(const std::vector<UploadedEntry>& entries) {
  nlohmann::json arr = nlohmann::json::array();
  for (auto& e : entries) {
    nlohmann::json j = {{"path", e.path}, {"name", fs::base_name(e.path)}, {"type", "file"}};
    if (!e.metadata.empty()) j["metadata"] = e.metadata;
    arr.push_back(std::move(j));
  }
  return arr.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

void serve_upload(http::Exchange& ex, const FilesContext& ctx) {
  const http::RequestHead& head = ex.head();
  bool gzip = false;
  if (const std::string* ce = head.header("content-encoding")) {
    std::string enc = lower(trim(*ce));
    if (enc == "gzip" || enc == "x-gzip") {
      gzip = true;
    } else if (!enc.empty() && enc != "identity") {
      return json_error(ex, 400, "unsupported Content-Encoding: " + *ce + ", supported: [gzip]");
    }
  }
  std::map<std::string, std::string> metadata;
  for (auto& [name, value] : head.headers) {
    if (!name.starts_with("x-metadata-") || name.size() == 11) continue;
    metadata[name.substr(11)] = value;
  }
  if (auto s = fs::validate_metadata(metadata); !s)
    return json_error(ex, 400, "invalid metadata: " + s.error().message);

  const std::string* ct = head.header("content-type");
  std::string media = ct ? lower(trim(std::string_view(*ct).substr(0, ct->find(';')))) : "";
  const std::string* query_path = head.query_param("path");

  fs::UserScope scope(ctx.user);
  if (!scope.status()) return json_error(ex, 403, scope.status().error().message);
  bool client_failed = false;
  std::vector<UploadedEntry> entries;
  Status result;
  if (media == "application/octet-stream") {
    if (!query_path)
      return json_error(ex, 400, "path query parameter is required for raw body upload");
    auto path = fs::resolve_path(*query_path, ctx.user, ctx.default_workdir);
    if (!path) return json_error(ex, 400, "error resolving path: " + path.error().message);
    auto w = FileWriter::open(*path);
    if (!w) return json_error(ex, w.error().code, w.error().message);
    result = pump_body(
        ex, gzip, [&](std::string_view b) { return w->write(b); }, client_failed);
    if (result) result = w->commit(metadata);
    if (result) entries.push_back({*path, fs::read_metadata(*path)});
  } else if (media.starts_with("multipart/")) {
    auto boundary = multipart_boundary(*ct);
    if (!boundary)
      return json_error(ex, 400, "error parsing multipart form: " + boundary.error().message);
    UploadSink sink(ctx, query_path, metadata);
    MultipartParser parser(*boundary, sink);
    result = pump_body(
        ex, gzip,
        [&](std::string_view b) -> Status {
          auto s = parser.feed(b);
          if (!s && s.error().code == 0) return fail(s.error().message, 400);
          return s;
        },
        client_failed);
    if (result)
      if (auto s = parser.finish(); !s) result = fail(s.error().message, 400);
    entries = std::move(sink.done());
  } else {
    return json_error(ex, 400,
                      "unsupported content type: " + (ct ? *ct : std::string("(none)")) +
                          ", expected multipart/form-data or application/octet-stream");
  }
  if (!result) {
    if (client_failed) return;  // nobody to answer
    return json_error(ex, result.error().code ? result.error().code : 500, result.error().message);
  }
  (void)ex.respond(200, {{"Content-Type", "application/json"}}, upload_reply(entries));
}

bool handle_files(http::Exchange& ex, AgentState& state) {
  const http::RequestHead& head = ex.head();
  if (head.path != "/files") return false;
  FileOp op;
  if (head.method == "GET") {
    op = FileOp::kRead;
  } else if (head.method == "POST") {
    op = FileOp::kWrite;
  } else {
    json_error(ex, 405, "method " + head.method + " not allowed on /files");
    return true;
  }
  SignedRequest sreq;
  if (const std::string* t = head.header("x-access-token")) sreq.header_token = *t;
  sreq.path = query(head, "path");
  sreq.username = query(head, "username");
  if (const std::string* s = head.query_param("signature")) sreq.signature = *s;
  if (const std::string* e = head.query_param("signature_expiration")) sreq.expiration = *e;
  int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  if (auto s = check_file_access(sreq, state.access_token(), op, now); !s) {
    json_error(ex, 401, s.error().message);
    return true;
  }
  auto user = state.request_user(head);
  if (!user) {
    json_error(ex, 401, user.error().message);
    return true;
  }
  FilesContext ctx{*user, state.settings().default_workdir};
  if (op == FileOp::kRead) {
    serve_download(ex, ctx);
  } else {
    serve_upload(ex, ctx);
  }
  return true;
}

}  // namespace cordon::agent::files
