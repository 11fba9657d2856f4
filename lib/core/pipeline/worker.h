#pragma once
// One background thread running one task at a time: the scan's read-ahead and its
// post-forward checks use it to overlap work with the next forward.
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace batchcheck {

template <typename Result>
class Worker {
 public:
  Worker() : thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // The caller collects each future before submitting the next task.
  std::future<Result> submit(std::function<Result()> fn) {
    std::packaged_task<Result()> task(std::move(fn));
    auto future = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = std::move(task);
      has_task_ = true;
    }
    cv_.notify_one();
    return future;
  }

 private:
  void loop() {
    while (true) {
      std::packaged_task<Result()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || has_task_; });
        if (stop_ && !has_task_) return;
        task = std::move(task_);
        has_task_ = false;
      }
      task();  // exceptions land in the future
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::packaged_task<Result()> task_;
  bool has_task_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace batchcheck
