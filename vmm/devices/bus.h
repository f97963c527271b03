// Port-I/O and MMIO dispatch: vCPU exits are routed to the device owning the address. Devices are
// registered before any vCPU runs and never removed, so lookups need no lock; each device locks
// its own state. Trusts: addresses come from the guest, so unmatched accesses read as all-ones and
// writes to them are dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace cordon::vmm::devices {

class BusDevice {
 public:
  virtual ~BusDevice() = default;
  // offset is relative to the start of the device's range; len is 1, 2, 4 or 8.
  virtual void read(uint64_t offset, uint8_t* data, size_t len) = 0;
  virtual void write(uint64_t offset, const uint8_t* data, size_t len) = 0;
};

class Bus {
 public:
  void add(uint64_t base, uint64_t len, std::shared_ptr<BusDevice> dev) {
    ranges_.push_back({base, len, std::move(dev)});
  }
  // Returns false when no device owns the address (the caller fills reads with 0xFF).
  bool read(uint64_t addr, uint8_t* data, size_t len) const {
    for (const auto& r : ranges_)
      if (addr >= r.base && addr - r.base < r.len) {
        r.dev->read(addr - r.base, data, len);
        return true;
      }
    return false;
  }
  bool write(uint64_t addr, const uint8_t* data, size_t len) const {
    for (const auto& r : ranges_)
      if (addr >= r.base && addr - r.base < r.len) {
        r.dev->write(addr - r.base, data, len);
        return true;
      }
    return false;
  }

 private:
  struct Range {
    uint64_t base, len;
    std::shared_ptr<BusDevice> dev;
  };
  std::vector<Range> ranges_;
};

}  // namespace cordon::vmm::devices
