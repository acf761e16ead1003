#pragma once
// Per-parameter checkpoints: what every strategy writes and reads. Each blob is a slice of one
// named parameter (StateSlice, tessera/plugin/checkpoint_io.hpp); rank 0 adds the parameter
// index (the blob "parameters": who wrote it, the optimizer's state slots, every parameter with
// its shape). SliceReader assembles any slice from whatever blobs cover it, so a checkpoint
// written by any strategy at any world size or mesh loads into any other. Checkpoints of format 1
// (flat shards: flat/layout, flat/shards, flat/params/K, flat/optimizer_state/K) are read through
// the same SliceReader. docs/training.md, "Checkpoints", has the format and why.

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/plugin/checkpoint_io.hpp"
#include "tessera/strategy_kit/flat_state.hpp"

namespace tessera {

// A parameter as checkpoints name it: the model's layer index, its ParamSpec name, its full shape.
struct ParamId {
  std::size_t layer = 0;
  std::string name;
  Shape shape;
  friend bool operator==(const ParamId&, const ParamId&) = default;
};

// "<layer>.<name> [d0xd1...]", for messages.
[[nodiscard]] std::string describe(const ParamId& param);

// The blob "parameters" (JSON), written once per checkpoint by rank 0.
struct ParamIndex {
  std::string strategy;  // who wrote it (informational; the trainer cross-checks its metadata)
  std::size_t state_per_param = 0;
  std::vector<ParamId> params;
  // Per parameter of `params`, whether the optimizer decayed it (ParamSpec::weight_decay;
  // weight_decay_flags() of the layout). Empty in a checkpoint written before tessera recorded
  // it. A record for readers and other tools: loading always takes the model's own flags.
  std::vector<bool> weight_decay{};
};

// The model's parameters in FlatLayout order.
[[nodiscard]] std::vector<ParamId> params_of(const FlatLayout& layout);

// Rank 0 calls this once per checkpoint. Throws InvalidArgument when weight_decay is neither
// empty nor one flag per parameter, else what the writer throws.
void save_param_index(CheckpointWriter& writer, const ParamIndex& index);

// Writes canonical flat elements [begin, end) (clamped to layout.total: padding is not saved)
// as one slice per parameter piece: dim 0 whole, elements [first, last) of the parameter.
// `params` holds elements [begin, end); `state` is slot-major over [begin, end)
// (slot s of element j at s * (end - begin) + j) and may be empty when state_per_param is 0.
// Throws InvalidArgument when the spans do not match the range.
void save_flat_range(CheckpointWriter& writer, const FlatLayout& layout, std::size_t begin,
                     std::size_t end, std::span<const float> params, std::span<const float> state,
                     std::size_t state_per_param);

// Reads slices of parameters out of a checkpoint of either format. Holds `reader` by reference:
// it must outlive this object. Not thread-safe (it caches the last format-1 blob it read).
class SliceReader {
 public:
  // Reads the parameter index and every blob's description, and checks that they agree (each
  // slice names a parameter of the index with its shape, and a state slot the index has).
  // `model`, when given, names format-1 parameters exactly (their layout records
  // "<layer>.<layer name>.<param name>") and must equal that checkpoint's layout. Throws
  // CheckpointError naming what is malformed or missing.
  explicit SliceReader(const CheckpointReader& reader, const FlatLayout* model = nullptr);
  ~SliceReader();
  SliceReader(const SliceReader&) = delete;
  SliceReader& operator=(const SliceReader&) = delete;

  [[nodiscard]] int format_version() const noexcept { return format_version_; }
  [[nodiscard]] const ParamIndex& index() const noexcept { return index_; }

  // Throws CheckpointError unless the checkpoint's parameters are exactly `params` (the model
  // being loaded into): same order, layers, names and shapes.
  void check_params(const std::vector<ParamId>& params) const;
  // Throws CheckpointError unless the checkpoint holds `state_per_param` optimizer slots.
  void check_state_slots(std::size_t state_per_param) const;

  // The box "dimension `dim` restricted to [begin, end), every other dimension whole" of
  // `param`'s values (kind parameter) or optimizer-state slot `slot`, row-major; of that box,
  // only elements [first, last) (last = SIZE_MAX: to the end). Reads only the blobs that
  // intersect it. Throws CheckpointError when the slice is outside the parameter, the
  // checkpoint has no such parameter or slot, a blob is damaged or has the wrong size, some
  // element is in no blob (naming the first such element) or in two (naming both blobs).
  [[nodiscard]] std::vector<float> read_slice(const ParamId& param, StateKind kind,
                                              std::size_t slot, std::size_t dim, std::size_t begin,
                                              std::size_t end, std::size_t first = 0,
                                              std::size_t last = SIZE_MAX) const;

  // Checks from the descriptions alone (no blob is read) that every parameter and every state
  // slot is covered by the blobs exactly once. Throws CheckpointError naming the parameter and
  // the first element in no blob or in two.
  void verify() const;

  struct Entry;
  struct Covered;

 private:
  [[nodiscard]] std::vector<float> values_of(const Entry& entry) const;
  // Throws CheckpointError unless `covered` (parts of a box of `size` elements, sorted here)
  // tiles it exactly, naming the first element in no part or in two (offset by `first`).
  void check_coverage(std::vector<Covered>& covered, std::size_t size, std::size_t first,
                      const std::string& what) const;

  const CheckpointReader& reader_;
  int format_version_ = 2;
  ParamIndex index_;
  std::vector<Entry> entries_;
  mutable std::string cached_name_;
  mutable std::vector<float> cached_;
};

// Loads canonical flat elements [begin, end) of the parameters into `params` (size end - begin)
// and of each optimizer slot into `state` (slot-major over [begin, end); empty to skip), from
// a checkpoint of either format written by any strategy at any world size. Elements past
// layout.total (padding) are left as they are. Throws CheckpointError when the checkpoint is
// for another model or optimizer, or does not cover the range.
void load_flat_range(const CheckpointReader& reader, const FlatLayout& expected, std::size_t begin,
                     std::size_t end, std::span<float> params, std::span<float> state,
                     std::size_t state_per_param);

// One destination of load_flat_ranges: canonical elements [begin, end) into `params` (size
// end - begin, or empty to skip parameters) and optimizer state into `state` (slot-major over
// [begin, end), or empty to skip).
struct FlatRangeTarget {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::span<float> params;
  std::span<float> state;
};

// load_flat_range for several ranges through one SliceReader, after SliceReader::verify().
void load_flat_ranges(const CheckpointReader& reader, const FlatLayout& expected,
                      std::span<const FlatRangeTarget> targets, std::size_t state_per_param);

}  // namespace tessera
