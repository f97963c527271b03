#include "audit/detail/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "audit/detail/json.h"
#include "audit/limits.h"

namespace cordon::audit::detail {

std::string rotated_name(uint64_t first_seq) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "audit-%020llu.jsonl", static_cast<unsigned long long>(first_seq));
  return buf;
}

std::optional<uint64_t> rotated_seq(std::string_view name) {
  constexpr std::string_view kPrefix = "audit-", kSuffix = ".jsonl";
  if (name.size() != kPrefix.size() + 20 + kSuffix.size()) return std::nullopt;
  if (name.substr(0, kPrefix.size()) != kPrefix ||
      name.substr(name.size() - kSuffix.size()) != kSuffix)
    return std::nullopt;
  uint64_t v = 0;
  for (char c : name.substr(kPrefix.size(), 20)) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + uint64_t(c - '0');
  }
  return v;
}

bool is_log_name(std::string_view name) {
  return name == kLiveName || rotated_seq(name).has_value();
}

LineReader::LineReader(int fd, std::string path) : fd_(fd), path_(std::move(path)) {
  buf_.resize(kReadChunkBytes);
}

LineReader::~LineReader() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::unique_ptr<LineReader>> LineReader::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail("cannot open " + path + ": " + std::strerror(errno));
  return std::unique_ptr<LineReader>(new LineReader(fd, path));
}

bool LineReader::next(std::string_view& line, bool& terminated) {
  for (;;) {
    if (begin_ < end_) {
      const char* start = buf_.data() + begin_;
      const void* nl = std::memchr(start, '\n', end_ - begin_);
      if (nl) {
        size_t len = size_t(static_cast<const char*>(nl) - start);
        line = std::string_view(start, len);
        terminated = true;
        begin_ += len + 1;
        ++line_no_;
        return true;
      }
      if (eof_) {
        line = std::string_view(start, end_ - begin_);
        terminated = false;
        begin_ = end_;
        ++line_no_;
        return true;
      }
    } else if (eof_) {
      return false;
    }
    // Need more bytes: move the partial line to the front, grow if a line exceeds the buffer.
    if (begin_ > 0) {
      std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (end_ == buf_.size()) {
      if (buf_.size() >= kMaxLineBytes + kReadChunkBytes) {
        error_ = path_ + ": line " + std::to_string(line_no_ + 1) + " is longer than " +
                 std::to_string(kMaxLineBytes) + " bytes";
        return false;
      }
      buf_.resize(buf_.size() * 2);
    }
    ssize_t n = ::read(fd_, buf_.data() + end_, buf_.size() - end_);
    if (n < 0) {
      if (errno == EINTR) continue;
      error_ = "reading " + path_ + ": " + std::strerror(errno);
      return false;
    }
    if (n == 0) {
      eof_ = true;
    } else {
      end_ += size_t(n);
    }
  }
}

std::optional<uint64_t> first_seq_of(const std::string& path) {
  auto reader = LineReader::open(path);
  if (!reader) return std::nullopt;
  std::string_view line;
  bool terminated;
  if (!(*reader)->next(line, terminated)) return std::nullopt;
  std::vector<ScannedField> fields;
  if (scan_object(line, fields) != nullptr) return std::nullopt;
  int i = find_field(fields, "seq");
  if (i < 0) return std::nullopt;
  auto v = to_int(fields[size_t(i)]);
  if (!v || *v < 0) return std::nullopt;
  return uint64_t(*v);
}

Result<std::vector<std::string>> chain_order(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  struct Item {
    std::string path;
    uint64_t key;
    int rank;  // tie-breaker: rotated by name, then others, then the live file
  };
  std::vector<Item> items;
  auto add = [&](const fs::path& p) {
    std::string base = p.filename().string();
    std::optional<uint64_t> from_content = first_seq_of(p.string());
    std::optional<uint64_t> from_name = rotated_seq(base);
    uint64_t key = from_content ? *from_content
                   : from_name  ? *from_name
                                : std::numeric_limits<uint64_t>::max();
    int rank = from_name ? 0 : base == kLiveName ? 2 : 1;
    items.push_back({p.string(), key, rank});
  };
  for (const auto& path : paths) {
    std::error_code ec;
    auto st = fs::status(path, ec);
    if (ec || !fs::exists(st)) return fail("audit log " + path + " does not exist");
    if (fs::is_directory(st)) {
      bool any = false;
      for (const auto& entry : fs::directory_iterator(path, ec)) {
        if (entry.is_regular_file() && is_log_name(entry.path().filename().string())) {
          add(entry.path());
          any = true;
        }
      }
      if (ec) return fail("listing " + path + ": " + ec.message());
      if (!any) return fail("no audit log files (audit.jsonl, audit-N.jsonl) in " + path);
    } else {
      add(path);
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.key != b.key) return a.key < b.key;
    if (a.rank != b.rank) return a.rank < b.rank;
    return a.path < b.path;
  });
  std::vector<std::string> out;
  for (auto& it : items) {
    if (std::find(out.begin(), out.end(), it.path) == out.end()) out.push_back(std::move(it.path));
  }
  return out;
}

}  // namespace cordon::audit::detail
