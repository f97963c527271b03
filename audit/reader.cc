// verify() and query(): streaming passes over the log. See reader.h.
#include "audit/reader.h"

#include <cstring>

#include "audit/detail/files.h"
#include "audit/detail/format.h"
#include "audit/detail/json.h"
#include "audit/event.h"
#include "common/encoding.h"

namespace cordon::audit {

using namespace detail;

struct Record::Fields {
  // An unfiltered query does not scan lines it only passes on; get() scans on first use.
  mutable std::vector<ScannedField> v;
  mutable bool scanned = false;
};

std::optional<std::string> Record::get(std::string_view key) const {
  if (!fields_->scanned) {
    if (scan_object(line_, fields_->v, /*strict=*/false) != nullptr) fields_->v.clear();
    fields_->scanned = true;
  }
  int i = find_field(fields_->v, key);
  if (i < 0) return std::nullopt;
  const ScannedField& f = fields_->v[size_t(i)];
  if (f.kind == ValueKind::kString) return unescape(f);
  return std::string(f.raw);
}

namespace {

constexpr const char* kCoreKeys[] = {"ts", "seq", "event", "sandbox", "decision", "reason", "rule"};

bool is_lower_hex64(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// nullptr if the scanned line has the writer's shape, else why not.
const char* check_shape(const std::vector<ScannedField>& f) {
  if (f.size() < 8) return "missing fields";
  for (size_t i = 0; i < 7; ++i) {
    if (f[i].key != kCoreKeys[i]) return "common fields missing or out of order";
    bool want_int = i == 1;
    if (want_int != (f[i].kind == ValueKind::kInteger))
      return want_int ? "seq is not an integer" : "a common field is not a string";
  }
  const ScannedField& prev = f.back();
  if (prev.key != "prev" || prev.kind != ValueKind::kString || !is_lower_hex64(prev.raw))
    return "prev is missing, not last, or not 64 lowercase hex digits";
  for (size_t i = 7; i + 1 < f.size(); ++i) {
    if (is_reserved_key(f[i].key)) return "a common field appears twice";
    for (size_t j = 7; j < i; ++j)
      if (f[j].key == f[i].key) return "a field appears twice";
  }
  return nullptr;
}

}  // namespace

Result<VerifyReport> verify(const std::vector<std::string>& paths, VerifyOptions options) {
  auto files = chain_order(paths);
  if (!files) return fail(files.error());
  VerifyReport report;
  report.files = *files;
  std::vector<ScannedField> f;
  std::string prev_hash;
  std::string prev_where;
  uint64_t expect_seq = 0;  // 0 until the first line
  // A head after seq 1, decided at the end: an audit_retention event later in the chain may
  // name it as an anchor.
  std::optional<std::string> unanchored_head;  // "seq:prev" of the first line
  std::string head_file;
  uint64_t head_line = 0;
  for (const std::string& path : *files) {
    auto reader = LineReader::open(path);
    if (!reader) return fail(reader.error());
    std::string_view line;
    bool terminated;
    while ((*reader)->next(line, terminated)) {
      uint64_t line_no = (*reader)->line_number();
      auto broken = [&](std::string reason) {
        report.ok = false;
        report.file = path;
        report.line = line_no;
        report.reason = std::move(reason);
        return report;
      };
      if (!terminated)
        return broken(
            "incomplete line (no newline at the end of the file): torn write or cut file");
      if (const char* err = scan_object(line, f))
        return broken(std::string("not a valid audit record: ") + err);
      if (const char* err = check_shape(f))
        return broken(std::string("not a valid audit record: ") + err);
      if (f[0].escaped || !parse_rfc3339(f[0].raw)) return broken("ts is not an RFC 3339 time");
      auto seq_value = to_int(f[1]);
      if (!seq_value || *seq_value <= 0) return broken("seq is not a positive integer");
      uint64_t seq = uint64_t(*seq_value);
      std::string_view prev = f.back().raw;
      if (expect_seq == 0) {
        if (seq != 1) {
          unanchored_head = std::to_string(seq) + ":" + std::string(prev);
          head_file = path;
          head_line = line_no;
          report.partial = true;
        } else if (prev != kGenesisPrev) {
          return broken("seq 1 does not carry the genesis prev: lines before it were removed");
        }
        report.first_seq = seq;
      } else {
        if (seq < expect_seq)
          return broken("seq " + std::to_string(seq) + " where " + std::to_string(expect_seq) +
                        " was expected: lines reordered, repeated or inserted");
        if (seq > expect_seq)
          return broken("seq " + std::to_string(seq) + " where " + std::to_string(expect_seq) +
                        " was expected: " + std::to_string(seq - expect_seq) +
                        " line(s) or a file removed");
        if (prev != prev_hash)
          return broken("prev does not match the SHA-256 of the line before (" + prev_where +
                        "): that line was altered, or a line was inserted or removed here");
      }
      if (f[2].raw == "audit_recovered") ++report.recoveries;
      if (unanchored_head && f[2].raw == "audit_retention") {
        int a = find_field(f, "anchors");
        if (a >= 0 && f[size_t(a)].kind == ValueKind::kString) {
          std::string list = "," + unescape(f[size_t(a)]) + ",";
          if (list.find("," + *unanchored_head + ",") != std::string::npos) {
            unanchored_head.reset();
            report.anchored = true;
          }
        }
      }
      prev_hash = line_hash(line);
      prev_where = path + ":" + std::to_string(line_no);
      expect_seq = seq + 1;
      report.last_seq = seq;
      ++report.lines;
    }
    if (!(*reader)->error().empty()) return fail((*reader)->error());
  }
  if (unanchored_head && !options.allow_partial) {
    report.ok = false;
    report.file = head_file;
    report.line = head_line;
    report.reason = "the chain starts at seq " + std::to_string(report.first_seq) +
                    ", not 1, and no audit_retention event names that line as the first one "
                    "kept: earlier lines or files are missing (a partial check of a tail needs "
                    "--partial)";
    return report;
  }
  report.ok = true;
  report.head = report.lines > 0 ? prev_hash : std::string(kGenesisPrev);
  return report;
}

namespace {

bool equals(const ScannedField* f, const std::string& want) {
  if (!f) return false;
  if (f->kind != ValueKind::kString) return f->raw == want;
  if (!f->escaped) return f->raw == want;
  return unescape(*f) == want;
}

bool ts_in_range(const ScannedField& ts, const std::string& since, const std::string& until) {
  if (ts.kind != ValueKind::kString) return false;
  std::string normalized;
  std::string_view t = ts.raw;
  // The writer's form sorts as text; anything else is parsed and normalized first.
  if (ts.escaped || t.size() != 27 || t.back() != 'Z') {
    auto parsed = parse_rfc3339(unescape(ts));
    if (!parsed) return false;
    normalized = format_rfc3339_micros(*parsed);
    t = normalized;
  }
  if (!since.empty() && t < since) return false;
  if (!until.empty() && t >= until) return false;
  return true;
}

// Decides a line while scanning it, field by field: a line is dropped at the first field that
// fails a filter, so a selective query reads little more than the first fields of most lines.
class Matcher {
 public:
  static constexpr unsigned kTs = 1, kEvent = 2, kSandbox = 4, kDecision = 8, kRule = 16,
                            kHost = 32;

  explicit Matcher(const QueryFilter& q) : q_(q) {
    if (q.since) since_ = format_rfc3339_micros(*q.since), need_ |= kTs;
    if (q.until) until_ = format_rfc3339_micros(*q.until), need_ |= kTs;
    if (q.event) need_ |= kEvent;
    if (q.sandbox) need_ |= kSandbox;
    if (q.decision) need_ |= kDecision;
    if (q.rule) need_ |= kRule;
    if (q.host) {
      need_ |= kHost;
      host_ = *q.host;
      if (host_.rfind("*.", 0) == 0) {
        suffix_ = true;
        host_ = host_.substr(1);  // ".example.com"
      }
    }
  }

  enum Outcome { kMatch, kNoMatch, kInvalid };

  // Scans `line` into `fields` (complete only on kMatch). Without filters nothing needs scanning:
  // only the line's frame is checked, and `scanned` says whether `fields` is filled.
  Outcome run(std::string_view line, std::vector<ScannedField>& fields, bool& scanned) const {
    fields.clear();
    if (need_ == 0) {
      scanned = false;
      constexpr std::string_view kStart = "{\"ts\":\"";
      bool framed = line.size() > kStart.size() && line.substr(0, kStart.size()) == kStart &&
                    line.back() == '}';
      return framed ? kMatch : kInvalid;
    }
    scanned = true;
    ObjectScanner scanner(line, /*strict=*/false);
    ScannedField f;
    unsigned seen = 0;
    for (;;) {
      int r = scanner.next(f);
      if (r < 0) return kInvalid;
      if (r == 0) break;
      fields.push_back(f);
      unsigned which = need_ & classify(f.key);
      if (which == 0) continue;
      if (!check(which, f)) return kNoMatch;
      seen |= which;
    }
    if (fields.empty() || fields.front().key != "ts") return kInvalid;
    return seen == need_ ? kMatch : kNoMatch;
  }

 private:
  static unsigned classify(std::string_view key) {
    switch (key.size()) {
      case 2:
        return key == "ts" ? kTs : 0;
      case 4:
        return key == "rule" ? kRule : key == "host" ? kHost : 0;
      case 5:
        return key == "event" ? kEvent : 0;
      case 7:
        return key == "sandbox" ? kSandbox : 0;
      case 8:
        return key == "decision" ? kDecision : 0;
      default:
        return 0;
    }
  }

  bool check(unsigned which, const ScannedField& f) const {
    switch (which) {
      case kTs:
        return ts_in_range(f, since_, until_);
      case kEvent:
        return equals(&f, *q_.event);
      case kSandbox:
        return equals(&f, *q_.sandbox);
      case kDecision:
        return equals(&f, *q_.decision);
      case kRule:
        return equals(&f, *q_.rule);
      case kHost: {
        if (f.kind != ValueKind::kString) return false;
        std::string value = unescape(f);
        if (!suffix_) return ascii_iequals(value, host_);
        return value.size() > host_.size() &&
               ascii_iequals(std::string_view(value).substr(value.size() - host_.size()), host_);
      }
      default:
        return false;
    }
  }

  const QueryFilter& q_;
  unsigned need_ = 0;
  std::string since_, until_, host_;
  bool suffix_ = false;
};

}  // namespace

Result<QueryStats> query(const std::vector<std::string>& paths, const QueryFilter& filter,
                         const std::function<bool(const Record&)>& on_match) {
  auto files = chain_order(paths);
  if (!files) return fail(files.error());
  QueryStats stats;
  stats.files = *files;
  Matcher matcher(filter);
  Record::Fields fields;
  for (const std::string& path : *files) {
    auto reader = LineReader::open(path);
    if (!reader) return fail(reader.error());
    std::string_view line;
    bool terminated;
    while ((*reader)->next(line, terminated)) {
      ++stats.lines;
      auto outcome = matcher.run(line, fields.v, fields.scanned);
      if (outcome == Matcher::kInvalid) ++stats.invalid;
      if (outcome != Matcher::kMatch) continue;
      ++stats.matched;
      if (!on_match(Record(line, &fields, &path, (*reader)->line_number()))) return stats;
    }
    if (!(*reader)->error().empty()) return fail((*reader)->error());
  }
  return stats;
}

}  // namespace cordon::audit
