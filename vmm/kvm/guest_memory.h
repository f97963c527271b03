// Guest RAM: one contiguous region at guest-physical 0 (limits.h), backed by a memfd (so a
// snapshot can write it out and clones can share it), by a snapshot file mapped MAP_PRIVATE
// (copy-on-write), or by a caller's buffer (tests and fuzzers). Owns the mapping. Trusts nothing
// about guest addresses: every access is bounds-checked with overflow-safe arithmetic, and data is
// copied out before the caller validates it (the guest may change memory concurrently).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "common/result.h"
#include "vmm/kvm/kvm.h"

namespace cordon::vmm {

class GuestMemory {
 public:
  GuestMemory() = default;
  GuestMemory(GuestMemory&& o) noexcept { *this = std::move(o); }
  GuestMemory& operator=(GuestMemory&& o) noexcept;
  GuestMemory(const GuestMemory&) = delete;
  GuestMemory& operator=(const GuestMemory&) = delete;
  ~GuestMemory();

  // Anonymous RAM in a sealed-size memfd, zero-filled, MAP_SHARED of the memfd.
  static Result<GuestMemory> create_memfd(uint64_t size);
  // Snapshot memory file mapped MAP_PRIVATE: reads share the page cache, writes are private.
  static Result<GuestMemory> map_file_private(const std::string& path, uint64_t size);
  // Non-owning view of a caller buffer (tests, fuzzers).
  static GuestMemory wrap(uint8_t* data, uint64_t size);

  uint8_t* host_base() const { return base_; }
  uint64_t size() const { return size_; }
  int memfd() const { return memfd_.get(); }

  // True when [gpa, gpa+len) lies inside RAM, without overflow.
  bool range_ok(uint64_t gpa, uint64_t len) const { return gpa <= size_ && len <= size_ - gpa; }
  // Host pointer for a checked range, or nullptr.
  uint8_t* ptr(uint64_t gpa, uint64_t len) const {
    return range_ok(gpa, len) ? base_ + gpa : nullptr;
  }

  Status read(uint64_t gpa, void* dst, uint64_t len) const;
  Status write(uint64_t gpa, const void* src, uint64_t len);
  template <class T>
  Result<T> read_obj(uint64_t gpa) const {
    T v{};
    if (auto st = read(gpa, &v, sizeof(T)); !st) return fail(st.error());
    return v;
  }
  template <class T>
  Status write_obj(uint64_t gpa, const T& v) {
    return write(gpa, &v, sizeof(T));
  }

  // Writes the whole RAM to `path` (a snapshot's memory file).
  Status save_to_file(const std::string& path) const;

 private:
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  bool owned_ = false;
  kvm::Fd memfd_;
};

}  // namespace cordon::vmm
