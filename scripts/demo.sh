#!/usr/bin/env bash
# README command 1: install what is missing, build, and scan the bundled sample (the
# seed's case: 1041 images, batch 8, a model that turns NaN on the last batch of one).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
echo "+ batchcheck scan sample_configs/segmentation_tail.json -o segmentation_tail.report.json" >&2
status=0
"$BUILD_DIR/app/batchcheck" scan sample_configs/segmentation_tail.json -o segmentation_tail.report.json || status=$?
echo "(exit code $status: 1 means the gate found errors, as it should on this sample; report in segmentation_tail.report.json)" >&2
[[ $status -eq 1 ]]
