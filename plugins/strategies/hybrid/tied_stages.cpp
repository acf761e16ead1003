// Tied parameters across pipeline stages (Megatron's embedding group): every stage with a layer
// that uses the parameter holds it, and before the step each adds up all their gradients in
// stage order, so the copies see the same gradient and stay bitwise equal.
#include <algorithm>

#include "hybrid_strategy.hpp"
#include "tessera/base/error.hpp"

namespace tessera::hybrid {

namespace {

// Pipeline message tags: hybrid_strategy.cpp uses 1 .. 3 << 24 (activations, gradients, norm).
constexpr std::uint32_t kTiedTag = 4U << 24;

std::size_t stage_of(const std::vector<StageRange>& stages, std::size_t layer) {
  for (std::size_t s = 0; s < stages.size(); ++s) {
    if (layer < stages[s].last) return s;
  }
  throw InvalidArgument("hybrid: layer " + std::to_string(layer) + " is in no stage");
}

}  // namespace

void HybridStrategy::plan_ties(const std::vector<StageRange>& stages) {
  stage_ties_.clear();
  const auto me = static_cast<int>(groups_->at.pipeline);
  for (std::size_t index = 0; index < layout_.params.size(); ++index) {
    std::vector<int> holders{static_cast<int>(stage_of(stages, layout_.params[index].layer))};
    for (std::size_t l = 0; l < layout_.layer_params.size(); ++l) {
      const auto& used = layout_.layer_params[l];
      if (std::find(used.begin(), used.end(), index) == used.end()) continue;
      const auto s = static_cast<int>(stage_of(stages, l));
      if (std::find(holders.begin(), holders.end(), s) == holders.end()) holders.push_back(s);
    }
    if (holders.size() < 2 || std::find(holders.begin(), holders.end(), me) == holders.end()) {
      continue;
    }
    std::sort(holders.begin(), holders.end());
    const auto held = std::find_if(params_of_stage_.begin(), params_of_stage_.end(),
                                   [&](const LocalParam& p) { return p.model_index == index; });
    TESSERA_CHECK(held != params_of_stage_.end(), "hybrid: a tied parameter is not held");
    stage_ties_.push_back({held->offset, held->count, std::move(holders),
                           kTiedTag + static_cast<std::uint32_t>(index)});
  }
}

void HybridStrategy::sum_tied_gradients() {
  Communicator& pipeline = *groups_->pipeline;
  const auto me = static_cast<int>(groups_->at.pipeline);
  const auto grads = grads_.as<float>();
  for (const auto& tie : stage_ties_) {
    const auto mine = grads.subspan(tie.offset, tie.count);
    // Every holder's contribution, in stage order; this rank's own is copied before it is
    // overwritten by the sum.
    std::vector<std::vector<float>> parts(tie.stages.size(), std::vector<float>(tie.count));
    std::vector<std::shared_ptr<Work>> sends;
    for (std::size_t h = 0; h < tie.stages.size(); ++h) {
      if (tie.stages[h] == me) {
        std::copy(mine.begin(), mine.end(), parts[h].begin());
      } else {
        sends.push_back(pipeline.send(view_of(mine), tie.stages[h], tie.tag));
      }
    }
    for (std::size_t h = 0; h < tie.stages.size(); ++h) {
      if (tie.stages[h] == me) continue;
      pipeline.recv(view_of(std::span<float>(parts[h])), tie.stages[h], tie.tag)->wait();
    }
    for (auto& send : sends) send->wait();
    std::copy(parts[0].begin(), parts[0].end(), mine.begin());
    for (std::size_t h = 1; h < parts.size(); ++h) {
      for (std::size_t i = 0; i < tie.count; ++i) mine[i] += parts[h][i];
    }
  }
}

}  // namespace tessera::hybrid
