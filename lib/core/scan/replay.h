#pragma once
// The replay side of a scan: every batch of every rank, then the probes, through a Backend
// (load → input checks → forward → contract → value checks → loss → backward), told to a
// ScanSink step by step. A replay can resume: a fresh process after a crash starts at the
// first step that did not end and skips the steps already reported.
#include <cstdint>
#include <set>

#include "core/config/config.h"
#include "core/pipeline/backend.h"
#include "core/scan/scan.h"
#include "core/scan/scan_events.h"

namespace batchcheck {

struct ReplayResume {
  uint64_t start_step = 0;
  std::set<uint64_t> skip;        // steps at or after start_step that must not run again
  uint64_t largest_ok_batch = 0;  // the largest batch size whose forward succeeded so far
  bool localize = true;           // false after the localizer itself crashed or hung
};

// Throws InputError for unusable input (an unreadable batch, a rank that does not exist).
// "batchcheck: 1041 samples, checking 131 batches on cpu" (-v).
std::string scan_start_line(const ScanStart& s);

// Its -v lines (each batch, each probe) go to the log (core/base/log.h) at debug.
void replay(const Config& cfg, const ScanSettings& settings, Backend& backend, const OrderFn& order, ScanSink& sink,
            const ReplayResume& resume = {});

}  // namespace batchcheck
