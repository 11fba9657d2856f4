#pragma once
// torchvision.datasets.ImageFolder's listing: classes are the sorted sub-folders of the root,
// samples are the files under each (symbolic links followed) whose extension is an image
// extension, folders in sorted path order and files in sorted name order within a folder.
#include <cstdint>
#include <string>
#include <vector>

namespace batchcheck {

struct ImageFolderIndex {
  std::vector<std::string> classes;  // index = class id
  std::vector<std::string> files;    // relative to the root, '/'-separated
  std::vector<int64_t> targets;      // per file: its class id
};

// torchvision's IMG_EXTENSIONS, matched case-insensitively.
const std::vector<std::string>& image_extensions();

// Throws InputError(display, "", ...) with torchvision's own wording where it raises.
ImageFolderIndex list_image_folder(const std::string& root, const std::string& display);

}  // namespace batchcheck
