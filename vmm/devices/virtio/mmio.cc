#include "vmm/devices/virtio/mmio.h"

#include <cstring>

#include "vmm/snapshot/bytes.h"

namespace cordon::vmm::virtio {
namespace {
constexpr uint32_t kMagic = 0x74726976;   // "virt"
constexpr uint32_t kVendor = 0x434F5244;  // "CORD"
}  // namespace

MmioTransport::MmioTransport(std::unique_ptr<Device> device, GuestMemory* mem,
                             std::function<void()> irq)
    : device_(std::move(device)), mem_(mem), irq_(std::move(irq)) {
  for (int i = 0; i < device_->num_queues(); ++i) queues_.emplace_back(device_->queue_max_size());
}

Queue* MmioTransport::selected() {
  return queue_sel_ < queues_.size() ? &queues_[queue_sel_] : nullptr;
}

DeviceContext MmioTransport::context() {
  DeviceContext c;
  c.mem = mem_;
  c.queues = &queues_;
  c.features = driver_features_;
  // Both callbacks run with mu_ held (from notify() or a backend holding lock()).
  c.signal_used = [this] {
    interrupt_status_ |= 1;
    irq_();
  };
  c.needs_reset = [this] {
    status_ |= kStatusNeedsReset;
    interrupt_status_ |= 2;  // configuration change tells the driver to look at the status
    irq_();
  };
  return c;
}

void MmioTransport::read(uint64_t offset, uint8_t* data, size_t len) {
  std::lock_guard lock(mu_);
  if (offset >= 0x100) {
    device_->read_config(offset - 0x100, data, len);
    return;
  }
  uint32_t v = (len == 4 && offset % 4 == 0) ? read_reg(offset) : 0;  // registers are 32-bit only
  std::memcpy(data, &v, std::min<size_t>(len, 4));
  if (len > 4) std::memset(data + 4, 0, len - 4);
}

void MmioTransport::write(uint64_t offset, const uint8_t* data, size_t len) {
  std::lock_guard lock(mu_);
  if (offset >= 0x100) {
    device_->write_config(offset - 0x100, data, len);
    return;
  }
  if (len != 4 || offset % 4 != 0) return;
  uint32_t v = 0;
  std::memcpy(&v, data, 4);
  write_reg(offset, v);
}

uint32_t MmioTransport::read_reg(uint64_t offset) {
  const uint64_t offered = device_->features() | kFVersion1;
  Queue* q = selected();
  switch (offset) {
    case 0x000:
      return kMagic;
    case 0x004:
      return 2;
    case 0x008:
      return device_->device_id();
    case 0x00C:
      return kVendor;
    case 0x010:
      return device_features_sel_ == 0   ? static_cast<uint32_t>(offered)
             : device_features_sel_ == 1 ? static_cast<uint32_t>(offered >> 32)
                                         : 0;
    case 0x034:
      return q ? q->max_size() : 0;
    case 0x044:
      return q ? (q->ready ? 1 : 0) : 0;
    case 0x060:
      return interrupt_status_;
    case 0x070:
      return status_;
    case 0x0FC:
      return config_generation_;
    default:
      return 0;
  }
}

void MmioTransport::write_reg(uint64_t offset, uint32_t v) {
  Queue* q = selected();
  // Queue registers may change only between FEATURES_OK and DRIVER_OK, on a queue not yet ready.
  const bool queue_config_ok =
      (status_ & kStatusFeaturesOk) && !(status_ & kStatusDriverOk) && q && !q->ready;
  auto set_lo = [](uint64_t& a, uint32_t x) { a = (a & ~0xFFFFFFFFull) | x; };
  auto set_hi = [](uint64_t& a, uint32_t x) { a = (a & 0xFFFFFFFFull) | (uint64_t(x) << 32); };
  switch (offset) {
    case 0x014:
      device_features_sel_ = v;
      break;
    case 0x020:
      if ((status_ & kStatusDriver) && !(status_ & kStatusFeaturesOk)) {
        if (driver_features_sel_ == 0)
          set_lo(driver_features_, v);
        else if (driver_features_sel_ == 1)
          set_hi(driver_features_, v);
      }
      break;
    case 0x024:
      driver_features_sel_ = v;
      break;
    case 0x030:
      queue_sel_ = v;
      break;
    case 0x038:
      if (queue_config_ok) q->size = static_cast<uint16_t>(std::min<uint32_t>(v, 0xFFFF));
      break;
    case 0x044:
      if (queue_config_ok && v == 1) {
        q->event_idx = (driver_features_ & kFEventIdx) != 0;
        q->indirect = (driver_features_ & kFIndirectDesc) != 0;
        if (q->validate(*mem_))
          q->ready = true;
        else
          status_ |= kStatusNeedsReset;
      } else if (q && v == 0 && !(status_ & kStatusDriverOk)) {
        q->ready = false;
      }
      break;
    case 0x050:
      if (activated_ && v < queues_.size() && queues_[v].ready && !(status_ & kStatusNeedsReset))
        device_->notify(static_cast<int>(v));
      break;
    case 0x064:
      interrupt_status_ &= ~v;
      break;
    case 0x070:
      set_status(v);
      break;
    case 0x080:
      if (queue_config_ok) set_lo(q->desc_addr, v);
      break;
    case 0x084:
      if (queue_config_ok) set_hi(q->desc_addr, v);
      break;
    case 0x090:
      if (queue_config_ok) set_lo(q->avail_addr, v);
      break;
    case 0x094:
      if (queue_config_ok) set_hi(q->avail_addr, v);
      break;
    case 0x0A0:
      if (queue_config_ok) set_lo(q->used_addr, v);
      break;
    case 0x0A4:
      if (queue_config_ok) set_hi(q->used_addr, v);
      break;
    default:
      break;
  }
}

void MmioTransport::set_status(uint32_t v) {
  if (v == 0) {
    reset_locked();
    return;
  }
  // Status bits only ever get added (apart from reset); refuse to clear bits.
  if ((v & status_) != status_) return;
  uint32_t added = v & ~status_;
  if (added & kStatusFeaturesOk) {
    const uint64_t offered = device_->features() | kFVersion1;
    if ((driver_features_ & ~offered) != 0 || !(driver_features_ & kFVersion1)) {
      v &= ~kStatusFeaturesOk;  // the driver re-reads the status and sees negotiation failed
    }
  }
  if ((added & kStatusDriverOk) && (v & kStatusFeaturesOk) && !activated_) {
    status_ = v;
    if (auto st = device_->activate(context()); st) {
      activated_ = true;
    } else {
      status_ |= kStatusNeedsReset;
    }
    return;
  }
  status_ = v;
}

void MmioTransport::reset_locked() {
  device_->reset();
  for (auto& q : queues_) q.reset();
  status_ = 0;
  driver_features_ = 0;
  device_features_sel_ = driver_features_sel_ = queue_sel_ = 0;
  interrupt_status_ = 0;
  activated_ = false;
}

std::string MmioTransport::save_state() const {
  snapshot::Writer w;
  w.u32(status_);
  w.u64(driver_features_);
  w.u32(interrupt_status_);
  w.u32(config_generation_);
  w.u32(queue_sel_);
  w.u8(activated_ ? 1 : 0);
  w.u32(static_cast<uint32_t>(queues_.size()));
  for (const auto& q : queues_) {
    w.u16(q.size);
    w.u8(q.ready);
    w.u64(q.desc_addr);
    w.u64(q.avail_addr);
    w.u64(q.used_addr);
    w.u16(q.next_avail);
    w.u16(q.next_used);
    w.u8(q.event_idx);
    w.u8(q.indirect);
  }
  w.blob(device_->save_state());
  return w.take();
}

Status MmioTransport::restore_state(const std::string& bytes) {
  std::lock_guard lock(mu_);
  snapshot::Reader r(bytes);
  status_ = r.u32();
  driver_features_ = r.u64();
  interrupt_status_ = r.u32();
  config_generation_ = r.u32();
  queue_sel_ = r.u32();
  bool activated = r.u8() != 0;
  uint32_t n = r.u32();
  if (!r.ok() || n != queues_.size()) return fail("virtio-mmio state: queue count mismatch");
  for (auto& q : queues_) {
    q.size = r.u16();
    q.ready = r.u8() != 0;
    q.desc_addr = r.u64();
    q.avail_addr = r.u64();
    q.used_addr = r.u64();
    q.next_avail = r.u16();
    q.next_used = r.u16();
    q.event_idx = r.u8() != 0;
    q.indirect = r.u8() != 0;
    if (q.ready) {
      if (auto st = q.validate(*mem_); !st) return fail("virtio-mmio state: " + st.error().message);
    }
  }
  std::string dev = r.blob();
  if (!r.ok() || !r.at_end()) return fail("virtio-mmio state: truncated or trailing bytes");
  if (auto st = device_->restore_state(dev); !st) return st;
  if (activated) {
    if (auto st = device_->reactivate(context()); !st) return st;
    activated_ = true;
  }
  return {};
}

}  // namespace cordon::vmm::virtio
