// An open-addressing hash index from strings to uint32 values, for the hot path: lookups
// take a string_view and never allocate; keys live in one arena so a probe touches the slot
// array and (on a hash hit) one arena position. Built once, then read-only.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::policy::detail {

class StringIndex {
 public:
  static constexpr std::uint32_t kMissing = 0xFFFFFFFFu;

  // Returns the value for key, or kMissing.
  std::uint32_t find(std::string_view key) const {
    if (slots_.empty()) return kMissing;
    const std::uint64_t h = hash(key);
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.value == kMissing) return kMissing;
      if (s.hash == h && s.length == key.size() &&
          std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0)
        return s.value;
    }
  }

  // Inserts key -> value unless key is present. Returns the value now stored for key.
  std::uint32_t insert(std::string_view key, std::uint32_t value) {
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();
    const std::uint64_t h = hash(key);
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.value == kMissing) {
        s = Slot{h, static_cast<std::uint32_t>(arena_.size()),
                 static_cast<std::uint32_t>(key.size()), value};
        arena_.append(key);
        ++size_;
        return value;
      }
      if (s.hash == h && s.length == key.size() &&
          std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0)
        return s.value;
    }
  }

  std::size_t size() const { return size_; }

  // Rewrites every stored value (used once after building, to pack small lists).
  template <class F>
  void remap_values(F&& f) {
    for (Slot& s : slots_)
      if (s.value != kMissing) s.value = f(s.value);
  }

 private:
  struct Slot {
    std::uint64_t hash = 0;
    std::uint32_t offset = 0;
    std::uint32_t length = 0;
    std::uint32_t value = kMissing;
  };

  static std::uint64_t hash(std::string_view key) { return std::hash<std::string_view>{}(key); }

  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.empty() ? 16 : old.size() * 2, Slot{});
    const std::size_t mask = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.value == kMissing) continue;
      std::size_t i = s.hash & mask;
      while (slots_[i].value != kMissing) i = (i + 1) & mask;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  std::string arena_;
  std::size_t size_ = 0;
};

}  // namespace cordon::policy::detail
