"""tools/layers.py against planted trees: each rule it states is one it can break on."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import layers  # noqa: E402


def tree(files):
    root = tempfile.mkdtemp()
    for rel, text in files.items():
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(root, rel), "w") as f:
            f.write(text)
    return root


class Layers(unittest.TestCase):
    def problems(self, files):
        return layers.check(tree(files))[0]

    def test_the_repository_has_no_include_breaking_a_rule(self):
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        problems, edges = layers.check(root)
        self.assertEqual(problems, [])
        self.assertGreater(len(edges), 40)

    def test_downward_and_sideways_includes_pass(self):
        self.assertEqual(self.problems({
            "lib/core/plan/geometry.h": '#include "core/config/config.h"\n#include "core/plan/factor.h"\n',
            "lib/engine/backend.cpp": '#include <torch/torch.h>\n#include "core/scan/replay.h"\n#include "image/folder.h"\n',
            "app/cli.cpp": '#include "cli.h"\n#include "engine/scan_command.h"\n#include "supervise/drive.h"\n',
        }), [])

    def test_an_include_running_up_is_named_with_its_line(self):
        self.assertEqual(self.problems({
            "lib/core/config/config.cpp": '#include "core/config/config.h"\n\n#include "core/plan/geometry.h"\n',
        }), ["lib/core/config/config.cpp:3: includes core/plan/geometry.h: core/config may not include core/plan"])

    def test_torch_outside_the_engine_and_the_engine_from_torch_free_code(self):
        self.assertEqual(self.problems({
            "lib/core/pipeline/contract.cpp": "#include <ATen/core/ivalue.h>\n",
            "lib/supervise/jobs.cpp": '#include "engine/torch_backend.h"\n',
            "app/cli.cpp": '#include "engine/torch_backend.h"\n',
            "lib/image/decode.cpp": '#include "supervise/drive.h"\n',
        }), ["app/cli.cpp:1: includes engine/torch_backend.h: app may not include engine",
             "lib/core/pipeline/contract.cpp:1: includes LibTorch outside lib/engine/",
             "lib/image/decode.cpp:1: includes supervise/drive.h: image may not include supervise",
             "lib/supervise/jobs.cpp:1: includes engine/torch_backend.h: supervise may not include engine"])

    def test_a_module_outside_the_layer_folders(self):
        self.assertEqual(sorted(self.problems({"lib/core/scan.h": "", "lib/core/misc/util.h": ""})), [
            "lib/core/misc/util.h: lib/core/misc/ is not a layer: add it to tools/layers.py (and ARCHITECTURE.md)",
            "lib/core/scan.h: lies in lib/core/ itself: every core module belongs to a layer folder"])

    def test_every_layer_folder_is_described_in_the_architecture_page(self):
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        with open(os.path.join(root, "ARCHITECTURE.md")) as f:
            page = f.read()
        for folder in layers.CORE:
            self.assertIn(f"`core/{folder}/`", page)


if __name__ == "__main__":
    unittest.main()
