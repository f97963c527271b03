#include "common/time_format.h"

#include <cctype>
#include <cstdio>
#include <ctime>

namespace cordon {

std::string format_rfc3339_micros(SystemTime t) {
  using namespace std::chrono;
  auto us = duration_cast<microseconds>(t.time_since_epoch()).count();
  time_t secs = time_t(us / 1000000);
  long frac = long(us % 1000000);
  if (frac < 0) {
    frac += 1000000;
    --secs;
  }
  struct tm tm;
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
  return buf;
}

namespace {

bool take_digits(std::string_view& s, int n, int& out) {
  if (s.size() < size_t(n)) return false;
  out = 0;
  for (int i = 0; i < n; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    out = out * 10 + (s[i] - '0');
  }
  s.remove_prefix(n);
  return true;
}

bool take_char(std::string_view& s, char c) {
  if (s.empty() || (s[0] != c && !(c == 'T' && (s[0] == 't' || s[0] == ' ')))) return false;
  s.remove_prefix(1);
  return true;
}

}  // namespace

std::optional<SystemTime> parse_rfc3339(std::string_view s) {
  int y, mo, d, h = 0, mi = 0, sec = 0;
  if (!take_digits(s, 4, y) || !take_char(s, '-') || !take_digits(s, 2, mo) || !take_char(s, '-') ||
      !take_digits(s, 2, d))
    return std::nullopt;
  if (!s.empty()) {
    if (!take_char(s, 'T') || !take_digits(s, 2, h) || !take_char(s, ':') ||
        !take_digits(s, 2, mi) || !take_char(s, ':') || !take_digits(s, 2, sec))
      return std::nullopt;
  }
  long micros = 0;
  if (!s.empty() && s[0] == '.') {
    s.remove_prefix(1);
    int digits = 0;
    while (!s.empty() && std::isdigit(static_cast<unsigned char>(s[0]))) {
      if (digits < 6) micros = micros * 10 + (s[0] - '0');
      ++digits;
      s.remove_prefix(1);
    }
    if (digits == 0) return std::nullopt;
    for (int i = digits; i < 6; ++i) micros *= 10;
  }
  long offset = 0;
  if (!s.empty()) {
    if (s[0] == 'Z' || s[0] == 'z') {
      s.remove_prefix(1);
    } else if (s[0] == '+' || s[0] == '-') {
      int sign = s[0] == '+' ? 1 : -1;
      s.remove_prefix(1);
      int oh, om;
      if (!take_digits(s, 2, oh) || !take_char(s, ':') || !take_digits(s, 2, om))
        return std::nullopt;
      offset = sign * (oh * 3600L + om * 60L);
    } else {
      return std::nullopt;
    }
  }
  if (!s.empty() || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
    return std::nullopt;
  struct tm tm = {};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  time_t t = timegm(&tm);
  return SystemTime(std::chrono::seconds(t - offset)) + std::chrono::microseconds(micros);
}

std::optional<std::chrono::seconds> parse_duration(std::string_view s) {
  if (s.empty()) return std::nullopt;
  long long total = 0;
  while (!s.empty()) {
    long long n = 0;
    size_t digits = 0;
    while (!s.empty() && std::isdigit(static_cast<unsigned char>(s[0]))) {
      n = n * 10 + (s[0] - '0');
      if (n > 100LL * 365 * 86400) return std::nullopt;
      s.remove_prefix(1);
      ++digits;
    }
    if (digits == 0 || s.empty()) return std::nullopt;
    char unit = s[0];
    s.remove_prefix(1);
    switch (unit) {
      case 's':
        total += n;
        break;
      case 'm':
        total += n * 60;
        break;
      case 'h':
        total += n * 3600;
        break;
      case 'd':
        total += n * 86400;
        break;
      default:
        return std::nullopt;
    }
  }
  return std::chrono::seconds(total);
}

}  // namespace cordon
