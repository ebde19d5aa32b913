#include "comm/agree.hpp"

#include <climits>
#include <vector>

#include "core/error.hpp"

namespace trident {

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
  std::int64_t header[2] = {kind, std::int64_t(message.size())};
  comm.broadcast(header, 2, DType::i64, first);
  std::vector<char> text(static_cast<std::size_t>(header[1]));
  if (comm.rank() == first) text.assign(message.begin(), message.end());
  comm.broadcast(text.data(), text.size(), DType::u8, first);
  const std::string agreed(text.begin(), text.end());
  throw AgreedError(header[0] == 2 ? kExitBadInput : kExitRuntime, agreed);
}

}  // namespace trident
