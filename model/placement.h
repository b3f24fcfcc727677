// Variable placement over the parameter servers. Every daemon computes the
// same placement from the model spec and the number of ps tasks, so no one
// has to send it around: the chief initialises shards where the workers
// will look for them. Large variables are split along their first axis
// (like TensorFlow's MinSizePartitioner); each piece is a contiguous range
// of the flat parameter vector. Plain values: safe to share once built.
#ifndef PSCLUSTER_MODEL_PLACEMENT_H_
#define PSCLUSTER_MODEL_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_spec.h"

namespace pscluster {

struct Shard {
  std::string variable;  // "dense1/kernel"
  int part = 0;          // piece index within the variable
  int num_parts = 1;
  int64_t offset = 0;    // first element in the flat parameter vector
  int64_t size = 0;      // elements
  int ps = 0;            // task index of the ps that holds it
  // A BatchNormalization moving statistic (model/model_spec.h
  // VariableRole): the ps averages it with `momentum` instead of applying
  // the optimizer.
  bool moving_statistic = false;
  float momentum = 0.0f;
};

struct Placement {
  int num_ps = 0;
  int max_ps = 0;             // PlacementOptions::max_ps, as used (0: a fixed placement)
  std::vector<Shard> shards;  // model order
  // Per ps: indices into `shards` in the order the ps concatenates them on
  // the wire, and the total number of floats that ps holds.
  std::vector<std::vector<int>> shards_of_ps;
  std::vector<int64_t> floats_of_ps;
  // Identifies model + placement; requests carrying another are refused.
  uint64_t fingerprint = 0;
};

struct PlacementOptions {
  // A variable is split into at most num_ps pieces (with max_ps:
  // kElasticPiecesPerPs * max_ps), each at least this big.
  int64_t min_shard_bytes = 64 << 10;
  // 0: a fixed set of ps. Otherwise the ps in use may change while the
  // job runs (the chief's --min_ps), up to this many: the pieces are cut
  // the same for every count, and placed so that going from n to n + 1 ps
  // moves only what the new ps takes, and back only what the last held.
  int max_ps = 0;
};

// With max_ps, every variable of at least that many bytes is cut into up
// to this many pieces per ps, so that any count up to max_ps can be
// balanced to about a piece.
inline constexpr int kElasticPiecesPerPs = 4;

// num_ps must be >= 1 (max_ps, when not 0, is taken as at least num_ps).
// Fixed: shards go, in model order, to the least-loaded ps (ties to the
// lowest index). Elastic (max_ps): ps 0 holds every piece; then each next
// ps in turn takes, largest first, pieces of the most loaded ps before it
// while that brings the two closer, so the placement over n ps is the one
// over n - 1 plus what ps n - 1 took. A sparse table's window
// (VariableSpec::table_rows != 0; model/sparse_layout.h) is not placed.
Placement PlaceVariables(const ModelSpec& spec, int num_ps,
                         const PlacementOptions& options = {});

// How many of the parameters `to` places on another ps than `from` does
// (two placements of one model; overlaps of their shards, by offset).
int64_t MovedFloats(const Placement& from, const Placement& to);

// Copies between the flat parameter vector and one ps's wire buffer.
void GatherForPs(const Placement& p, int ps, const float* flat, float* wire);
void ScatterFromPs(const Placement& p, int ps, const float* wire, float* flat);

}  // namespace pscluster

#endif  // PSCLUSTER_MODEL_PLACEMENT_H_
