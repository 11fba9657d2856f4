#include "core/journal/journal.h"

#include <unistd.h>

#include "core/base/errors.h"
#include "core/base/files.h"

namespace batchcheck {

namespace {

using json = nlohmann::ordered_json;

template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json();
}
template <class T>
std::optional<T> opt_of(const json& j) {
  if (j.is_null()) return std::nullopt;
  return j.get<T>();
}

json weights_json(const std::vector<NonfiniteWeight>& ws) {
  json out = json::array();
  for (const auto& w : ws) out.push_back({w.name, w.nonfinite, w.values, w.rows, w.rows_total, w.embedding});
  return out;
}

std::vector<NonfiniteWeight> weights_of(const json& j) {
  std::vector<NonfiniteWeight> out;
  for (const json& w : j) {
    out.push_back({w.at(0).get<std::string>(), w.at(1).get<uint64_t>(), w.at(2).get<uint64_t>(),
                   w.at(3).get<std::vector<int64_t>>(), w.at(4).get<uint64_t>(), w.at(5).get<bool>()});
  }
  return out;
}

json meta_json(const TensorMeta& m) {
  return {{"present", m.present}, {"shape", m.shape}, {"dtype", m.dtype}, {"floating", m.floating}};
}
TensorMeta meta_of(const json& j) {
  TensorMeta m;
  m.present = j.at("present").get<bool>();
  m.shape = j.at("shape").get<std::vector<int64_t>>();
  m.dtype = j.at("dtype").get<std::string>();
  m.floating = j.at("floating").get<bool>();
  return m;
}

json step_json(const StepInfo& s) {
  return {{"step", s.step}, {"rank", opt(s.rank)}, {"batch", opt(s.batch)}, {"probe", s.probe}, {"size", s.size}};
}
StepInfo step_of(const json& j) {
  StepInfo s;
  s.step = j.at("step").get<uint64_t>();
  s.rank = opt_of<uint64_t>(j.at("rank"));
  s.batch = opt_of<uint64_t>(j.at("batch"));
  s.probe = j.at("probe").get<bool>();
  s.size = j.at("size").get<uint64_t>();
  return s;
}

json finding_json(const Finding& f) {
  json fixes = json::array();
  for (const auto& x : f.fixes) {
    fixes.push_back({{"id", x.id}, {"title", x.title}, {"code", x.code}, {"tradeoff", x.tradeoff}, {"batch_sizes", x.batch_sizes}});
  }
  json occ = json::array();
  for (const auto& o : f.occurrences) {
    occ.push_back({{"rank", opt(o.rank)}, {"batch", opt(o.batch)}, {"samples", o.samples}, {"count", o.count},
                   {"files", o.files}, {"message", o.message}});
  }
  return {{"id", f.id}, {"severity", static_cast<int>(f.severity)}, {"rank", opt(f.rank)}, {"ranks", f.ranks},
          {"batch", opt(f.batch)}, {"batches", f.batches}, {"samples", f.samples}, {"count", f.count},
          {"stage", f.stage}, {"message", f.message}, {"evidence", f.evidence}, {"cuda", f.cuda_equivalent},
          {"fixes", fixes}, {"probe", f.probe}, {"probe_size", f.probe_size}, {"occurrences", occ},
          {"occurrences_total", f.occurrences_total}};
}
Finding finding_of(const json& j) {
  Finding f;
  f.id = j.at("id").get<std::string>();
  const int sev = j.at("severity").get<int>();
  if (sev < 0 || sev > 2) throw std::out_of_range("severity");
  f.severity = static_cast<Severity>(sev);
  f.rank = opt_of<uint64_t>(j.at("rank"));
  f.ranks = j.at("ranks").get<std::vector<uint64_t>>();
  f.batch = opt_of<uint64_t>(j.at("batch"));
  f.batches = j.at("batches").get<std::vector<uint64_t>>();
  f.samples = j.at("samples").get<std::vector<int64_t>>();
  f.count = j.at("count").get<uint64_t>();
  f.stage = j.at("stage").get<std::string>();
  f.message = j.at("message").get<std::string>();
  f.evidence = j.at("evidence");
  f.cuda_equivalent = j.at("cuda").get<std::string>();
  for (const auto& x : j.at("fixes")) {
    f.fixes.push_back({x.at("id").get<std::string>(), x.at("title").get<std::string>(), x.at("code").get<std::string>(),
                       x.at("tradeoff").get<std::string>(), x.at("batch_sizes").get<std::vector<uint64_t>>()});
  }
  f.probe = j.at("probe").get<bool>();
  f.probe_size = j.at("probe_size").get<uint64_t>();
  for (const auto& o : j.at("occurrences")) {
    f.occurrences.push_back({opt_of<uint64_t>(o.at("rank")), opt_of<uint64_t>(o.at("batch")),
                             o.at("samples").get<std::vector<int64_t>>(), o.at("count").get<uint64_t>(),
                             o.at("files"), o.at("message").get<std::string>(), nullptr});
  }
  f.occurrences_total = j.at("occurrences_total").get<uint64_t>();
  return f;
}

json command_json(const ScanCommand& c) {
  return {{"config_path", c.config_path}, {"output_path", opt(c.output_path)}, {"fail_on", static_cast<int>(c.fail_on)},
          {"device", opt(c.device)},
          {"mode", c.mode ? json(static_cast<int>(*c.mode)) : json()},
          {"precision", c.precision ? json(to_string(*c.precision)) : json()}, {"half_headroom", opt(c.half_headroom)},
          {"edges", c.edges}, {"no_backward", c.no_backward}, {"max_batches", opt(c.max_batches)},
          {"rank", opt(c.rank)}, {"threads", opt(c.threads)}, {"batch_timeout", opt(c.batch_timeout)},
          {"fail_fast", c.fail_fast},
          {"quiet", c.quiet}, {"log_level", log_level_name(c.log_level)}, {"progress", c.progress}, {"handle_signals", c.handle_signals},
          {"shard", c.shard ? json{c.shard->index, c.shard->count, c.shard->source, c.shard->from} : json()}};
}
ScanCommand command_of(const json& j) {
  ScanCommand c;
  c.config_path = j.at("config_path").get<std::string>();
  c.output_path = opt_of<std::string>(j.at("output_path"));
  c.fail_on = static_cast<FailOn>(j.at("fail_on").get<int>());
  c.device = opt_of<std::string>(j.at("device"));
  if (!j.at("mode").is_null()) c.mode = static_cast<Mode>(j.at("mode").get<int>());
  if (const json& p = j.at("precision"); !p.is_null()) c.precision = parse_precision(p.get<std::string>());
  c.half_headroom = opt_of<double>(j.at("half_headroom"));
  c.edges = j.at("edges").get<bool>();
  c.no_backward = j.at("no_backward").get<bool>();
  c.max_batches = opt_of<uint64_t>(j.at("max_batches"));
  c.rank = opt_of<uint64_t>(j.at("rank"));
  c.threads = opt_of<uint64_t>(j.at("threads"));
  c.fail_fast = j.at("fail_fast").get<bool>();
  c.batch_timeout = opt_of<double>(j.at("batch_timeout"));
  c.quiet = j.at("quiet").get<bool>();
  c.log_level = parse_log_level(j.at("log_level").get<std::string>()).value_or(LogLevel::info);
  c.progress = j.at("progress").get<bool>();
  c.handle_signals = j.at("handle_signals").get<bool>();
  if (const json& s = j.at("shard"); !s.is_null()) {
    c.shard = Shard{s.at(0).get<uint64_t>(), s.at(1).get<uint64_t>(), s.at(2).get<std::string>(), s.at(3).get<uint64_t>()};
  }
  return c;
}

}  // namespace

std::string encode_request(const EngineRequest& r) {
  json j = {{"command", command_json(r.command)},
            {"resume", {{"start_step", r.resume.start_step},
                        {"skip", r.resume.skip},
                        {"largest_ok_batch", r.resume.largest_ok_batch},
                        {"localize", r.resume.localize}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

EngineRequest decode_request(const std::string& text) {
  try {
    json j = json::parse(text);
    EngineRequest r;
    r.command = command_of(j.at("command"));
    const json& res = j.at("resume");
    r.resume.start_step = res.at("start_step").get<uint64_t>();
    r.resume.skip = res.at("skip").get<std::set<uint64_t>>();
    r.resume.largest_ok_batch = res.at("largest_ok_batch").get<uint64_t>();
    r.resume.localize = res.at("localize").get<bool>();
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw InternalError(std::string("malformed engine request: ") + e.what());
  }
}

void JournalWriter::write(const json& j) {
  if (into_) {
    into_->push_back(j);
    return;
  }
  std::string line = j.dump(-1, ' ', false, json::error_handler_t::replace);
  line += '\n';
  if (write_all(fd_, line) != 0) ::_exit(1);  // the supervisor is gone
}

void JournalWriter::start(const ScanStart& s) {
  json geometry = json::array();
  for (const auto& f : s.geometry) geometry.push_back(finding_json(f));
  const ModelInfo& m = s.model;
  json line = {{"e", "start"},
         {"data", {{"samples", s.data.samples}, {"input", meta_json(s.data.input)}, {"target", meta_json(s.data.target)},
                   {"has_targets", s.data.has_targets}}},
         {"model", {{"batchnorm_modules", m.batchnorm_modules}, {"format", m.format},
                    {"frozen_train", {m.frozen_train.batch_norm, m.frozen_train.dropout}},
                    {"frozen_eval", {m.frozen_eval.batch_norm, m.frozen_eval.dropout}},
                    {"nonfinite_parameters", m.nonfinite_parameters}, {"nonfinite_buffers", m.nonfinite_buffers},
                    {"call", {m.call.forward, m.call.select, m.call.targets, m.call.loss}},
                    {"nonfinite_weights", weights_json(m.nonfinite_weights)}}},
         {"device", s.device}, {"libtorch", s.libtorch}, {"backward", s.backward}, {"ranks", s.ranks},
         {"replay_steps", s.replay_steps}, {"geometry", geometry}};
  if (!s.device_note.empty()) line["device_note"] = s.device_note;  // only then: parts written before it stay valid
  write(line);
}

// A batch's indices: a run of consecutive indices (the sequential sampler, the probes) as
// its first index and length, anything else as the list.
static json indices_json(const std::vector<int64_t>& idx) {
  bool run = !idx.empty();
  for (std::size_t i = 1; i < idx.size() && run; ++i) run = idx[i] == idx[0] + static_cast<int64_t>(i);
  if (run) return {{"first", idx[0]}, {"count", idx.size()}};
  return idx;
}
static std::vector<int64_t> indices_of(const json& j) {
  if (j.is_array()) return j.get<std::vector<int64_t>>();
  const int64_t first = j.at("first").get<int64_t>();
  const uint64_t count = j.at("count").get<uint64_t>();
  if (count > (uint64_t{1} << 40)) throw std::out_of_range("count");
  std::vector<int64_t> out(count);
  for (uint64_t i = 0; i < count; ++i) out[i] = first + static_cast<int64_t>(i);
  return out;
}

void JournalWriter::begin(const StepInfo& s, const std::vector<int64_t>& indices) {
  write({{"e", "begin"}, {"at", step_json(s)}, {"indices", indices_json(indices)}});
}

void JournalWriter::record(RecordEvent&& r) {
  write({{"e", "record"}, {"at", step_json(r.at)}, {"id", r.id}, {"stage", r.stage}, {"message", r.message},
         {"evidence", r.evidence}, {"samples", r.samples}, {"count", r.count}, {"cuda", r.cuda},
         {"batch_indices", r.batch_indices}});
}

void JournalWriter::end(const StepEnd& e) {
  json shapes;
  if (e.shapes) {
    shapes = {{"index", e.shapes->index}, {"size", e.shapes->size}, {"input", meta_json(e.shapes->input)},
              {"output", meta_json(e.shapes->output)}, {"target", meta_json(e.shapes->target)}};
  }
  json stats;
  if (e.stats) {
    const BatchStats& b = *e.stats;
    stats = {{"pred", {opt(b.pred_min), opt(b.pred_max)}}, {"nonfinite", b.pred_nonfinite},
             {"loss", opt(b.loss)}, {"loss_nonfinite", b.loss_nonfinite},
             {"band", {opt(b.band_lo), opt(b.band_hi)}}};
  }
  write({{"e", "end"}, {"step", e.step}, {"forward_ok", e.forward_ok}, {"size", e.size}, {"shapes", shapes},
         {"stats", stats}});
}

void JournalWriter::localizing(const StepInfo& s) { write({{"e", "localizing"}, {"at", step_json(s)}}); }

void JournalWriter::cause(CauseEvent&& c) {
  write({{"e", "cause"}, {"at", step_json(c.at)}, {"ids", c.ids}, {"root_cause", c.root_cause}});
}

void JournalWriter::split(uint64_t jobs, uint64_t from) { write({{"e", "split"}, {"jobs", jobs}, {"from", from}}); }

void JournalWriter::finish(const ScanEnd& e) {
  write({{"e", "finish"}, {"complete", e.complete}, {"device_lost", e.device_lost}, {"stopped_at_error", e.stopped_at_error}});
}

void JournalWriter::loading(const std::string& file) { write({{"e", "loading"}, {"file", file}}); }

void JournalWriter::error(const std::string& kind, const std::string& file, const std::string& where,
                          const std::string& what) {
  write({{"e", "error"}, {"kind", kind}, {"file", file}, {"where", where}, {"what", what}});
}

JournalLine apply_journal_line(const std::string& line, ScanSink& sink) {
  json j;
  try {
    j = json::parse(line);
  } catch (const std::exception&) {
    return {JournalLine::Kind::Malformed, "", "", "", ""};
  }
  return apply_journal_json(j, sink);
}

JournalLine apply_journal_json(const nlohmann::ordered_json& j, ScanSink& sink) {
  JournalLine out;
  try {
    const std::string e = j.at("e").get<std::string>();
    if (e == "start") {
      ScanStart s;
      const json& d = j.at("data");
      s.data.samples = d.at("samples").get<uint64_t>();
      s.data.input = meta_of(d.at("input"));
      s.data.target = meta_of(d.at("target"));
      s.data.has_targets = d.at("has_targets").get<bool>();
      const json& m = j.at("model");
      s.model.batchnorm_modules = m.at("batchnorm_modules").get<std::vector<std::string>>();
      s.model.nonfinite_parameters = m.at("nonfinite_parameters").get<std::vector<std::string>>();
      s.model.nonfinite_buffers = m.at("nonfinite_buffers").get<std::vector<std::string>>();
      s.model.format = m.at("format").get<std::string>();
      if (const auto w = m.find("nonfinite_weights"); w != m.end()) s.model.nonfinite_weights = weights_of(*w);
      if (const auto c = m.find("call"); c != m.end()) {
        s.model.call = {c->at(0).get<std::string>(), c->at(1).get<std::string>(), c->at(2).get<std::string>(),
                        c->at(3).get<std::string>()};
      }
      s.model.frozen_train = {m.at("frozen_train").at(0).get<uint64_t>(), m.at("frozen_train").at(1).get<uint64_t>()};
      s.model.frozen_eval = {m.at("frozen_eval").at(0).get<uint64_t>(), m.at("frozen_eval").at(1).get<uint64_t>()};
      s.device = j.at("device").get<std::string>();
      s.device_note = j.value("device_note", "");
      s.libtorch = j.at("libtorch").get<std::string>();
      s.backward = j.at("backward").get<bool>();
      s.ranks = j.at("ranks").get<std::vector<uint64_t>>();
      s.replay_steps = j.at("replay_steps").get<uint64_t>();
      for (const auto& f : j.at("geometry")) s.geometry.push_back(finding_of(f));
      sink.start(s);
    } else if (e == "begin") {
      sink.begin(step_of(j.at("at")), indices_of(j.at("indices")));
    } else if (e == "record") {
      RecordEvent r;
      r.at = step_of(j.at("at"));
      r.id = j.at("id").get<std::string>();
      r.stage = j.at("stage").get<std::string>();
      r.message = j.at("message").get<std::string>();
      r.evidence = j.at("evidence");
      r.samples = j.at("samples").get<std::vector<int64_t>>();
      r.count = j.at("count").get<uint64_t>();
      r.cuda = j.at("cuda").get<std::string>();
      r.batch_indices = j.at("batch_indices").get<std::vector<int64_t>>();
      sink.record(std::move(r));
    } else if (e == "end") {
      StepEnd s;
      s.step = j.at("step").get<uint64_t>();
      s.forward_ok = j.at("forward_ok").get<bool>();
      s.size = j.at("size").get<uint64_t>();
      const json& sh = j.at("shapes");
      if (!sh.is_null()) {
        s.shapes = BatchShapes{sh.at("index").get<uint64_t>(), sh.at("size").get<uint64_t>(), meta_of(sh.at("input")),
                               meta_of(sh.at("output")), meta_of(sh.at("target"))};
      }
      const json& st = j.at("stats");
      if (!st.is_null()) {
        BatchStats b;
        b.pred_min = opt_of<double>(st.at("pred").at(0));
        b.pred_max = opt_of<double>(st.at("pred").at(1));
        b.pred_nonfinite = st.at("nonfinite").get<uint64_t>();
        b.loss = opt_of<double>(st.at("loss"));
        b.loss_nonfinite = st.at("loss_nonfinite").get<bool>();
        b.band_lo = opt_of<double>(st.at("band").at(0));
        b.band_hi = opt_of<double>(st.at("band").at(1));
        s.stats = b;
      }
      sink.end(s);
    } else if (e == "localizing") {
      sink.localizing(step_of(j.at("at")));
    } else if (e == "cause") {
      CauseEvent c;
      c.at = step_of(j.at("at"));
      c.ids = j.at("ids").get<std::vector<std::string>>();
      c.root_cause = j.at("root_cause");
      if (!c.root_cause.is_null() && !c.root_cause.is_object()) throw std::invalid_argument("root_cause");
      sink.cause(std::move(c));
    } else if (e == "split") {
      const uint64_t jobs = j.at("jobs").get<uint64_t>();
      if (jobs < 2) throw std::invalid_argument("jobs");
      sink.split(jobs, j.at("from").get<uint64_t>());
    } else if (e == "finish") {
      sink.finish({j.at("complete").get<bool>(), j.at("device_lost").get<bool>(), j.value("stopped_at_error", false)});
    } else if (e == "loading") {
      out.kind = JournalLine::Kind::Loading;
      out.file = j.at("file").get<std::string>();
    } else if (e == "error") {
      out.kind = JournalLine::Kind::Error;
      out.error_kind = j.at("kind").get<std::string>();
      out.file = j.at("file").get<std::string>();
      out.where = j.at("where").get<std::string>();
      out.what = j.at("what").get<std::string>();
    } else {
      out.kind = JournalLine::Kind::Malformed;
    }
  } catch (const std::exception&) {
    out.kind = JournalLine::Kind::Malformed;
  }
  return out;
}

}  // namespace batchcheck
