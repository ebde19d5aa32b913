// What a GptModel is given besides its shape: the operators and storage its
// parallelisms supply (null: the serial model's own), the part of the model
// and of the micro-batch this rank computes, and how activations are kept.
#pragma once
#include "core/dtype.hpp"
#include "model/activation_policy.hpp"
#include "model/attention_op.hpp"
#include "model/model_storage.hpp"
#include "model/model_workspace.hpp"
#include "model/param_table.hpp"
#include "model/stage_spec.hpp"
#include "model/tensor_group.hpp"
#include "model/token_layout.hpp"
#include "parallel/tensor/tensor_layout.hpp"

namespace trident {

struct GptModelOptions {
  TensorParallelLayout tp;
  // Not owned. The TP/SP boundary operations (null: one tensor rank) and
  // attention (null: the backend's, on this rank).
  TensorGroupOps* tensor_group = nullptr;
  AttentionOp* attention = nullptr;
  UnitLayout units;                 // see build_gpt_param_table
  ModelStorage* storage = nullptr;  // not owned; null: full arenas
  DType weights = DType::f32;       // the full arenas' parameter type (bf16/f16: 16-bit weights)
  DType grads = DType::f32;         // and gradient type (precision.reduce_dtype)
  StageSpec stage;                  // default: the whole model
  // The micro-batch's rows this rank computes (default: whole sequences).
  TokenLayout tokens;
  ActivationPolicy activations;     // what is saved for backward, and in which type
  // A tied head's split backward takes the table's gradient in B, not W, so
  // the stage's share of it is final with its last B (sent to the first
  // stage then). Whole tables only.
  bool table_grads_in_b = false;
  // Not owned; null: the model's own. Models of one rank with the same config
  // and micro-batch may share one (the first built allocates it).
  ModelWorkspace* workspace = nullptr;
};

}  // namespace trident
