#include "comm/agree.hpp"

#include <fmt/format.h>

#include <climits>
#include <vector>

#include "core/error.hpp"

namespace trident {

namespace {

// Rank `from`'s text, on every rank.
std::string broadcast_text(Communicator& comm, const std::string& text, int from) {
  std::int64_t n = std::int64_t(text.size());
  comm.broadcast(&n, 1, DType::i64, from);
  std::vector<char> bytes(static_cast<std::size_t>(n));
  if (comm.rank() == from) bytes.assign(text.begin(), text.end());
  comm.broadcast(bytes.data(), bytes.size(), DType::u8, from);
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace

void run_agreed(Communicator& comm, const std::function<void()>& phase) {
  int kind = 0;  // 0 ok, 1 runtime failure, 2 bad input
  std::string message;
  try {
    phase();
  } catch (const InputError& e) {
    kind = 2, message = e.what();
  } catch (const RuntimeFailure& e) {
    kind = 1, message = e.what();
  }
  // Lowest failing rank speaks for all.
  int first = kind ? comm.rank() : INT_MAX;
  comm.all_reduce(&first, 1, DType::i32, ReduceOp::min);
  if (first == INT_MAX) return;
  comm.broadcast(&kind, 1, DType::i32, first);
  const std::string agreed = broadcast_text(comm, message, first);
  throw AgreedError(kind == 2 ? kExitBadInput : kExitRuntime, agreed);
}

std::string agreed_warning(Communicator& comm, const std::string& local) {
  int first = local.empty() ? INT_MAX : comm.rank(), count = local.empty() ? 0 : 1;
  comm.all_reduce(&first, 1, DType::i32, ReduceOp::min);
  comm.all_reduce(&count, 1, DType::i32, ReduceOp::sum);
  if (first == INT_MAX) return "";
  const std::string text = broadcast_text(comm, local, first);
  if (comm.size() == 1) return text;
  return fmt::format("{} ({} of {} ranks, the first rank {})", text, count, comm.size(), first);
}

}  // namespace trident
