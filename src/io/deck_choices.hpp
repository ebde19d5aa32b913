// The deck's string-valued keys as enums, each with one table of its deck
// spellings. The deck reader parses a name once; whatever prints a choice
// (banner, reports, plan JSON, checkpoint metadata, the deck reference)
// writes it from the same table, so the spellings cannot drift apart.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/dtype.hpp"
#include "model/gpt_config.hpp"

namespace trident {

// parallel.schedule (parallel/pipeline/schedule.hpp describes each).
enum class ScheduleKind { naive, gpipe, one_f_one_b, interleaved, pipedream, zb_h1, zb_h2, zb_v };
// train.recompute (model/activation_policy.hpp describes each).
enum class Recompute { none, selective, full };
// precision.dtype and precision.reduce_dtype.
enum class Precision { fp32, bf16, fp16 };
// parallel.dp_mode: bucketed all-reduce, or reduce to rank 0 and broadcast.
enum class DpMode { allreduce, gather };
// parallel.partition: how the layers are cut into pipeline stages.
enum class PartitionMethod { uniform, parameters, profile };
// system.device.
enum class Device { cpu, cuda };
// system.comm; `automatic` is the deck's "auto" (resolved in app/backends).
enum class CommBackend { automatic, mpi, nccl, staged };
// offload.optimizer and offload.params: where ZeRO's shards of that state live.
enum class OffloadTarget { none, cpu, nvme };

template <class E>
struct ChoiceName {
  E value;
  const char* name;
};

// Each table lists the names in the order messages and the reference give them.
inline constexpr ChoiceName<ScheduleKind> kScheduleNames[] = {
    {ScheduleKind::naive, "naive"},       {ScheduleKind::gpipe, "gpipe"},
    {ScheduleKind::one_f_one_b, "1f1b"},  {ScheduleKind::zb_h1, "zb-h1"},
    {ScheduleKind::zb_h2, "zb-h2"},       {ScheduleKind::zb_v, "zb-v"},
    {ScheduleKind::interleaved, "interleaved"}, {ScheduleKind::pipedream, "pipedream"}};
inline constexpr ChoiceName<Recompute> kRecomputeNames[] = {
    {Recompute::none, "none"}, {Recompute::selective, "selective"}, {Recompute::full, "full"}};
inline constexpr ChoiceName<Precision> kPrecisionNames[] = {
    {Precision::fp32, "fp32"}, {Precision::bf16, "bf16"}, {Precision::fp16, "fp16"}};
inline constexpr ChoiceName<DpMode> kDpModeNames[] = {{DpMode::allreduce, "allreduce"},
                                                      {DpMode::gather, "gather"}};
inline constexpr ChoiceName<PartitionMethod> kPartitionNames[] = {
    {PartitionMethod::uniform, "uniform"},
    {PartitionMethod::parameters, "parameters"},
    {PartitionMethod::profile, "profile"}};
inline constexpr ChoiceName<Device> kDeviceNames[] = {{Device::cpu, "cpu"}, {Device::cuda, "cuda"}};
inline constexpr ChoiceName<CommBackend> kCommNames[] = {{CommBackend::automatic, "auto"},
                                                         {CommBackend::mpi, "mpi"},
                                                         {CommBackend::nccl, "nccl"},
                                                         {CommBackend::staged, "staged"}};
inline constexpr ChoiceName<OffloadTarget> kOffloadNames[] = {
    {OffloadTarget::none, "none"}, {OffloadTarget::cpu, "cpu"}, {OffloadTarget::nvme, "nvme"}};

inline constexpr ChoiceName<ModelFamily> kFamilyNames[] = {{ModelFamily::gpt2, "gpt2"},
                                                           {ModelFamily::llama, "llama"}};
inline constexpr ChoiceName<PositionEncoding> kPositionNames[] = {
    {PositionEncoding::learned, "learned"}, {PositionEncoding::rope, "rope"}};
inline constexpr ChoiceName<NormKind> kNormNames[] = {{NormKind::layernorm, "layernorm"},
                                                      {NormKind::rmsnorm, "rmsnorm"}};
inline constexpr ChoiceName<MlpKind> kMlpNames[] = {{MlpKind::gelu, "gelu"},
                                                    {MlpKind::swiglu, "swiglu"}};

// The table of an enum, found by overload on a value of it.
constexpr std::span<const ChoiceName<ScheduleKind>> choices(ScheduleKind) { return kScheduleNames; }
constexpr std::span<const ChoiceName<Recompute>> choices(Recompute) { return kRecomputeNames; }
constexpr std::span<const ChoiceName<Precision>> choices(Precision) { return kPrecisionNames; }
constexpr std::span<const ChoiceName<DpMode>> choices(DpMode) { return kDpModeNames; }
constexpr std::span<const ChoiceName<PartitionMethod>> choices(PartitionMethod) {
  return kPartitionNames;
}
constexpr std::span<const ChoiceName<Device>> choices(Device) { return kDeviceNames; }
constexpr std::span<const ChoiceName<CommBackend>> choices(CommBackend) { return kCommNames; }
constexpr std::span<const ChoiceName<OffloadTarget>> choices(OffloadTarget) {
  return kOffloadNames;
}
constexpr std::span<const ChoiceName<ModelFamily>> choices(ModelFamily) { return kFamilyNames; }
constexpr std::span<const ChoiceName<PositionEncoding>> choices(PositionEncoding) {
  return kPositionNames;
}
constexpr std::span<const ChoiceName<NormKind>> choices(NormKind) { return kNormNames; }
constexpr std::span<const ChoiceName<MlpKind>> choices(MlpKind) { return kMlpNames; }

// The deck spelling of `value`.
template <class E>
constexpr const char* choice_name(E value) {
  for (const auto& c : choices(value))
    if (c.value == value) return c.name;
  return "?";
}

// The choice a deck spelling names, or nothing.
template <class E>
constexpr std::optional<E> parse_choice(std::string_view name) {
  for (const auto& c : choices(E{}))
    if (name == c.name) return c.value;
  return std::nullopt;
}

// Every spelling, as messages list them: "a", "b" or "c" (with quote "\"").
template <class E>
std::string choice_list(const std::string& quote) {
  const auto table = choices(E{});
  std::string out;
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (i > 0) out += i + 1 == table.size() ? " or " : ", ";
    out += quote + table[i].name + quote;
  }
  return out;
}

// Whether the schedule runs B and W as separate actions (zero bubble).
constexpr bool splits_backward(ScheduleKind k) {
  return k == ScheduleKind::zb_h1 || k == ScheduleKind::zb_h2 || k == ScheduleKind::zb_v;
}

// The element type weights (or gradients) of a precision are stored in.
constexpr DType precision_dtype(Precision p) {
  return p == Precision::bf16 ? DType::bf16 : p == Precision::fp16 ? DType::f16 : DType::f32;
}

}  // namespace trident
