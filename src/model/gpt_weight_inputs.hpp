// The zero-bubble split of backward (Qi et al. 2024): where B keeps what W
// reads, laid out by GptModel::weight_input_layout (gpt_weight_inputs.cpp).
#pragma once
#include <cstddef>
#include <string>
#include <unordered_map>

#include "memory/tensor_table.hpp"
#include "model/gpt_handles.hpp"

namespace trident {

// Where B keeps each input of W for one micro-batch: in its saved
// activations, over what B has read for the last time, or in its
// weight_inputs (MicroBatchActs).
struct WeightInputLayout {
  using Place = WeightInputPlace;
  std::unordered_map<std::string, Place> places;
  TensorTable buffer;        // weight_inputs: what finds no dead room in the saved activations
  std::size_t in_saved = 0;  // elements kept in the saved activations
};

}  // namespace trident
