"""tools/layers.py against planted trees: each rule it states is one it can break on."""
import json
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

    def test_the_engine_folders_run_down_from_its_base_to_what_wires_them(self):
        self.assertEqual(self.problems({
            "lib/engine/torch_util.h": '#include "engine/compat.h"\n#include "core/parse/npy.h"\n',
            "lib/engine/checks/tensor_checks.cpp": '#include "engine/checks/region_loss.h"\n#include "engine/torch_util.h"\n',
            "lib/engine/model/runner.cpp": '#include "engine/localize/localize.h"\n#include "engine/checks/tensor_checks.h"\n'
                                           '#include "engine/cuda_runtime.h"\n#include "image/folder.h"\n',
            "lib/engine/torch_backend.cpp": '#include "engine/data/data_source.h"\n#include "engine/model/model_runner.h"\n',
        }), [])
        self.assertEqual(self.problems({
            "lib/engine/torch_util.h": '#include "engine/data/data_source.h"\n',
            "lib/engine/checks/tensor_checks.cpp": '#include "engine/model/model_runner.h"\n',
            "lib/engine/data/pt_source.cpp": '#include "engine/torch_backend.h"\n',
            "lib/engine/localize/localize.cpp": '#include "engine/data/data_source.h"\n',
        }), ["lib/engine/checks/tensor_checks.cpp:1: includes engine/model/model_runner.h: engine/checks may not include engine/model",
             "lib/engine/data/pt_source.cpp:1: includes engine/torch_backend.h: engine/data may not include engine",
             "lib/engine/localize/localize.cpp:1: includes engine/data/data_source.h: engine/localize may not include engine/data",
             "lib/engine/torch_util.h:1: includes engine/data/data_source.h: engine/base may not include engine/data"])

    def test_the_graph_from_a_compile_database_is_what_the_build_compiles(self):
        root = tree({
            "lib/engine/data/pt_source.cpp": '#include "engine/data/pt_source.h"\n',
            "lib/engine/data/pt_source.h": '#include "engine/model/model_runner.h"\n',
            "lib/engine/model/model_runner.h": "",
            "lib/engine/model/unbuilt.cpp": '#include "engine/torch_backend.h"\n',
        })
        with open(os.path.join(root, "compile_commands.json"), "w") as f:
            json.dump([{"directory": os.path.join(root, "build"), "file": "../lib/engine/data/pt_source.cpp",
                        "command": "c++ -c pt_source.cpp"}], f)
        files = layers.compiled_files(root, os.path.join(root, "compile_commands.json"))
        self.assertEqual(files, ["lib/engine/data/pt_source.cpp", "lib/engine/data/pt_source.h",
                                 "lib/engine/model/model_runner.h"])
        self.assertEqual(layers.check(root, files)[0], [
            "lib/engine/data/pt_source.h:1: includes engine/model/model_runner.h: engine/data may not include engine/model"])
        with open(os.path.join(root, "bad.json"), "w") as f:
            f.write("[{")
        self.assertEqual(layers.main(["--compile-db", os.path.join(root, "bad.json"), root]), 2)

    def test_a_module_outside_the_layer_folders(self):
        self.assertEqual(sorted(self.problems({"lib/core/scan.h": "", "lib/core/misc/util.h": "", "lib/engine/misc/x.h": ""})), [
            "lib/core/misc/util.h: lib/core/misc/ is not a layer: add it to tools/layers.py (and ARCHITECTURE.md)",
            "lib/core/scan.h: lies in lib/core/ itself: every core module belongs to a layer folder",
            "lib/engine/misc/x.h: lib/engine/misc/ is not a layer: add it to tools/layers.py (and ARCHITECTURE.md)"])

    def test_every_layer_folder_is_described_in_the_architecture_page(self):
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        with open(os.path.join(root, "ARCHITECTURE.md")) as f:
            page = f.read()
        for folder in layers.CORE:
            self.assertIn(f"`core/{folder}/`", page)
        for folder in layers.ENGINE:
            self.assertIn(f"`engine/{folder}/`", page)


if __name__ == "__main__":
    unittest.main()
