// Collective agreement on errors: a phase that may fail on some ranks only
// (a file missing on one node) is run everywhere, then all ranks learn whether
// any failed and with which message, so every rank exits with the same code and
// rank 0 reports once. Nothing is left waiting in a collective.
#pragma once
#include <functional>
#include <stdexcept>
#include <string>

#include "comm/communicator.hpp"

namespace trident {

// The error every rank holds after agreement; exit_code is kExitBadInput or
// kExitRuntime.
struct AgreedError : std::runtime_error {
  AgreedError(int code, const std::string& what) : std::runtime_error(what), exit_code(code) {}
  int exit_code;
};

// Runs `phase`; if it threw InputError or RuntimeFailure on any rank, throws
// the lowest failing rank's error as an AgreedError on every rank.
void run_agreed(Communicator& comm, const std::function<void()>& phase);

// A warning that may hold on some ranks only (a node's scratch disk without
// O_DIRECT, a node's different CPU): every rank learns the lowest such rank's
// text, with how many ranks have one where the job has several; "" when no
// rank has one. Collective.
std::string agreed_warning(Communicator& comm, const std::string& local);

}  // namespace trident
