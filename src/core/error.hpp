// Error kinds and the exit codes they map to. Bad input (deck, CLI, data,
// checkpoint) exits 2 on every rank; a failure while running exits 1.
#pragma once
#include <stdexcept>
#include <string>

namespace trident {

enum ExitCode : int { kExitOk = 0, kExitRuntime = 1, kExitBadInput = 2 };

// Something the user gave us is wrong; the message says what and how to fix it.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Something went wrong while running (I/O, a collective timing out, ...).
struct RuntimeFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace trident
