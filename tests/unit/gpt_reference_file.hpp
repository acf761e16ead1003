#pragma once
// The PyTorch reference file of a tiny GPT-2 (tests/unit/data/gpt_reference.bin, written by
// tools/reference/gpt_reference.py, which documents its layout): its reader and the flat
// parameter layout, shared by the kernel composition test and the gpt model's test.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "adam/adam.hpp"
#include "layers/vocab_cross_entropy.hpp"

namespace tessera::layers {

struct ReferenceShape {
  std::size_t layers = 0, heads = 0, width = 0, context = 0, vocab = 0, batch = 0, time = 0;
  std::int64_t ignore_index = kDefaultIgnoreIndex;
  [[nodiscard]] std::size_t tokens() const { return batch * time; }
};

// The parameters in one flat buffer, tensor after tensor in the order of the script's
// param_layout() (GPT-2's names), each row-major in PyTorch's layout (Linear weights [out, in]).
class ParamLayout {
 public:
  explicit ParamLayout(const ReferenceShape& s) {
    const std::size_t c = s.width;
    add("wte", s.vocab * c);
    add("wpe", s.context * c);
    for (std::size_t l = 0; l < s.layers; ++l) {
      const std::string p = "h." + std::to_string(l) + ".";
      add(p + "ln_1.weight", c);
      add(p + "ln_1.bias", c);
      add(p + "attn.c_attn.weight", 3 * c * c, true);
      add(p + "attn.c_attn.bias", 3 * c);
      add(p + "attn.c_proj.weight", c * c, true);
      add(p + "attn.c_proj.bias", c);
      add(p + "ln_2.weight", c);
      add(p + "ln_2.bias", c);
      add(p + "mlp.c_fc.weight", 4 * c * c, true);
      add(p + "mlp.c_fc.bias", 4 * c);
      add(p + "mlp.c_proj.weight", 4 * c * c, true);
      add(p + "mlp.c_proj.bias", c);
    }
    add("ln_f.weight", c);
    add("ln_f.bias", c);
  }

  struct Entry {
    std::string name;
    std::size_t offset = 0;
    std::size_t count = 0;
    bool decayed = false;  // a Linear weight: AdamW's weight decay applies
  };
  [[nodiscard]] const std::vector<Entry>& entries() const { return entries_; }
  [[nodiscard]] std::size_t total() const { return total_; }
  [[nodiscard]] std::span<float> of(std::vector<float>& flat, const std::string& name) const {
    const Entry& e = entries_.at(index_.at(name));
    return std::span<float>(flat).subspan(e.offset, e.count);
  }

 private:
  void add(std::string name, std::size_t count, bool decayed = false) {
    index_[name] = entries_.size();
    entries_.push_back({std::move(name), total_, count, decayed});
    total_ += count;
  }
  std::vector<Entry> entries_;
  std::map<std::string, std::size_t> index_;
  std::size_t total_ = 0;
};

struct Reference {
  ReferenceShape shape;
  adam::AdamConfig adamw;
  float learning_rate = 0.0F;
  std::size_t adam_steps = 0;
  std::vector<float> params, logits, grads;
  std::vector<std::int64_t> tokens, targets;
  double loss = 0.0;
  std::vector<double> losses;  // after k AdamW steps, k = 0 .. adam_steps
};

template <class T>
std::vector<T> read_values(std::ifstream& in, std::size_t count) {
  std::vector<T> values(count);
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(count * sizeof(T)));
  return values;
}

template <class T>
T read_value(std::ifstream& in) {
  return read_values<T>(in, 1)[0];
}

// The file is little-endian, as is every machine tessera builds on. Throws (failing the test
// with the message) when the file is missing, of another version or cut short.
inline Reference read_reference(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, sizeof magic);
  if (!in || std::string(magic, sizeof magic) != "TSGPTREF" ||
      read_value<std::uint32_t>(in) != 1U) {
    throw std::runtime_error(path + " is missing or not a version 1 reference file; " +
                             "regenerate it with tools/reference/gpt_reference.py");
  }
  const auto u = read_values<std::uint32_t>(in, 8);
  Reference r;
  r.shape = {u[0], u[1], u[2], u[3], u[4], u[5], u[6], read_value<std::int64_t>(in)};
  r.adam_steps = u[7];
  const auto hyper = read_values<float>(in, 5);
  r.learning_rate = hyper[0];
  r.adamw = {hyper[1], hyper[2], hyper[3], hyper[4], true};
  const auto count = read_value<std::uint64_t>(in);
  if (!in || count > (1U << 20)) throw std::runtime_error(path + ": implausible parameter count");
  r.params = read_values<float>(in, count);
  r.tokens = read_values<std::int64_t>(in, r.shape.tokens());
  r.targets = read_values<std::int64_t>(in, r.shape.tokens());
  r.logits = read_values<float>(in, r.shape.tokens() * r.shape.vocab);
  r.loss = read_value<double>(in);
  r.grads = read_values<float>(in, count);
  r.losses = read_values<double>(in, r.adam_steps + 1);
  if (!in) throw std::runtime_error(path + " is shorter than its header says");
  in.peek();
  if (!in.eof()) throw std::runtime_error(path + " is longer than its header says");
  return r;
}

// max |actual - expected| / max |expected|: the error on the tensor's own scale.
inline double scaled_error(std::span<const float> actual, std::span<const float> expected) {
  double worst = 0.0;
  double scale = 0.0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(actual[i]) - expected[i]));
    scale = std::max(scale, std::abs(static_cast<double>(expected[i])));
  }
  return worst / scale;
}

inline const std::string kReferencePath = std::string(TESSERA_TEST_DATA_DIR) + "/gpt_reference.bin";

}  // namespace tessera::layers
