#include "train/step_agreement.hpp"

namespace trident {

StepAgreement::~StepAgreement() {
  if (posted_request_.active()) comm_.wait(posted_request_);
}

void StepAgreement::finish_posted() {
  if (posted_request_.active()) comm_.wait(posted_request_);
}

const StepFlags& StepAgreement::at(int done, bool final, const StepFlags& local) {
  if (agreed_for_ == done) return agreed_;
  agreed_for_ = done;
  if (lagged_ && !final) {
    const bool posted = posted_request_.active();
    finish_posted();
    agreed_ = posted ? posted_ : StepFlags{};
    return agreed_;
  }
  finish_posted();
  agreed_ = local;
  comm_.all_reduce(agreed_.data(), agreed_.size(), DType::i32, ReduceOp::max);
  return agreed_;
}

void StepAgreement::post(const StepFlags& local) {
  finish_posted();
  posted_ = local;
  posted_request_ = comm_.iall_reduce(posted_.data(), posted_.size(), DType::i32, ReduceOp::max);
}

}  // namespace trident
