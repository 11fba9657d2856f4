#include "image/folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "core/base/errors.h"
#include "core/base/text.h"

namespace batchcheck {

namespace fs = std::filesystem;

const std::vector<std::string>& image_extensions() {
  static const std::vector<std::string> ext{".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
  return ext;
}

namespace {

bool image_file(const std::string& name) {
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  for (const auto& e : image_extensions()) {
    if (lower.size() >= e.size() && lower.compare(lower.size() - e.size(), e.size(), e) == 0) return true;
  }
  return false;
}

// stat() follows links, as Python's DirEntry.is_dir() does.
bool is_dir(const fs::path& p, struct stat* st) { return ::stat(p.c_str(), st) == 0 && S_ISDIR(st->st_mode); }

struct Walker {
  const std::string& display;
  // os.walk(followlinks=True) yields (dirpath, dirnames, filenames); ImageFolder sorts those
  // tuples, i.e. by dirpath as a string, then sorts each folder's file names.
  std::vector<std::pair<std::string, std::vector<std::string>>> folders;
  std::vector<std::pair<dev_t, ino_t>> stack;  // the folders being walked, to catch link cycles

  void walk(const fs::path& dir, const std::string& rel) {
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec) return;  // os.walk skips a folder it cannot list (onerror=None)
    std::vector<std::string> files, subdirs;
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      if (ec) break;
      const std::string name = it->path().filename().string();
      struct stat st;
      if (is_dir(it->path(), &st)) {
        subdirs.push_back(name);
      } else {
        files.push_back(name);
      }
    }
    std::sort(files.begin(), files.end());
    folders.emplace_back(rel, std::move(files));
    for (const auto& name : subdirs) {
      const fs::path sub = dir / name;
      struct stat st;
      if (!is_dir(sub, &st)) continue;
      const std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
      if (std::find(stack.begin(), stack.end(), id) != stack.end()) {
        throw InputError(display, "", "the symbolic link " + rel + "/" + name +
                                          " leads back to a folder above it: ImageFolder would list the same files over and over; remove the link");
      }
      stack.push_back(id);
      walk(sub, rel + "/" + name);
      stack.pop_back();
    }
  }
};

}  // namespace

ImageFolderIndex list_image_folder(const std::string& root, const std::string& display) {
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) {
    throw InputError(display, "", std::string("cannot open the image folder: ") + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    throw InputError(display, "", "is not a folder: format \"imagefolder\" reads root/<class>/<image> (set \"path\" to the root folder)");
  }
  ImageFolderIndex index;
  std::error_code ec;
  fs::directory_iterator it(root, ec);
  if (ec) throw InputError(display, "", "cannot list the image folder: " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) throw InputError(display, "", "cannot list the image folder: " + ec.message());
    struct stat cs;
    if (is_dir(it->path(), &cs)) index.classes.push_back(it->path().filename().string());
  }
  std::sort(index.classes.begin(), index.classes.end());
  if (index.classes.empty()) {
    // torchvision: FileNotFoundError("Couldn't find any class folder in <root>.")
    throw InputError(display, "", "Couldn't find any class folder in it: ImageFolder expects root/<class>/<image> (one sub-folder per class)");
  }
  std::vector<std::string> empty;
  for (std::size_t c = 0; c < index.classes.size(); ++c) {
    Walker w{display, {}, {}};
    const fs::path dir = fs::path(root) / index.classes[c];
    struct stat ds;
    if (is_dir(dir, &ds)) w.stack.push_back({ds.st_dev, ds.st_ino});
    w.walk(dir, index.classes[c]);
    std::sort(w.folders.begin(), w.folders.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const std::size_t before = index.files.size();
    for (const auto& [rel, files] : w.folders) {
      for (const auto& f : files) {
        if (!image_file(f)) continue;
        index.files.push_back(rel + "/" + f);
        index.targets.push_back(static_cast<int64_t>(c));
      }
    }
    if (index.files.size() == before) empty.push_back(index.classes[c]);
  }
  if (!empty.empty()) {
    // torchvision raises FileNotFoundError with this text (allow_empty=False).
    throw InputError(display, "", "Found no valid file for the classes " + join(empty) +
                                      ". Supported extensions are: " + join(image_extensions()));
  }
  return index;
}

}  // namespace batchcheck
