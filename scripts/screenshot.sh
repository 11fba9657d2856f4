#!/usr/bin/env bash
# Regenerates docs/images/report.png, the README's picture of the HTML report: the bundled
# seed sample scanned, its --html page opened in headless chromium (scripts/setup.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD_DIR:-build}/app/batchcheck
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
"$BIN" scan sample_configs/segmentation_tail.json -q -o "$OUT/report.json" --html "$OUT/report.html" || [[ $? == 1 ]]
mkdir -p docs/images
chromium-headless-shell --no-sandbox --disable-gpu --no-first-run --user-data-dir="$OUT/profile" --hide-scrollbars \
  --host-resolver-rules='MAP * ~NOTFOUND' --window-size=1200,1500 --screenshot=docs/images/report.png \
  "file://$OUT/report.html" 2>/dev/null
echo "wrote docs/images/report.png"
