// Limits of the steering program and its loader. The kernel-side ones are hard (compiled into
// the embedded object, see steer_common.h); the user-side ones are soft defaults.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bpf/steer_common.h"

namespace cordon::bpf {

// Hard: drop events a single interface may emit per CPU per second (counters count on).
inline constexpr uint32_t kMaxDropEventsPerSecPerCpu = CORDON_MAX_EVENTS_PER_SEC;
// Hard: interfaces that can have counters and source filters at once.
inline constexpr uint32_t kMaxInterfaces = CORDON_MAX_INTERFACES;
// Hard: size of the drop-event ring buffer.
inline constexpr uint32_t kDropRingBytes = CORDON_DROP_RING_BYTES;
// Soft: tail of libbpf's output (verifier log) kept for an error message.
inline constexpr size_t kMaxLibbpfLogBytes = 4096;

}  // namespace cordon::bpf
