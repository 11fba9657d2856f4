#!/usr/bin/env bash
# The pip build on a machine without the -dev packages (issue 44): CMake configured as pip
# configures it (SKBUILD), with CLI11, nlohmann/json, spdlog, libjpeg, libpng and libwebp hidden
# from it. The three header-only libraries come from their release archives instead; offline
# here, from folders holding what those archives hold (FETCHCONTENT_SOURCE_DIR_*, made from this
# machine's headers; spdlog's archive bundles fmt, so fmt goes under spdlog/fmt/bundled); the
# image decoders are off. Configure, then the translation units that take the fetched headers
# and the decoder-less image library, are built.
#
#   test_no_dev_packages.sh <source dir> <python with torch> <work dir>
set -euo pipefail
SRC=$1 PY=$2 WORK=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK/cli11/include" "$WORK/json/include" "$WORK/spdlog/include"
cp -r /usr/include/CLI "$WORK/cli11/include/"
cp -r /usr/include/nlohmann "$WORK/json/include/"
cp -r /usr/include/spdlog "$WORK/spdlog/include/"
# As released: fmt bundled, not Debian's external one.
sed -i 's|^#define SPDLOG_FMT_EXTERNAL.*|// (fmt bundled, as in the release archive)|' "$WORK/spdlog/include/spdlog/tweakme.h"
mkdir -p "$WORK/spdlog/include/spdlog/fmt/bundled" && cp /usr/include/fmt/*.h "$WORK/spdlog/include/spdlog/fmt/bundled/"
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
cmake -S "$SRC" -B "$WORK/build" "${generator[@]}" -DSKBUILD=2 -DBATCHCHECK_TORCH_PYTHON="$PY" \
  -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON -DCMAKE_DISABLE_FIND_PACKAGE_spdlog=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_JPEG=ON -DCMAKE_DISABLE_FIND_PACKAGE_PNG=ON -DCMAKE_DISABLE_FIND_PACKAGE_WebP=ON \
  -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
  -DFETCHCONTENT_SOURCE_DIR_CLI11="$WORK/cli11" -DFETCHCONTENT_SOURCE_DIR_NLOHMANN_JSON="$WORK/json" \
  -DFETCHCONTENT_SOURCE_DIR_SPDLOG="$WORK/spdlog" >"$WORK/configure.log" 2>&1 ||
  { cat "$WORK/configure.log" >&2; fail "configure without the -dev packages"; }
for line in "batchcheck: CLI11 not installed: CLI11 2.4.2 from its release archive ($WORK/cli11/include)" \
            "batchcheck: nlohmann_json not installed: nlohmann/json 3.11.3 from its release archive ($WORK/json/include)" \
            "batchcheck: spdlog not installed: spdlog 1.14.1 from its release archive ($WORK/spdlog/include)" \
            "batchcheck: image folders off (libjpeg and libpng not found)"; do
  grep -qF -- "$line" "$WORK/configure.log" || { cat "$WORK/configure.log" >&2; fail "configure did not say: $line"; }
done
# The CLI's parsing (CLI11 and nlohmann/json from the folders), the log (spdlog, fmt bundled) and
# the image library without decoders.
cmake --build "$WORK/build" --target app/CMakeFiles/bc_cli.dir/cli.cpp.o lib/CMakeFiles/bc_core.dir/core/base/log.cpp.o \
  lib/CMakeFiles/bc_image.dir/image/decode_none.cpp.o \
  >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log" >&2; fail "building with the fetched headers"; }
grep -q "$WORK/cli11/include" "$WORK/build/compile_commands.json" || fail "the fetched CLI11 is not on the include path"
grep -q "$WORK/spdlog/include" "$WORK/build/compile_commands.json" || fail "the fetched spdlog is not on the include path"
! grep -q "image/decode.cpp" "$WORK/build/compile_commands.json" || fail "the decoders are built without libjpeg and libpng"
nm -C "$WORK/build/lib/CMakeFiles/bc_image.dir/image/decode_none.cpp.o" >"$WORK/symbols.txt"
grep -q "image_decoders_built" "$WORK/symbols.txt" || fail "the decoder-less image library lacks image_decoders_built"
echo "no-dev-packages: ok" >&2
