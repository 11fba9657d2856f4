#include "core/findings/findings.h"

#include <algorithm>

#include "core/base/int128.h"
#include "core/base/text.h"
#include "core/plan/factor.h"
#include "core/plan/suggest.h"
#include "core/report/catalog.h"

namespace batchcheck {

namespace {

std::string per_epoch(const Geometry& g, uint64_t dropped) {
  return "drops " + std::to_string(dropped) + " of " + plural(g.spec.samples, "sample") + " per epoch";
}

// "1041 = 130 x 8 + 1"
std::string split_text(uint64_t n, uint64_t b) {
  return std::to_string(n) + " = " + std::to_string(n / b) + " x " + std::to_string(b) + " + " + std::to_string(n % b);
}

std::string rank_phrase(const Geometry& g) {
  if (!g.distributed()) return "";
  return " on each of the " + std::to_string(g.spec.world_size) + " ranks (" +
         plural(g.samples_per_rank, "sample") + " per rank)";
}

Finding base(const char* id, const std::vector<uint64_t>& ranks) {
  Finding f;
  f.id = id;
  f.severity = default_severity(id);
  f.stage = "geometry";
  if (!ranks.empty()) f.rank = ranks.front();
  if (ranks.size() > 1) f.ranks = ranks;
  return f;
}

void add_samples(Finding& f, const std::vector<int64_t>& indices) {
  for (int64_t i : indices) {
    if (f.samples.size() < kSampleCap) f.samples.push_back(i);
  }
  f.count += indices.size();
}

// A recorded order: its last batches and the samples it never delivers, from the batches
// themselves (no formula: a bucketing batch sampler's sizes vary, a sampler with
// replacement repeats samples).
void recorded_findings(const BatchPlan& plan, const std::vector<uint64_t>& ranks, std::vector<Finding>& out) {
  const Geometry& g = plan.geometry();
  const RecordedOrder& o = *g.spec.recorded;
  const uint64_t last = g.batches_per_rank - 1, b = g.spec.batch_size;
  for (const bool single : {true, false}) {
    Finding f = base(single ? "tail-batch-singleton" : "tail-batch-partial", {});
    std::vector<uint64_t> hit;
    for (uint64_t r : ranks) {
      const auto& idx = o.ranks[r][last];
      if (idx.size() >= b || (idx.size() == 1) != single) continue;
      hit.push_back(r);
      ++f.occurrences_total;
      if (f.occurrences.size() < kOccurrenceCap) {
        Occurrence occ{r, last, {}, idx.size(), {}, {}, nullptr};
        for (int64_t i : idx) {
          if (occ.samples.size() < kSampleCap) occ.samples.push_back(i);
        }
        f.occurrences.push_back(std::move(occ));
      }
      if (hit.size() == 1) add_samples(f, idx);
      else f.count += idx.size();
    }
    if (hit.empty()) continue;
    f.rank = hit.front();
    if (hit.size() > 1) f.ranks = hit;
    f.batch = last;
    f.batches = {last};
    const uint64_t size = o.ranks[hit.front()][last].size();
    f.message = "the last batch (index " + std::to_string(last) + ") of the recorded order (" + o.display + ") holds " +
                (single ? std::string("a single sample") : std::to_string(size) + " of " + std::to_string(b) + " samples") +
                (g.distributed() ? " on rank" + std::string(hit.size() > 1 ? "s " : " ") + join_uints(hit) : "");
    if (single) {
      f.message += "; BatchNorm in train mode, .squeeze() and view(" + std::to_string(b) + ", -1) break on a batch of one";
      f.fixes.push_back({"skip-single-sample-batches", "leave batches of one sample out of the batch sampler",
                         "batches = [b for b in batches if len(b) > 1]  # or merge them into the batch before",
                         "those samples are not trained on this epoch", {}});
    }
    f.evidence = {{"order", o.display}, {"batch_size", b}, {"last_batch_size", size}};
    out.push_back(f);
  }
  if (g.recorded_undelivered > 0 && g.spec.share && share_covers(*g.spec.share, g.spec.samples, g.recorded_undelivered)) {
    // One rank's share of a DistributedSampler's epoch: the samples it lacks are the other
    // ranks' to train on, not dropped (one rank alone, or more missing than the other ranks
    // hold: dropped, below).
    const LoaderConfig::RankShare& r = *g.spec.share;
    const uint64_t delivered = g.spec.samples - g.recorded_undelivered;
    Finding f = base("rank-share", ranks);
    f.message = "the recorded order (" + o.display + ") is rank " + std::to_string(r.rank) + " of " +
                std::to_string(r.world_size) + "'s share of the epoch: DistributedSampler splits the " +
                plural(g.spec.samples, "sample") + " over the " + std::to_string(r.world_size) + " ranks" +
                (r.samples ? ", " + plural(r.samples, "sample") + " each" : std::string()) + ", and this rank delivers " +
                std::to_string(delivered) + " distinct ones; the other " + std::to_string(g.recorded_undelivered) +
                " are the other ranks' to train on, checked where each rank runs its scan";
    f.evidence = {{"rank", r.rank}, {"world_size", r.world_size}, {"delivered_samples", delivered}, {"samples", g.spec.samples}};
    if (r.samples) f.evidence["share_samples"] = r.samples;
    out.push_back(f);
  } else if (g.recorded_undelivered > 0) {
    Finding f = base("samples-dropped", ranks);
    std::vector<bool> seen(g.spec.samples, false);
    for (const auto& rank : o.ranks) {
      for (const auto& batch : rank) {
        for (int64_t i : batch) seen[static_cast<std::size_t>(i)] = true;
      }
    }
    for (uint64_t i = 0; i < g.spec.samples && f.samples.size() < kSampleCap; ++i) {
      if (!seen[i]) f.samples.push_back(static_cast<int64_t>(i));
    }
    f.count = g.recorded_undelivered;
    f.message = "the recorded order (" + o.display + ") delivers no batch holding " + std::to_string(g.recorded_undelivered) +
                " of " + plural(g.spec.samples, "sample") +
                " this epoch: a sampler with replacement (WeightedRandomSampler) or num_samples < N draws some samples "
                "more than once and others never";
    f.evidence = {{"dropped_samples", g.recorded_undelivered}, {"samples", g.spec.samples}};
    out.push_back(f);
  }
}

}  // namespace

Fix fix_drop_last(const Geometry& g) {
  Fix f;
  f.id = "drop-last";
  f.title = "drop the incomplete last batch";
  f.code = "DataLoader(..., drop_last=True)";
  const uint64_t tail = g.samples_per_rank % g.spec.batch_size;
  uint128 dropped = static_cast<uint128>(tail) * g.spec.world_size + g.sampler_dropped;
  f.tradeoff = per_epoch(g, dropped > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(dropped));
  if (g.spec.shuffle) f.tradeoff += " (different ones each epoch, since the order is shuffled)";
  return f;
}

Fix fix_batch_size_divisor(const Geometry& g) {
  Fix f;
  f.id = "batch-size-divisor";
  const uint64_t n = g.samples_per_rank;
  auto near = nearest_divisors(divisors(n), g.spec.batch_size, 2);
  // 1 and N itself (one batch of everything) are divisors nobody wants.
  near.erase(std::remove_if(near.begin(), near.end(),
                            [&](uint64_t d) { return (d == 1 && n > 1) || (d == n && n > g.spec.batch_size); }),
             near.end());
  f.batch_sizes = near;
  f.title = "use a batch size that divides the " + plural(n, "sample") + (g.distributed() ? " per rank" : "") +
            ": " + (near.empty() ? std::string("none besides 1") : join_uints(near));
  // The code uses the divisor nearest the configured size (30 for 6000 at 32, not 25).
  const uint64_t b = g.spec.batch_size;
  auto dist = [b](uint64_t d) { return d > b ? d - b : b - d; };
  auto best = std::min_element(near.begin(), near.end(), [&](uint64_t x, uint64_t y) { return dist(x) < dist(y); });
  f.code = near.empty() ? "" : "DataLoader(..., batch_size=" + std::to_string(*best) + ")";
  // The nearest sizes whose tail is harmless (>= 2), for when no divisor is close.
  SuggestRequest r;
  r.samples = n;
  r.batch_size = g.spec.batch_size;
  r.per_side = 2;
  auto s = suggest(r);
  std::vector<std::string> safe;
  for (const auto& c : s.nearest) safe.push_back(std::to_string(c.batch_size) + " (tail " + std::to_string(c.tail) + ")");
  f.tradeoff = "changes the effective batch size (retune the learning rate)";
  if (!safe.empty()) f.tradeoff += "; sizes nearer " + std::to_string(g.spec.batch_size) + " with a tail of 2 or more: " + join(safe);
  return f;
}

Fix fix_pad_collate(const Geometry& g, LossType loss) {
  Fix f;
  f.id = "pad-collate";
  f.title = "pad the last batch to " + std::to_string(g.spec.batch_size) + " samples in collate_fn";
  // Complete and runnable: pasted as is, it defines the function the DataLoader call names.
  const std::string b = std::to_string(g.spec.batch_size);
  f.code =
      "from torch.utils.data import default_collate\n"
      "def pad_to_batch_size(batch, size=" + b + "):\n"
      "    # Repeats samples of a short batch up to `size`; the mask marks the real ones.\n"
      "    n = len(batch)\n"
      "    batch = list(batch) + [batch[i % n] for i in range(size - n)]\n"
      "    x, y = default_collate(batch)\n"
      "    return x, y, torch.arange(size) < n  # weight the loss by the mask\n"
      "DataLoader(..., collate_fn=pad_to_batch_size)";
  std::string pad_value;
  switch (loss) {
    case LossType::CrossEntropy:
    case LossType::Nll: pad_value = "targets padded with ignore_index so they add nothing to the loss"; break;
    case LossType::Bce:
    case LossType::BceWithLogits: pad_value = "padded targets must stay in [0, 1] and be masked out of the loss"; break;
    default: pad_value = "the pad value must satisfy the loss's target contract and be masked out of the loss"; break;
  }
  f.tradeoff = "no sample is lost, but " + pad_value + "; BatchNorm statistics still see the repeated samples";
  return f;
}

std::vector<Finding> geometry_findings(const BatchPlan& plan, const std::vector<uint64_t>& ranks, LossType loss) {
  const Geometry& g = plan.geometry();
  const LoaderSpec& s = g.spec;
  std::vector<Finding> out;

  if (g.batches_per_rank == 0) {
    Finding f = base("empty-loader", ranks);
    if (s.samples == 0) {
      f.message = "the dataset holds no samples, so the loader yields no batch";
    } else if (g.recorded()) {
      f.message = "the recorded order (" + s.recorded->display + ") holds no batch";
      f.fixes.push_back({"record-order-again", "record the order from the loader you train with",
                         "json.dump([b.tolist() for b in DataLoader(IndexDataset(len(ds)), ...)], f)", "", {}});
    } else if (g.samples_per_rank == 0) {
      f.message = "DistributedSampler(drop_last=True) gives each of the " + std::to_string(s.world_size) +
                  " ranks 0 samples: " + plural(s.samples, "sample") + " are fewer than the ranks";
      f.fixes.push_back({"sampler-keep-tail", "let DistributedSampler pad instead of cut",
                         "DistributedSampler(..., drop_last=False)",
                         "repeats " + plural(s.world_size - s.samples, "sample") + " to fill the ranks", {}});
    } else {
      f.message = "drop_last=True with batch_size " + std::to_string(s.batch_size) + " > " +
                  plural(g.samples_per_rank, "sample") + (g.distributed() ? " per rank" : "") +
                  ": the only batch is dropped, the loader yields nothing";
      f.fixes.push_back({"smaller-batch-size", "use a batch size of at most " + std::to_string(g.samples_per_rank),
                         "DataLoader(..., batch_size=" + std::to_string(g.samples_per_rank) + ")",
                         "changes the effective batch size", {g.samples_per_rank}});
      f.fixes.push_back({"keep-last", "keep the incomplete batch", "DataLoader(..., drop_last=False)",
                         "the epoch is one batch of " + plural(g.samples_per_rank, "sample"), {}});
    }
    if (f.fixes.empty()) f.fixes.push_back({"check-dataset", "check the data files: they hold no samples", "", "", {}});
    f.evidence = {{"samples", s.samples}, {"samples_per_rank", g.samples_per_rank}, {"batch_size", s.batch_size}};
    out.push_back(f);
    return out;  // no batches: nothing else about them is meaningful
  }

  const uint64_t last = g.batches_per_rank - 1;
  const uint64_t tail = g.samples_per_rank % s.batch_size;
  // A recorded order of full batches but the last: its tail as for any loader (N = k x B + r).
  if (g.recorded() && !g.recorded_uniform) recorded_findings(plan, ranks, out);
  if ((!g.recorded() || g.recorded_uniform) && !s.drop_last && tail != 0 && s.batch_size > 1) {
    const bool single = tail == 1;
    Finding f = base(single ? "tail-batch-singleton" : "tail-batch-partial", ranks);
    f.batch = last;
    f.batches = {last};
    // One occurrence per rank: samples are never merged across ranks.
    for (uint64_t r : ranks) {
      std::vector<int64_t> idx = plan.batch_indices(r, last);
      if (f.occurrences.size() < kOccurrenceCap) {
        Occurrence o{r, last, {}, idx.size(), {}, {}, nullptr};
        for (int64_t i : idx) {
          if (o.samples.size() < kSampleCap) o.samples.push_back(i);
        }
        f.occurrences.push_back(std::move(o));
      }
      ++f.occurrences_total;
      if (r == ranks.front()) add_samples(f, idx);
      else f.count += idx.size();
    }
    f.message = "the last batch (index " + std::to_string(last) + ") holds " +
                (single ? std::string("a single sample") : std::to_string(tail) + " of " + std::to_string(s.batch_size) + " samples") +
                rank_phrase(g) + ": " + split_text(g.samples_per_rank, s.batch_size);
    if (single) {
      f.message += "; BatchNorm in train mode, .squeeze() and view(" + std::to_string(s.batch_size) +
                   ", -1) break on a batch of one";
    }
    f.evidence = {{"samples_per_rank", g.samples_per_rank}, {"batch_size", s.batch_size}, {"last_batch_size", tail}};
    f.fixes = {fix_drop_last(g), fix_batch_size_divisor(g)};
    if (single) f.fixes.push_back(fix_pad_collate(g, loss));
    out.push_back(f);
  }

  if (!g.recorded() && g.dropped_total() > 0) {
    Finding f = base("samples-dropped", ranks);
    std::vector<std::string> parts;
    if (g.sampler_dropped) {
      parts.push_back("DistributedSampler(drop_last=True) cuts " + plural(g.sampler_dropped, "sample"));
    }
    if (g.loader_dropped_per_rank) {
      parts.push_back("DataLoader(drop_last=True) discards the last " + plural(g.loader_dropped_per_rank, "sample") +
                      (g.distributed() ? " of each rank" : ""));
    }
    // The sampler's slot list is dealt round-robin, so what no rank receives is its tail:
    // distinct samples, never a padding copy whose original is delivered.
    for (uint64_t slot = g.delivered_slots(); slot < s.samples && f.samples.size() < kSampleCap; ++slot) {
      f.samples.push_back(plan.slot_sample(slot));
    }
    f.count = g.dropped_total();
    f.message = join(parts, "; ") + ": " + std::to_string(g.dropped_total()) + " of " + plural(s.samples, "sample") +
                " per epoch never reach training" +
                (s.shuffle ? " (different ones each epoch)" : " (the same ones every epoch)");
    f.evidence = {{"dropped_samples", g.dropped_total()}, {"samples", s.samples}};
    f.fixes = {fix_batch_size_divisor(g)};
    out.push_back(f);
  }

  if (g.padded_samples > 0) {
    // Padding slot k is global position N + k: rank (N + k) mod W at position (N + k) / W
    // of its stream. DataLoader(drop_last=True) may cut it before it is ever delivered.
    Finding f = base("sampler-padding", {});
    const uint64_t delivered_positions = s.drop_last ? g.full_batches * s.batch_size : g.samples_per_rank;
    std::vector<uint64_t> padded_ranks;
    uint64_t delivered = 0;
    const uint64_t scan = std::min<uint64_t>(g.padded_samples, 4096);  // W can be huge; the pattern shows early
    for (uint64_t k = 0; k < scan; ++k) {
      uint64_t rank = 0;
      const int64_t idx = plan.padded_sample(k, &rank);
      const uint64_t pos = static_cast<uint64_t>((static_cast<uint128>(s.samples) + k) / s.world_size);
      if (pos >= delivered_positions) continue;
      if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) continue;  // --rank R: only R's copies
      ++delivered;
      const uint64_t batch = pos / s.batch_size;
      if (std::find(padded_ranks.begin(), padded_ranks.end(), rank) == padded_ranks.end()) {
        padded_ranks.push_back(rank);
        ++f.occurrences_total;
        if (f.occurrences.size() < kOccurrenceCap) f.occurrences.push_back({rank, batch, {}, 0, {}, {}, nullptr});
      }
      for (auto& o : f.occurrences) {
        if (o.rank == rank) {
          if (o.samples.size() < kSampleCap) o.samples.push_back(idx);
          ++o.count;
        }
      }
    }
    if (scan < g.padded_samples && !s.drop_last) delivered += g.padded_samples - scan;
    if (delivered > 0) {
      f.rank = padded_ranks.front();
      if (padded_ranks.size() > 1) f.ranks = padded_ranks;
      f.samples = f.occurrences.front().samples;
      f.count = delivered;
      f.batch = f.occurrences.front().batch;
      for (const auto& o : f.occurrences) {
        if (std::find(f.batches.begin(), f.batches.end(), *o.batch) == f.batches.end()) f.batches.push_back(*o.batch);
      }
      std::sort(f.batches.begin(), f.batches.end());
      f.message = "DistributedSampler repeats " + plural(delivered, "sample") + " so that " + std::to_string(s.world_size) +
                  " ranks get " + std::to_string(g.samples_per_rank) + " each: rank" + (padded_ranks.size() > 1 ? "s " : " ") +
                  join_uints(std::vector<uint64_t>(padded_ranks.begin(), padded_ranks.begin() + std::min<std::size_t>(padded_ranks.size(), 8))) +
                  (padded_ranks.size() > 8 ? ", ..." : "") +
                  " see them a second time per epoch, and they count twice in validation metrics";
      f.evidence = {{"padded_samples", delivered}, {"ranks_receiving_padding", padded_ranks},
                    {"samples", s.samples}, {"world_size", s.world_size}};
      const uint64_t cut = s.samples % s.world_size;
      f.fixes.push_back({"sampler-drop-last", "cut instead of pad", "DistributedSampler(..., drop_last=True)",
                         per_epoch(g, cut), {}});
      auto ws = nearest_divisors(divisors(s.samples), s.world_size, 2);
      ws.erase(std::remove(ws.begin(), ws.end(), uint64_t{1}), ws.end());
      if (!ws.empty()) {
        f.fixes.push_back({"world-size-divisor", "use a world size that divides " + plural(s.samples, "sample") + ": " + join_uints(ws),
                           "", "changes the number of processes", ws});
      }
      out.push_back(f);
    }
  }

  const uint64_t k = s.accumulation_steps;
  if (k > 1 && g.batches_per_rank % k != 0) {
    Finding f = base("accumulation-partial-window", ranks);
    const uint64_t first = (g.windows - 1) * k;
    for (uint64_t b = first; b < g.batches_per_rank; ++b) f.batches.push_back(b);
    f.batch = first;
    f.count = 0;
    for (uint64_t b = first; b < g.batches_per_rank; ++b) f.count += g.batch_size_at(b);
    f.message = "the last accumulation window (" + std::to_string(g.windows - 1) + ") holds " +
                std::to_string(g.last_window_batches) + " of " + std::to_string(k) + " micro-batches: " +
                split_text(g.batches_per_rank, k) + "; a loss divided by " + std::to_string(k) +
                " under-weights it, and frameworks differ in whether they step on it";
    f.evidence = {{"batches_per_rank", g.batches_per_rank}, {"accumulation_steps", k},
                  {"last_window_batches", g.last_window_batches}};
    auto ks = nearest_divisors(divisors(g.batches_per_rank), k, 2);
    ks.erase(std::remove(ks.begin(), ks.end(), uint64_t{1}), ks.end());
    f.fixes.push_back({"accumulation-steps-divisor",
                       "use accumulation steps that divide the " + plural(g.batches_per_rank, "batch", "batches") +
                           (ks.empty() ? std::string() : ": " + join_uints(ks)),
                       "", "changes the effective batch size", ks});
    f.fixes.push_back({"scale-partial-window", "divide the loss by the real number of micro-batches in the window",
                       "loss = loss / micro_batches_in_this_window",
                       "keeps every sample; the last step uses a smaller effective batch", {}});
    out.push_back(f);
  }
  return out;
}

}  // namespace batchcheck
