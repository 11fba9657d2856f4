# bc_header_dependency(<package> <min version> <target> <url> <sha256> <what>): the installed
# package where find_package finds it; else the release archive at <url>, fetched at configure
# time, checked against <sha256>, its include/ folder behind <target>. Never its own CMake
# project (no tests or installs of theirs). A fetch that fails is one configure error saying
# which package to install instead.
#
# Offline, FETCHCONTENT_SOURCE_DIR_<PACKAGE> names a folder holding the archive's contents (its
# include/), as FetchContent takes it.
include(FetchContent)
function(bc_header_dependency package min_version target url sha256 what)
  find_package(${package} ${min_version} QUIET)
  if(${package}_FOUND)
    return()
  endif()
  string(TOLOWER "${package}" lower)
  string(TOUPPER "${package}" upper)
  set(extra)
  if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.24)
    list(APPEND extra DOWNLOAD_EXTRACT_TIMESTAMP TRUE)
  endif()
  # SOURCE_SUBDIR names no CMakeLists.txt: the archive is populated, never added as a project.
  FetchContent_Declare(${lower} URL "${url}" URL_HASH SHA256=${sha256} SOURCE_SUBDIR batchcheck-headers-only ${extra})
  FetchContent_MakeAvailable(${lower})
  set(include "${${lower}_SOURCE_DIR}/include")
  if(NOT EXISTS "${include}")
    message(FATAL_ERROR "batchcheck: ${package} is not installed and ${what} could not be fetched from ${url}: "
      "install its headers (Debian: apt install libcli11-dev nlohmann-json3-dev libspdlog-dev), or give the folder of the archive's "
      "contents with -DFETCHCONTENT_SOURCE_DIR_${upper}=...")
  endif()
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${include}")
  message(STATUS "batchcheck: ${package} not installed: ${what} from its release archive (${include})")
endfunction()
