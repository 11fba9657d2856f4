"""tools/build_deps.py on planted deps logs, depfiles and package databases: each check fails where
it should, naming the object and the file."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import build_deps  # noqa: E402

# `ninja -t deps` as ninja 1.11 prints it: the object of a test built without LibTorch's include
# path, on a machine with Debian's libtorch-dev (the fresh machine's failure, seen the other way).
NINJA_DEPS = """\
tests/CMakeFiles/engine_tests.dir/e2e/test_cuda.cpp.o: #deps 3, deps mtime 1733390000000000000 (VALID)
    /src/tests/e2e/test_cuda.cpp
    /src/lib/engine/cuda_runtime.h
    /usr/include/c10/core/Device.h

lib/CMakeFiles/bc_engine.dir/engine/torch_util.cpp.o: #deps 2, deps mtime 1733390000000000000 (STALE)
    /venv/lib/python3.11/site-packages/torch/include/ATen/ATen.h
    /venv/lib/python3.11/site-packages/torch/include/torch/csrc/api/include/torch/nn.h

"""

STATUS = """\
Package: g++
Status: install ok installed
Depends: g++-12 (>= 12.2.0-1~), gcc-12 | gcc-13

Package: g++-12
Status: install ok installed
Depends: gcc-12 (= 12.2.0-14), libstdc++-12-dev (= 12.2.0-14)

Package: gcc-12
Status: install ok installed
Pre-Depends: libc6:amd64 (>= 2.36)

Package: libstdc++-12-dev
Status: install ok installed
Depends: libc6-dev (>= 2.13-5) | libc-dev

Package: libc6-dev
Status: install ok installed
Provides: libc-dev

Package: libc6
Status: install ok installed

Package: libtorch-dev
Status: install ok installed
Depends: libtorch1.13 (= 1.13.1+dfsg-4)

Package: libtorch1.13
Status: install ok installed

Package: libgtest-dev
Status: deinstall ok config-files
"""


class Parsing(unittest.TestCase):
    def test_ninja_deps_per_object_stale_or_not(self):
        deps = build_deps.parse_ninja_deps(NINJA_DEPS)
        self.assertEqual(sorted(deps), ["lib/CMakeFiles/bc_engine.dir/engine/torch_util.cpp.o",
                                        "tests/CMakeFiles/engine_tests.dir/e2e/test_cuda.cpp.o"])
        self.assertEqual(deps["tests/CMakeFiles/engine_tests.dir/e2e/test_cuda.cpp.o"][2], "/usr/include/c10/core/Device.h")

    def test_a_depfile_with_continuations_and_escaped_spaces(self):
        target, files = build_deps.parse_depfile("a.o: /src/a.cpp /usr/include/x.h \\\n /my\\ dir/y.h\n")
        self.assertEqual(target, "a.o")
        self.assertEqual(files, ["/src/a.cpp", "/usr/include/x.h", "/my dir/y.h"])

    def test_a_makefile_tree_is_read_from_its_depfiles(self):
        build = tempfile.mkdtemp()
        os.makedirs(os.path.join(build, "tests", "CMakeFiles", "t.dir"))
        with open(os.path.join(build, "tests", "CMakeFiles", "t.dir", "t.cpp.o.d"), "w") as f:
            f.write("tests/CMakeFiles/t.dir/t.cpp.o: /src/t.cpp /usr/include/ATen/ATen.h\n")
        self.assertEqual(build_deps.read_deps(build),
                         {"tests/CMakeFiles/t.dir/t.cpp.o": ["/src/t.cpp", "/usr/include/ATen/ATen.h"]})

    def test_objects_and_link_inputs_of_ninja_commands(self):
        lib = tempfile.NamedTemporaryFile(suffix=".so")
        commands = [
            "ccache /usr/bin/c++ -I/src/lib -MD -MF x.o.d -o lib/x.cpp.o -c /src/lib/x.cpp",
            f"/usr/bin/c++ -O2 lib/x.cpp.o -o app/batchcheck -Wl,--no-as-needed,{lib.name} -Wl,--as-needed /nonexistent/libq.so",
        ]
        self.assertEqual(build_deps.objects_of(commands), {"lib/x.cpp.o"})
        self.assertEqual(build_deps.link_inputs(commands), {"app/batchcheck": [lib.name]})


class TorchCheck(unittest.TestCase):
    def test_a_system_torch_header_in_a_build_of_another_torch_is_named_with_its_object(self):
        deps = build_deps.parse_ninja_deps(NINJA_DEPS)
        found = build_deps.foreign_torch_headers(deps, "/build", ["/venv/lib/python3.11/site-packages/torch/include"])
        self.assertEqual(found, [("tests/CMakeFiles/engine_tests.dir/e2e/test_cuda.cpp.o", "/usr/include/c10/core/Device.h")])

    def test_the_configured_torchs_own_headers_pass(self):
        deps = build_deps.parse_ninja_deps(NINJA_DEPS)
        # Debian's build: /usr/include is the configured torch; the venv's headers are then foreign.
        found = build_deps.foreign_torch_headers(deps, "/build", ["/usr/include", "/usr/include/torch/csrc/api/include"])
        self.assertEqual([h for _, h in found], ["/venv/lib/python3.11/site-packages/torch/include/ATen/ATen.h",
                                                 "/venv/lib/python3.11/site-packages/torch/include/torch/csrc/api/include/torch/nn.h"])

    def test_a_folder_named_like_torch_elsewhere_is_not_a_torch_header(self):
        deps = {"a.o": ["/src/lib/engine/torch_util.h", "/usr/include/c10_like/x.h", "/opt/torch/include.h"]}
        self.assertEqual(build_deps.foreign_torch_headers(deps, "/build", ["/venv/torch/include"]), [])


class PackagesCheck(unittest.TestCase):
    def setUp(self):
        self.installed = build_deps.parse_status(STATUS)

    def test_the_closure_follows_depends_pre_depends_alternatives_and_provides(self):
        self.assertEqual(build_deps.closure(["g++"], self.installed),
                         {"g++", "g++-12", "gcc-12", "libc6", "libstdc++-12-dev", "libc6-dev"})

    def test_a_removed_package_is_not_installed(self):
        self.assertNotIn("libgtest-dev", self.installed)
        self.assertEqual(build_deps.closure(["libgtest-dev"], self.installed), set())

    def test_a_file_of_a_later_tiers_package_is_named_with_its_package(self):
        have = build_deps.closure(["g++"], self.installed)
        reads = {"tests/t.o": ["/src/t.cpp", "/usr/include/c++/12/vector", "/usr/include/c10/core/Device.h",
                               "/usr/local/include/hand.h"]}
        owner = {"/usr/include/c++/12/vector": "libstdc++-12-dev", "/usr/include/c10/core/Device.h": "libtorch-dev"}
        self.assertEqual(build_deps.package_problems(reads, ["/src", "/build"], owner, have), [
            "tests/t.o: reads /usr/include/c10/core/Device.h, of the package libtorch-dev, which this tier's set-up "
            "does not install",
            "tests/t.o: reads /usr/local/include/hand.h, which no Debian package installed (put there by hand?)",
        ])

    def test_a_link_and_the_file_it_names_are_each_owned(self):
        # A library named by its link (libc10.so) and by its real name (libc10.so.1.13.0): dpkg
        # knows both, each path gets its owner (the real name was once left without one).
        d = tempfile.mkdtemp()
        real = os.path.join(d, "libx.so.1.0")
        open(real, "w").close()
        os.symlink("libx.so.1.0", os.path.join(d, "libx.so"))
        calls = []

        def fake_run(cmd, capture_output, text):
            calls.append(cmd)

            class Out:
                stdout = "libx-dev: %s/libx.so\nlibx1: %s\n" % (d, real)
            return Out()
        saved, build_deps.subprocess.run = build_deps.subprocess.run, fake_run
        try:
            got = build_deps.owners([os.path.join(d, "libx.so"), real])
        finally:
            build_deps.subprocess.run = saved
        self.assertEqual(got, {os.path.join(d, "libx.so"): "libx-dev", real: "libx1"})

    def test_every_file_of_the_tiers_packages_passes(self):
        have = build_deps.closure(["g++", "libtorch-dev"], self.installed)
        reads = {"t.o": ["/usr/include/c++/12/vector", "/usr/include/c10/core/Device.h"]}
        owner = {"/usr/include/c++/12/vector": "libstdc++-12-dev", "/usr/include/c10/core/Device.h": "libtorch-dev"}
        self.assertEqual(build_deps.package_problems(reads, [], owner, have), [])


if __name__ == "__main__":
    unittest.main()
