#pragma once
// What a strategy writes its state into and reads it back from. Parameters and optimizer state
// go in as slices of named parameters (StateSlice), so that any strategy, at any world size and
// on any mesh, can assemble the part it needs from whatever another wrote
// (tessera/strategy_kit/param_checkpoint.hpp does that); anything else a strategy keeps goes in
// as a named opaque blob. The engine adds checksums, atomic renames and the manifest
// (tessera/runtime/checkpoint.hpp). docs/training.md, "Checkpoints", has the format.

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "tessera/base/tensor.hpp"

namespace tessera {

enum class StateKind { parameter, optimizer_state };

// Which values one blob holds: part of one parameter of the model (its layer index and
// ParamSpec name, with its full shape), either the parameter itself or optimizer state slot
// `slot`. The part is the box "dimension `dim` restricted to [begin, end), every other dimension
// whole" (a tensor-parallel slice; dim 0 whole for a parameter held entirely), and of that box,
// in row-major order, the elements [first, last) (a flat shard cuts a box anywhere). Values are
// fp32, row-major within the box. A scalar parameter (empty shape) counts as shape {1}.
struct StateSlice {
  std::size_t layer = 0;
  std::string param;
  Shape shape;
  StateKind kind = StateKind::parameter;
  std::size_t slot = 0;  // optimizer-state slot; 0 for kind == parameter
  std::size_t dim = 0;
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t first = 0;
  std::size_t last = 0;

  [[nodiscard]] std::size_t elements() const noexcept { return last - first; }
  friend bool operator==(const StateSlice&, const StateSlice&) = default;
};

// Why `slice` does not describe a part of its parameter (a dimension beyond the shape, an empty
// or out-of-range interval, sizes that overflow), or an empty string when it does.
[[nodiscard]] std::string slice_problem(const StateSlice& slice);

// The blob name a slice is stored under, unique per description:
// "<layer>.<param>/<kind>[<slot>]/d<dim>[<begin>:<end>]/e[<first>:<last>]".
[[nodiscard]] std::string slice_blob_name(const StateSlice& slice);

// Thread-safety: each rank writes through its own writer; a writer is used by one thread.
class CheckpointWriter {
 public:
  virtual ~CheckpointWriter() = default;
  // Stores `bytes` (copied before return) as the strategy-private blob `name` (one non-empty
  // line, unique within the checkpoint). Throws CheckpointError on an I/O failure.
  virtual void put(const std::string& name, std::span<const std::byte> bytes) = 0;
  // Stores `values` (copied before return) as the part of a parameter `slice` describes.
  // Throws InvalidArgument when slice_problem(slice) is not empty or values.size() !=
  // slice.elements(), CheckpointError on an I/O failure.
  virtual void put_slice(const StateSlice& slice, std::span<const float> values) = 0;
  // Whether state that every rank holds alike (ddp's parameters and optimizer state) is to be
  // written by every rank instead of by rank 0 alone (Strategy::save). False for a checkpoint,
  // which keeps one copy of it. True for the elastic runtime's in-memory copy of one rank's
  // state (tessera/strategy_kit/memory_state.hpp), kept apart from the other ranks': when every
  // rank's copy holds the whole state, a survivor restores it alone and nothing has to be sent
  // to other ranks. A strategy that honours it writes on every rank exactly what rank 0 writes;
  // one that ignores it stays correct, only slower to copy. Appended in ABI 2.1.
  [[nodiscard]] virtual bool every_rank_writes_replicated_state() const { return false; }
};

// Thread-safety: const methods may be called concurrently.
class CheckpointReader {
 public:
  virtual ~CheckpointReader() = default;
  // Strategy-private blob `name`; throws CheckpointError when there is none.
  [[nodiscard]] virtual std::vector<std::byte> get(const std::string& name) const = 0;
  [[nodiscard]] virtual bool contains(const std::string& name) const = 0;
  // Every slice blob's description, in the order they were written. Empty for a checkpoint of
  // format 1 (flat shards), which param_checkpoint.hpp reads through its flat/* blobs.
  [[nodiscard]] virtual std::vector<StateSlice> slices() const = 0;
  // The values of slices()[index] (slices()[index].elements() floats). Throws CheckpointError
  // when the blob is damaged or holds another number of values.
  [[nodiscard]] virtual std::vector<float> slice_values(std::size_t index) const = 0;
  // World size the checkpoint was written at.
  [[nodiscard]] virtual int saved_world_size() const = 0;
};

}  // namespace tessera
